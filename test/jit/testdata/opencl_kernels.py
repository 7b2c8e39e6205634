"""PyOpenCL (on pocl) workload for kbundle's JIT tests.

Builds NPROGS distinct OpenCL programs through PyOpenCL's binary cache,
runs each kernel once and checks its result, and prints one JSON line:
how many programs PyOpenCL found in its cache (its own "binary cache hit"
/ "binary cache miss" log records) and how many it built from source.
Whether pocl rebuilt anything is seen from outside: a pocl rebuild writes
new files into POCL_CACHE_DIR.
"""
import logging
import sys

import numpy as np
import pyopencl as cl

from _common import emit, rank

NPROGS = 8


class Counter(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.hits = 0
        self.misses = 0

    def emit(self, record):
        msg = record.getMessage()
        if "binary cache hit" in msg:
            self.hits += 1
        elif "binary cache miss" in msg:
            self.misses += 1


def source(i):
    return """
__kernel void k%d(__global const float *a, __global float *out) {
    int g = get_global_id(0);
    out[g] = a[g] * %d.0f + %d.0f;
}
""" % (i, i + 2, i)


def main():
    counter = Counter()
    log = logging.getLogger("pyopencl")
    log.setLevel(logging.DEBUG)
    log.addHandler(counter)
    log.propagate = False

    platforms = [p for p in cl.get_platforms() if "Portable Computing Language" in p.name or "pocl" in p.name.lower()]
    if not platforms:
        emit({"rank": rank(), "error": "no pocl platform"})
        return 3
    ctx = cl.Context(platforms[0].get_devices())
    queue = cl.CommandQueue(ctx)
    a = np.arange(16, dtype=np.float32)
    mf = cl.mem_flags
    a_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    out_buf = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)
    built_from_source = 0
    wrong = []
    for i in range(NPROGS):
        prg = cl.Program(ctx, source(i)).build()
        info = getattr(prg, "_build_duration_info", None)
        if info is not None and not info[1]:
            built_from_source += 1
        getattr(prg, "k%d" % i)(queue, a.shape, None, a_buf, out_buf)
        out = np.empty_like(a)
        cl.enqueue_copy(queue, out, out_buf)
        if not np.allclose(out, a * (i + 2) + i):
            wrong.append(i)
    emit({"rank": rank(), "programs": NPROGS,
                      "hits": counter.hits, "misses": counter.misses,
                      "built_from_source": built_from_source, "wrong": wrong})
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
