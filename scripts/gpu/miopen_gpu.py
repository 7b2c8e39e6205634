"""MIOpen (PyTorch on ROCm): a few small convolutions with
torch.backends.cudnn.benchmark on, so MIOpen searches (Find) and
compiles, filling its user find-db and perf-db and its kernel cache.
Skipped on NVIDIA (torch.version.hip is None). MIOpen counts nothing
that PyTorch shows: a miss is a record the databases gained during the
run (a line of a text .ufdb.txt/.udb.txt, a row of a SQLite .udb/.ukdb),
a hit a record that was there before, when the run added none.

The layout, from ROCm/MIOpen src/db_path.cpp.in (MIOPEN_USER_DB_PATH:
the user find-db ARCH_CUs.HIP.X_Y_Z.ufdb.txt, src/find_db.cpp, and
perf-db .udb) and src/binary_cache.cpp (MIOPEN_CUSTOM_CACHE_DIR: the
kernel cache ARCH_CUs.ukdb, SQLite table kern_db)."""
import os
import sqlite3

from _check import emit, skip

NAME = "miopen"


def records(dirs):
    """Records per database file under dirs."""
    out = {}
    for d in dirs:
        for root, _, names in os.walk(d or "/nonexistent"):
            for n in names:
                p = os.path.join(root, n)
                try:
                    if n.endswith(".txt"):
                        with open(p, "rb") as f:
                            out[p] = sum(1 for line in f if line.strip())
                    elif n.endswith((".udb", ".ukdb")):
                        db = sqlite3.connect("file:%s?mode=ro" % p, uri=True)
                        try:
                            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
                            out[p] = sum(db.execute('SELECT COUNT(*) FROM "%s"' % t).fetchone()[0] for t in tables)
                        finally:
                            db.close()
                except (OSError, sqlite3.Error):
                    pass
    return out


def main():
    import torch
    if torch.version.hip is None:
        skip(NAME, "not ROCm (torch %s: torch.version.hip is None): MIOpen is AMD's" % torch.__version__)
    if not torch.cuda.is_available():
        skip(NAME, "no GPU (torch %s, HIP %s)" % (torch.__version__, torch.version.hip))
    torch.backends.cudnn.benchmark = True
    dirs = [os.environ.get("MIOPEN_USER_DB_PATH", ""), os.environ.get("MIOPEN_CUSTOM_CACHE_DIR", "")]
    before = records(dirs)
    total = 0.0
    for cin, cout, k in ((3, 8, 3), (8, 16, 1)):
        conv = torch.nn.Conv2d(cin, cout, k, padding=k // 2).cuda().half()
        x = torch.randn(2, cin, 32, 32, device="cuda", dtype=torch.float16)
        total += float(conv(x).float().abs().sum())
    torch.cuda.synchronize()
    after = records(dirs)
    new = sum(max(0, n - before.get(p, 0)) for p, n in after.items())
    emit(NAME, sum(before.values()) if new == 0 else 0, new, databases=sorted(os.path.basename(p) for p in after),
         gpu=torch.cuda.get_device_name(), hip=torch.version.hip, checksum=round(total, 1))


if __name__ == "__main__":
    main()
