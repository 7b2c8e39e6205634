"""load_bundle with mpi4py initialised at a given thread level.

Usage: (launcher) python thread_prog.py LEVEL BUNDLE DEST
Each rank prints one line: "rank R: loaded" or "rank R: KIND: FIRST LINE".
"""

import sys

import mpi4py

mpi4py.rc.thread_level = sys.argv[1]

from mpi4py import MPI  # noqa: E402 (after the thread level is set)

from kbundle import KbundleError, load_bundle  # noqa: E402

rank = MPI.COMM_WORLD.Get_rank()
try:
    res = load_bundle(MPI.COMM_WORLD, bundle=sys.argv[2], dest=sys.argv[3], timeout=60)
    print(f"rank {rank}: {'loaded' if res else 'not loaded: ' + res.reason}", flush=True)
except KbundleError as e:
    print(f"rank {rank}: {e.kind}: {str(e).splitlines()[0]} | {e.hint}", flush=True)
