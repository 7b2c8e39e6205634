"""torch_load.py: one timed kbundle.load_bundle, in-process, for
scripts/bench/torch.sh (`make bench-torch`, issue 28).

Usage: python torch_load.py gloo|mpi BUNDLE DEST

gloo: under torchrun, dist.init_process_group("gloo") and
load_bundle(dist.group.WORLD, ...); mpi: under mpirun, mpi4py's
load_bundle(MPI.COMM_WORLD, ...). The library is loaded and every rank
waits at a barrier before the clock starts, so the launch (torchrun's
rendezvous, mpirun's daemons, imports) is left out on both sides; each
rank times its own call and rank 0 prints the largest, with the load's
phases (rank 0's LoadResult), as one line "RESULT {json}".
"""

import json
import sys
import time

import kbundle


def main() -> None:
    mode, bundle, dest = sys.argv[1:4]
    if mode == "gloo":
        import torch
        import torch.distributed as dist
        from kbundle import _torch

        dist.init_process_group("gloo")
        comm = dist.group.WORLD
        rank, size = dist.get_rank(), dist.get_world_size()
        _torch.library()
        barrier = dist.barrier

        def largest(x: float) -> float:
            t = torch.tensor([x], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t.item())

    elif mode == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        kbundle.mpi_library()
        barrier = comm.Barrier

        def largest(x: float) -> float:
            return float(comm.allreduce(x, op=MPI.MAX))

    else:
        sys.exit(f"torch_load.py: mode {mode!r}: want gloo or mpi")
    barrier()
    t0 = time.perf_counter()
    r = kbundle.load_bundle(comm, bundle=bundle, dest=dest)
    took = time.perf_counter() - t0
    slowest = largest(took)
    if rank == 0:
        print(
            "RESULT "
            + json.dumps(
                {
                    "mode": mode,
                    "ok": r.ok,
                    "reason": r.reason,
                    "ranks": size,
                    "nodes": r.nodes,
                    "bytes": r.bytes,
                    "seconds": slowest,
                    "read_seconds": r.read_seconds,
                    "bcast_seconds": r.bcast_seconds,
                    "extract_seconds": r.extract_seconds,
                }
            ),
            flush=True,
        )
    if not r.ok:
        sys.exit(1)
    if mode == "gloo":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
