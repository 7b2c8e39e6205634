"""PyTorch Inductor workload for kbundle's JIT tests.

Compiles NFUNCS distinct functions with torch.compile on the CPU (Inductor
generates and builds C++ kernels), calls each once, and prints one JSON
line with torch's own counters (torch._dynamo.utils.counters): the FX
graph cache's hits, misses and bypasses, and AOTAutograd's cache hits and
misses. A miss means that graph was compiled in this process. The rank
comes from the launcher's environment; the script itself does not use MPI.
"""
import os

import torch
from torch._dynamo.utils import counters

from _common import emit, rank

NFUNCS = 4


def make(i):
    # Distinct bodies: each is its own FX graph and cache entry.
    def f(x):
        y = torch.sin(x) * (i + 1) + torch.cos(x * (i + 2))
        for _ in range(i % 3 + 1):
            y = torch.tanh(y @ y.T / y.shape[0]) + x
        return y.sum() + i
    f.__name__ = f"kernel{i:02d}"
    return torch.compile(f)


def main():
    torch.set_num_threads(1)
    x = torch.arange(64.0).reshape(8, 8) / 64.0
    fs = [make(i) for i in range(NFUNCS)]
    results = [float(f(x)) for f in fs]
    # KBUNDLE_TEST_NEW_SHAPES=1: "new shapes", the first half of the
    # functions called on a 16x16 input too (test/cluster's harvest loop).
    if os.environ.get("KBUNDLE_TEST_NEW_SHAPES") == "1":
        x16 = torch.arange(256.0).reshape(16, 16) / 256.0
        results += [float(f(x16)) for f in fs[: NFUNCS // 2]]
    ind, aot = counters["inductor"], counters["aot_autograd"]
    emit({
        "rank": rank(),
        "functions": NFUNCS,
        "fx_hits": ind["fxgraph_cache_hit"],
        "fx_misses": ind["fxgraph_cache_miss"],
        "fx_bypass": ind["fxgraph_cache_bypass"],
        "aot_hits": aot["autograd_cache_hit"],
        "aot_misses": aot["autograd_cache_miss"],
        "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""),
        "checksum": round(sum(results), 4),
    })


if __name__ == "__main__":
    main()
