"""triton_replay.py: the hit path of Triton's FileCacheManager, replayed
for every kernel of a cache without importing Triton (B3, `make
bench-triton`, scripts/bench/triton.sh), so that 12 ranks fit on 2 cores.

For each kernel (KEY NAME, one a line in $KBUNDLE_BENCH_KERNELS), as
triton/runtime/cache.py's get_group and the launcher's reads do:
os.path.exists(__grp__NAME.json), open and parse it; os.path.exists for
each child, resolved by its base name in the kernel's directory; open and
read the metadata NAME.json and the NAME.cubin. The cache is
$TRITON_CACHE_DIR; with $KBUNDLE_BENCH_LOAD (a bundle) and
$KBUNDLE_BENCH_DEST, kbundle.load_bundle(MPI.COMM_WORLD) loads it first,
in this process, and sets TRITON_CACHE_DIR. Prints one JSON line.
"""
import json
import os
import time

t0 = time.monotonic()
if os.environ.get("KBUNDLE_BENCH_LOAD"):
    import bench_inproc  # noqa: F401 (M3: loads the set)
t1 = time.monotonic()
cache = os.environ["TRITON_CACHE_DIR"]
hits = misses = nbytes = 0
with open(os.environ["KBUNDLE_BENCH_KERNELS"]) as f:
    kernels = [line.split() for line in f if line.strip()]
for key, name in kernels:
    d = os.path.join(cache, key)
    grp = os.path.join(d, "__grp__" + name + ".json")
    if not os.path.exists(grp):
        misses += 1
        continue
    with open(grp) as g:
        children = json.load(g)["child_paths"]
    found = {c: os.path.join(d, os.path.basename(p)) for c, p in children.items()
             if os.path.exists(os.path.join(d, os.path.basename(p)))}
    if len(found) != len(children):
        misses += 1
        continue
    with open(found[name + ".json"]) as m:
        json.load(m)
    with open(found[name + ".cubin"], "rb") as c:
        nbytes += len(c.read())
    hits += 1
print(json.dumps({"load_seconds": t1 - t0, "replay_seconds": time.monotonic() - t1,
                  "hits": hits, "misses": misses, "cubin_bytes": nbytes}))
