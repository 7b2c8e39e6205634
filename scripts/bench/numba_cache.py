"""Fill NUMBA_CACHE_DIR with a realistic Numba cache: N generated
@njit(cache=True) functions, each compiled for several signatures.

Usage: NUMBA_CACHE_DIR=DIR python3 numba_cache.py SRC_DIR N
"""
import importlib.util
import os
import sys

src_dir, n = sys.argv[1], int(sys.argv[2])
os.makedirs(src_dir, exist_ok=True)
path = os.path.join(src_dir, "kernels_bench.py")
ops = ["a[i] * b + {k}", "a[i] - b * {k}", "(a[i] + {k}) * (a[i] - b)", "a[i] * a[i] + b / ({k} + 1)"]
with open(path, "w") as f:
    f.write("from numba import njit\n\n")
    for i in range(n):
        expr = ops[i % len(ops)].format(k=i)
        f.write(f"@njit(cache=True)\ndef k{i}(a, b):\n    s = 0\n    for i in range(a.shape[0]):\n        s += {expr}\n    return s\n\n")
spec = importlib.util.spec_from_file_location("kernels_bench", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

import numpy as np
args = [(np.arange(8, dtype=np.float64), 2.0), (np.arange(8, dtype=np.float32), 2.0),
        (np.arange(8, dtype=np.int64), 3)]
for i in range(n):
    fn = getattr(mod, f"k{i}")
    for a, b in args:
        fn(a, b)
print(f"compiled {n} functions x {len(args)} signatures")
