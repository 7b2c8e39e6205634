"""Load a kbundle bundle on every rank, then run the application.

    mpirun -np 4 python python/examples/load_example.py --bundle /path/cache.kbundle

or, with KBUNDLE_CACHE_DIR set (as `kbundle warm` or your job script
does), without --bundle. Every rank prints one line; the exit status is 0
whether or not the cache could be used (the application would then
compile its kernels as usual), 1 with --strict when it could not.
"""

from __future__ import annotations

import argparse
import os
import sys

from mpi4py import MPI

from kbundle import KbundleError, load_bundle


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", help="bundle file (default: $KBUNDLE_CACHE_DIR/cache.kbundle)")
    ap.add_argument("--dest", help="node-local directory (default: $KBUNDLE_LOCAL_DIR, else $TMPDIR/kbundle-USER-JOB)")
    ap.add_argument("--preset", action="append", help="framework preset (default: those recorded in the bundle)")
    ap.add_argument("--force", action="store_true", help="replace a non-empty destination")
    ap.add_argument("--strict", action="store_true", help="fail when the bundle cannot be used")
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    try:
        res = load_bundle(comm, bundle=args.bundle, dest=args.dest, preset=args.preset,
                          force=args.force, strict=args.strict)
    except KbundleError as e:
        if comm.Get_rank() == 0:
            print(e, file=sys.stderr)
        return 1
    rank = comm.Get_rank()
    if res:
        # The frameworks' variables are now in os.environ: import the
        # framework (jax, torch, numba, ...) after this point.
        env = " ".join(f"{k}={os.environ[k]}" for k in res.env)
        print(f"rank {rank}: loaded {res.entries} entries ({res.bytes} bytes) to {res.dest} "
              f"in {res.seconds:.3f} s (read {res.read_seconds:.3f}, broadcast {res.bcast_seconds:.3f}, "
              f"extract {res.extract_seconds:.3f}); presets {','.join(res.presets) or '-'} {env}", flush=True)
    else:
        print(f"rank {rank}: not loaded ({res.kind}): {res.reason.splitlines()[0]}", flush=True)
    # ... the application starts here, e.g. `import jax` ...
    return 0


if __name__ == "__main__":
    sys.exit(main())
