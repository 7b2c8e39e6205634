"""count_prog.py SET DEST OUT: one job of TestCountsUnderMPI on every
rank. It loads SET (none the first time) with count=True, compiles four
JAX programs and one torch.compile graph, counts JAX's cache events with
a listener of its own and reads Inductor's counters itself, harvests, and
writes both counts, its own and harvest's, to OUT/rank.<rank> (JSON)."""

import json
import os
import sys

from mpi4py import MPI

import kbundle

COMM = MPI.COMM_WORLD
set_, dest, out = sys.argv[1:4]
res = kbundle.load_bundle(COMM, bundle=set_, dest=dest, preset="jax,inductor", allow_missing=True, count=True, strict=True)

import jax  # type: ignore[import-not-found,unused-ignore]  # noqa: E402  (after the load: its exports set)
import jax.numpy as jnp  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from jax import monitoring  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

own = {"JAX": [0, 0]}


def mine(event: str, **_kw: object) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        own["JAX"][0] += 1
    elif event == "/jax/compilation_cache/cache_misses":
        own["JAX"][1] += 1


monitoring.register_event_listener(mine)
x = jnp.arange(16.0)
for n in range(4):
    jax.jit(lambda v, n=n: v * (n + 2) + n)(x).block_until_ready()

import torch  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from torch._dynamo.utils import counters  # type: ignore[import-not-found,unused-ignore]  # noqa: E402


@torch.compile  # type: ignore[misc,untyped-decorator,unused-ignore]
def g(t: torch.Tensor) -> torch.Tensor:
    return torch.sin(t) * 2 + 1


g(torch.arange(8.0))
own["Inductor"] = [counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]]

h = kbundle.harvest(COMM, bundle=set_, dest=dest, strict=True)
rank = COMM.Get_rank()
with open(os.path.join(out, f"rank.{rank}"), "w") as f:
    json.dump({"own": own, "harvest": h.counts[rank], "report": list(h.report), "loaded": res.entries}, f)
