"""Time to a warm first step, Numba (scripts/bench/harvest.sh).

The "first step" is one call of each of N functions compiled with
@njit(cache=True): the program a job starts with. `--prepare DIR N` writes
the N functions once into DIR/numba_fns.py (Numba's index records the
source file's path and mtime, so every run must import the same file);
a run imports it from $KBUNDLE_BENCH_FNS and prints one JSON line:
the step's seconds, and Numba's cache hits and misses.
"""
import json
import os
import sys
import time

TEMPLATE = '''
@njit(cache=True)
def f{i}(a):
    s = 0.0
    for k in range(a.shape[0]):
        v = a[k] * {i}.5
        if v > {m}:
            s += math.sin(v) * k - math.sqrt(abs(v) + {i})
        else:
            s -= math.cos(v) + math.log1p(abs(v)) * {i}
    for j in range(1, a.shape[0]):
        s += (a[j] - a[j - 1]) ** 2 / (j + {i})
        if s > 1e9:
            s = s % 1e9
    return s + np.sum(a * {i}) + np.max(a) - np.min(a)
'''


def prepare(d, n):
    src = ["import math", "import numpy as np", "from numba import njit"]
    src += [TEMPLATE.format(i=i, m=i % 7) for i in range(n)]
    src.append("FUNCS = [%s]" % ", ".join("f%d" % i for i in range(n)))
    with open(os.path.join(d, "numba_fns.py"), "w") as f:
        f.write("\n".join(src) + "\n")


def main():
    if sys.argv[1:2] == ["--prepare"]:
        prepare(sys.argv[2], int(sys.argv[3]))
        return 0
    t0 = time.monotonic()
    if os.environ.get("KBUNDLE_BENCH_LOAD"):
        import bench_inproc  # noqa: F401 (mdlat.sh's inproc case: loads the set)
    sys.path.insert(0, os.environ["KBUNDLE_BENCH_FNS"])
    import numpy as np
    import numba_fns
    a = np.linspace(0.0, 10.0, 64)
    total = sum(f(a) for f in numba_fns.FUNCS)
    hits = sum(sum(f.stats.cache_hits.values()) for f in numba_fns.FUNCS)
    misses = sum(sum(f.stats.cache_misses.values()) for f in numba_fns.FUNCS)
    print(json.dumps({"step_seconds": time.monotonic() - t0, "hits": hits, "misses": misses, "value": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
