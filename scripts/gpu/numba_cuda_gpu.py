"""numba-cuda: NFUNCS @cuda.jit(cache=True) kernels, each launched once;
hits and misses by the dispatchers' own stats where numba-cuda keeps
them, else by the index and data files NUMBA_CACHE_DIR gained."""
import os

import numpy as np
from numba import cuda

from _check import emit, files, skip

NFUNCS = 3


@cuda.jit(cache=True)
def k0(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * 2.0 + 1.0


@cuda.jit(cache=True)
def k1(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * x[i] - 3.0


@cuda.jit(cache=True)
def k2(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = (x[i] + 1.0) / (x[i] + 2.0)


def main():
    if not cuda.is_available():
        skip("numba-cuda", "no GPU (numba-cuda: cuda.is_available() is False)")
    cache = os.environ.get("NUMBA_CACHE_DIR", "")
    before = files(cache)
    x = cuda.to_device(np.arange(1024, dtype=np.float32))
    out = cuda.device_array_like(x)
    total = 0.0
    kernels = (k0, k1, k2)
    for k in kernels:
        k[4, 256](x, out)
        total += float(out.copy_to_host().sum())
    stats = [getattr(k, "stats", None) for k in kernels]
    if all(s is not None and hasattr(s, "cache_hits") for s in stats):
        hits = sum(sum(s.cache_hits.values()) for s in stats)
        misses = sum(sum(s.cache_misses.values()) for s in stats)
        how = "stats"
    else:
        new = [n for n in set(files(cache)) - set(before) if n.endswith(".nbc")]
        misses, hits, how = len(new), NFUNCS - len(new), "files"
    emit("numba-cuda", hits, misses, functions=NFUNCS, counted_by=how, checksum=round(total, 3))


if __name__ == "__main__":
    main()
