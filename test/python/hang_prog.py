"""A job whose last rank never calls load_bundle: the others must not hang
but end the job (MPI_Abort) when the timeout runs out.

Usage: mpirun -np N python hang_prog.py BUNDLE DEST TIMEOUT
"""

import sys
import time

from mpi4py import MPI

from kbundle import load_bundle

comm = MPI.COMM_WORLD
bundle, dest, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
if comm.Get_rank() == comm.Get_size() - 1:
    time.sleep(120)  # never joins the collective
    sys.exit(0)
res = load_bundle(comm, bundle=bundle, dest=dest, timeout=timeout)
print(f"rank {comm.Get_rank()}: load_bundle returned: {res}", flush=True)
