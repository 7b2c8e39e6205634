"""What the JIT test workloads (*_kernels.py) share. The Go tests copy
this module next to the workload they run (test/jit: workload)."""
import json
import os
import sys


def emit(obj):
    """Print one JSON result line in ONE write: with PYTHONUNBUFFERED,
    print() writes the text and the newline separately, and mpirun may
    then interleave another rank's line between them."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def rank():
    """This process's rank, from the launcher's environment; -1 if none."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if name in os.environ:
            return int(os.environ[name])
    return -1
