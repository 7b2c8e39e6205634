"""torch.compile on the GPU (Inductor, Triton kernels): NFUNCS distinct
functions, each called once; hits and misses by torch's own counters
(the FX graph cache), and the files Triton's cache gained."""
import os

os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")

import torch  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from _check import emit, files, skip  # noqa: E402

NFUNCS = 3


def make(i):
    def f(x):
        y = torch.sin(x) * (i + 1) + torch.cos(x * (i + 2))
        for _ in range(i % 2 + 1):
            y = torch.relu(y * y + x)
        return y.sum() + i
    f.__name__ = f"kernel{i:02d}"
    return torch.compile(f)


def main():
    if not torch.cuda.is_available():
        skip("inductor", "no GPU (torch %s: torch.cuda.is_available() is False)" % torch.__version__)
    triton = os.environ.get("TRITON_CACHE_DIR", "")
    before = files(triton)
    x = torch.arange(4096.0, device="cuda").reshape(64, 64) / 4096.0
    total = sum(float(make(i)(x)) for i in range(NFUNCS))
    torch.cuda.synchronize()
    ind = counters["inductor"]
    emit("inductor", ind["fxgraph_cache_hit"], ind["fxgraph_cache_miss"], bypass=ind["fxgraph_cache_bypass"],
         functions=NFUNCS, triton_new_files=len(set(files(triton)) - set(before)),
         gpu=torch.cuda.get_device_name(), checksum=round(total, 3))


if __name__ == "__main__":
    main()
