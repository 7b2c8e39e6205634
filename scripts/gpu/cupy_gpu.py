"""CuPy: NKERNELS distinct ElementwiseKernels, each compiled and run once;
CuPy counts nothing itself, so a miss is a kernel whose compiled file
appeared in CUPY_CACHE_DIR during the run, a hit one that did not."""
import os

import cupy

from _check import emit, files, skip

NKERNELS = 4


def main():
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError: no device, no driver
        skip("cupy", "no GPU (CuPy: %s)" % e)
    cache = os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))
    before = files(cache)
    x = cupy.arange(4096, dtype=cupy.float32) / 4096
    total = 0.0
    for i in range(NKERNELS):
        k = cupy.ElementwiseKernel("float32 x", "float32 y", f"y = sinf(x) * {i + 1} + cosf(x * {i + 2})", f"kbundle_check_{i}")
        total += float(k(x).sum())
    cupy.cuda.Device().synchronize()
    new = [n for n in set(files(cache)) - set(before) if n.endswith(".cubin")]
    emit("cupy", NKERNELS - len(new), len(new), functions=NKERNELS,
         arch=cupy.cuda.Device().compute_capability, checksum=round(total, 3))


if __name__ == "__main__":
    main()
