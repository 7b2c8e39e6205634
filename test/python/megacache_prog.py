"""One job of test/python's TestMegaCache, on every rank (mpirun -np 2):
load the set, compile two functions with CPU Inductor, print a JSON line
with torch's own FX graph cache counters; the first job (no set yet)
harvests at its end, which writes its Mega-Cache blobs into the set.

    python megacache_prog.py first|again SET DEST
"""

import json
import sys

from mpi4py import MPI

import kbundle

mode, setpath, dest = sys.argv[1:4]
comm = MPI.COMM_WORLD
if mode == "first":
    res = kbundle.load_bundle(comm, bundle=setpath, dest=dest, preset="mega-cache", allow_missing=True, parents=True)
else:
    res = kbundle.load_bundle(comm, bundle=setpath, dest=dest, strict=True)

import torch  # type: ignore[import-not-found,unused-ignore]  # noqa: E402 (after the load, as a job does)
from torch._dynamo.utils import counters  # type: ignore[import-not-found,unused-ignore]  # noqa: E402


@torch.compile  # type: ignore[misc,untyped-decorator,unused-ignore]
def f(x: "torch.Tensor") -> "torch.Tensor":
    return torch.sin(x) * 2 + torch.cos(x)


@torch.compile  # type: ignore[misc,untyped-decorator,unused-ignore]
def g(x: "torch.Tensor") -> "torch.Tensor":
    return (x.relu() @ x.T).sum(dim=0)


f(torch.arange(64, dtype=torch.float32))
g(torch.ones(8, 8))
out = {
    "rank": comm.Get_rank(),
    "blobs": res.mega_cache_blobs,
    "presets": list(res.presets),
    "fx_hits": counters["inductor"]["fxgraph_cache_hit"],
    "fx_misses": counters["inductor"]["fxgraph_cache_miss"],
}
if mode == "first":
    h = kbundle.harvest(comm)
    out["harvested_units"] = h.units
# One write with its newline: under PYTHONUNBUFFERED print() makes two, and
# mpirun's forwarding can put another rank's line between them.
sys.stdout.write(json.dumps(out) + "\n")
sys.stdout.flush()
