"""Time to a warm first step, PyTorch Inductor (scripts/bench/harvest.sh).

The "first step" runs N distinct functions through torch.compile (CPU:
Inductor writes C++ kernels, compiled with the system's compiler), N from
$KBUNDLE_BENCH_N. The caches are Inductor's own (FX graph cache and the
compiled kernels) under TORCHINDUCTOR_CACHE_DIR, as `kbundle load` prints
for the inductor preset. Prints one JSON line: the step's seconds, and
the FX graph cache's hits and misses (torch._dynamo.utils.counters).
"""
import json
import os
import sys
import time

t0 = time.monotonic()
import torch  # noqa: E402

torch.set_num_threads(1)


def make(i):
    def f(x, w):
        y = x
        for k in range(10 + i % 3):
            y = torch.tanh(y @ w + (i + k)) * torch.sigmoid(y - k)
            y = torch.nn.functional.layer_norm(y, y.shape[-1:]) + torch.cos(y * (i + 1))
        return y.sum(dim=-1).softmax(dim=0)
    return torch.compile(f)


def main():
    n = int(os.environ.get("KBUNDLE_BENCH_N", "2"))
    x = torch.linspace(0, 1, 64 * 32).reshape(64, 32)
    w = torch.linspace(-1, 1, 32 * 32).reshape(32, 32)
    total = sum(float(make(i)(x, w).max()) for i in range(n))
    from torch._dynamo.utils import counters
    print(json.dumps({"step_seconds": time.monotonic() - t0,
                      "hits": counters["inductor"]["fxgraph_cache_hit"],
                      "misses": counters["inductor"]["fxgraph_cache_miss"], "value": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
