"""A torchrun worker for test/python's TestTorchInductor: a real Inductor
program (torch.compile on CPU) that calls kbundle.load_bundle over
torch.distributed's gloo group before its first compiled call, then
reports the FX-graph cache's hits and misses; with HARVEST 1 it then
harvests what it compiled. argv: BUNDLE DEST SHAPE HARVEST. Without a
BUNDLE ("-") it only compiles (the warm-up)."""

import json
import os
import sys
from typing import Any, Dict

import torch  # type: ignore[import-not-found,unused-ignore]
import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

bundle, dest, shape, harvest = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
out: Dict[str, Any] = {"rank": 0}
if bundle != "-":
    dist.init_process_group("gloo")
    import kbundle

    out["rank"] = dist.get_rank()
    r = kbundle.load_bundle(dist.group.WORLD, bundle=bundle, dest=dest, preset="inductor", timeout=120, strict=True)
    out.update(ok=r.ok, leader=r.leader, nodes=r.nodes, cache=os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))

from torch._dynamo.utils import counters  # type: ignore[import-not-found,unused-ignore]  # noqa: E402


def f(x):  # type: ignore[no-untyped-def]
    return torch.sin(x) * torch.cos(x) + x.relu()


torch.compile(f)(torch.randn(shape))
out["hit"] = counters["inductor"]["fxgraph_cache_hit"]
out["miss"] = counters["inductor"]["fxgraph_cache_miss"]
if harvest:
    h = kbundle.harvest(dist.group.WORLD, timeout=120, strict=True)
    out.update(harvested=h.ok, layer=h.layer or "", files=h.files)
os.write(1, ("RESULT " + json.dumps(out) + "\n").encode())
if bundle != "-":
    dist.destroy_process_group()
