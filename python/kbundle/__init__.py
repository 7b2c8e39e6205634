"""kbundle: start an MPI job with a warm compiled-kernel (JIT) cache.

Call :func:`load_bundle` on every rank, before importing the framework
(Numba and JAX read their cache variable at import)::

    from mpi4py import MPI
    from kbundle import load_bundle

    load_bundle(MPI.COMM_WORLD)

It does what ``kbundle load`` does, in the calling process, through the
same Go code: rank 0 reads the bundle once and broadcasts it, one rank per
node unpacks it atomically into node-local storage, and the variables of
the bundle's framework presets are set in ``os.environ``.

At the end of the job, :func:`harvest` (on every rank) gives back what the
job compiled that the bundle lacked, as ``kbundle harvest`` does: one new
layer of the set, written by rank 0::

    res = harvest(MPI.COMM_WORLD)

:func:`status` says what kbundle installed on this node, and whether it
changed since, as ``kbundle status`` does; :func:`clean` removes it, as
``kbundle clean`` does.

See docs/python.md.
"""

import importlib.metadata as _metadata

from ._clean import CleanResult, clean
from ._errors import (
    BundleUnusableError,
    HarvestFailedError,
    KbundleError,
    KbundleMPIError,
    KbundleUsageError,
    KbundleWarning,
    LoadFailedError,
)
from ._harvest import HarvestNode, HarvestResult, PresetUse, harvest
from ._load import LoadResult, load_bundle, mpi_library
from ._status import TreeStatus, status

__all__ = [
    "BundleUnusableError",
    "CleanResult",
    "HarvestFailedError",
    "HarvestNode",
    "HarvestResult",
    "KbundleError",
    "KbundleMPIError",
    "KbundleUsageError",
    "KbundleWarning",
    "LoadFailedError",
    "LoadResult",
    "PresetUse",
    "TreeStatus",
    "clean",
    "harvest",
    "load_bundle",
    "mpi_library",
    "status",
]

try:
    # The installed distribution's version: kbundle/_version.py's, written
    # by `make python` and `make wheel` (scripts/dev/version.sh), which
    # `kbundle version` prints too.
    __version__ = _metadata.version("kbundle")
except _metadata.PackageNotFoundError:  # the source tree itself, not installed
    __version__ = "0+unknown"
