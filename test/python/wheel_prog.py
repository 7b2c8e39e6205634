"""load_bundle from an installed wheel: one JSON line per rank, which the
install test (wheel_test.go, TestWheel) and TestMPIABI (mpiabi_test.go)
check.

Usage: mpirun -np N python wheel_prog.py BUNDLE DEST
"""

import json
import sys
from pathlib import Path

from mpi4py import MPI

import kbundle
from kbundle import _lib

comm = MPI.COMM_WORLD
res = kbundle.load_bundle(comm, bundle=sys.argv[1], dest=sys.argv[2], strict=True)
line = {
    "rank": comm.Get_rank(),
    "size": comm.Get_size(),
    "ok": res.ok,
    "top": (Path(res.dest) / "top.txt").read_text(),
    "library": kbundle.mpi_library(),
    "package": kbundle.__file__,
    "version": kbundle.__version__,
    "abi": _lib.abi(MPI),
    "mpi": MPI.Get_library_version().replace("\0", "").splitlines()[0],
}
# One write with its newline: under PYTHONUNBUFFERED print() makes two, and
# mpirun's forwarding can put another rank's line between them.
sys.stdout.write(json.dumps(line) + "\n")
sys.stdout.flush()
