"""bench_inproc.py: the benchmarks' in-process case (mdlat.sh's inproc,
triton.sh's M3): kbundle.load_bundle(MPI.COMM_WORLD) of the bundle
$KBUNDLE_BENCH_LOAD into $KBUNDLE_BENCH_DEST, in the step's own launch and
before its framework is imported, so that the presets' variables it sets
in os.environ are the ones the framework reads. The case puts this folder,
python/ and mpi4py on PYTHONPATH; a step imports this module only when
$KBUNDLE_BENCH_LOAD is set.
"""
import os

from mpi4py import MPI

import kbundle

kbundle.load_bundle(MPI.COMM_WORLD, bundle=os.environ["KBUNDLE_BENCH_LOAD"],
                    dest=os.environ["KBUNDLE_BENCH_DEST"], strict=True)
