"""Numba workload for kbundle's JIT tests.

Defines NFUNCS functions with @njit(cache=True), calls each with every
signature in SIGNATURES, and prints one JSON line with Numba's own
dispatcher counters (stats.cache_hits / stats.cache_misses, per
signature): a miss means that overload was compiled in this process.
The rank comes from the launcher's environment; the script itself does
not use MPI.
"""
import os
import sys

import numpy as np
from numba import njit

from _common import emit, rank

NFUNCS = 12


# Twelve distinct bodies, so every function is its own cache entry.
@njit(cache=True)
def f00(x): return x + 1
@njit(cache=True)
def f01(x): return x * 2
@njit(cache=True)
def f02(x): return x - 3
@njit(cache=True)
def f03(x): return x * x
@njit(cache=True)
def f04(x): return (x + 1) * (x - 1)
@njit(cache=True)
def f05(x): return x / 2
@njit(cache=True)
def f06(x): return np.abs(x) + 7
@njit(cache=True)
def f07(x): return x * 3 + x
@njit(cache=True)
def f08(x): return -x
@njit(cache=True)
def f09(x): return x * x * x
@njit(cache=True)
def f10(x): return x + x + x + x
@njit(cache=True)
def f11(x): return (x - 5) * 4


FUNCS = [f00, f01, f02, f03, f04, f05, f06, f07, f08, f09, f10, f11]
# Three signatures each: int64 scalar, float64 scalar, float64 array.
ARGS = [np.int64(3), np.float64(2.5), np.arange(4, dtype=np.float64)]
# KBUNDLE_TEST_NEW_SHAPES=1: "new shapes", a fourth signature (an int32
# array) for the first half of the functions only (test/cluster's loop:
# the harvest's layer must hold those functions' cache units, no others).
# KBUNDLE_TEST_EXTRA_DTYPE names that array's dtype instead (test/cluster's
# conflict: every node a dtype of its own, so every node writes its own
# index and a data file of the same name).
NEW_SHAPES = os.environ.get("KBUNDLE_TEST_NEW_SHAPES") == "1"
EXTRA = np.arange(4, dtype=os.environ.get("KBUNDLE_TEST_EXTRA_DTYPE", "int32"))


def main():
    assert len(FUNCS) == NFUNCS
    hits = misses = 0
    missed = []
    overloads = 0
    for i, f in enumerate(FUNCS):
        args = ARGS + [EXTRA] if NEW_SHAPES and i < NFUNCS // 2 else ARGS
        for a in args:
            f(a)
        overloads += len(args)
        st = f.stats
        h = sum(st.cache_hits.values())
        m = sum(st.cache_misses.values())
        hits += h
        misses += m
        if m:
            missed.append(f.__name__)
    emit({"rank": rank(), "functions": len(FUNCS),
                      "overloads": overloads,
                      "hits": hits, "misses": misses, "missed": missed,
                      "cache_dir": os.environ.get("NUMBA_CACHE_DIR", "")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
