"""load_bundle on a multi-node job (test/python/cluster_test.go): every
rank writes OUT/rank.R, a JSON object with its host, the result and a
digest of its node's copy (and of the source tree, for comparison), then
the node's leader removes the node-local folder.

Usage: (launcher) python cluster_prog.py BUNDLE TREE LOCAL_PARENT OUT
"""

import hashlib
import json
import os
import shutil
import socket
import sys
import warnings
from pathlib import Path

from mpi4py import MPI

from kbundle import KbundleWarning, load_bundle


def digest(root: Path) -> str:
    """SHA-256 of every entry's path, kind, mode, ns mtime and content
    (but kbundle's own mark at the top)."""
    h = hashlib.sha256()
    if not root.is_dir():
        return "missing"
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            if p == root / ".kbundle-installed":  # kbundle's mark
                continue
            st = p.lstat()
            h.update(f"{p.relative_to(root)}\0{st.st_mode:o}\0{st.st_mtime_ns}\0".encode())
            if p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


def main() -> None:
    bundle, tree, parent, out = sys.argv[1:5]
    comm = MPI.COMM_WORLD
    os.makedirs(parent, exist_ok=True)  # node-local
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        res = load_bundle(comm, bundle=bundle, dest=os.path.join(parent, "dest"))
    comm.Barrier()  # every node's copy is in place (or none is)
    rep = {
        "rank": comm.Get_rank(), "host": socket.gethostname(), "ok": res.ok, "kind": res.kind,
        "reason": res.reason, "nodes": res.nodes, "ranks": res.ranks, "leader": res.leader,
        "dest": res.dest, "env": dict(res.env), "environ": os.environ.get("TRITON_CACHE_DIR", ""),
        "warnings": sum(1 for w in got if issubclass(w.category, KbundleWarning)),
        "digest": digest(Path(res.dest)) if res.ok else "", "want": digest(Path(tree)),
        "beside": sorted(os.listdir(parent)),
    }
    with open(os.path.join(out, f"rank.{comm.Get_rank()}"), "w") as f:
        json.dump(rep, f)
    comm.Barrier()
    if res.leader or not res.ok:
        shutil.rmtree(parent, ignore_errors=True)


main()
