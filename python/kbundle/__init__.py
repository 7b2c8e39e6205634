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

from __future__ import annotations

from ._errors import (
    BundleUnusableError,
    HarvestFailedError,
    KbundleError,
    KbundleMPIError,
    KbundleUsageError,
    KbundleWarning,
    LoadFailedError,
)
from ._load import LoadResult, load_bundle, mpi_library

#: typing.TYPE_CHECKING, without importing typing (docs/python.md, "What import
#: kbundle costs").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ._clean import CleanResult, clean
    from ._harvest import HarvestNode, HarvestResult, PresetUse, harvest
    from ._status import TreeStatus, status

#: The names imported on first use (PEP 562): a job that only loads does
#: not pay for harvest's, clean's and status's imports (about 30 ms of
#: the in-process load's start; issue 31).
_LAZY = {
    "CleanResult": "_clean",
    "clean": "_clean",
    "HarvestNode": "_harvest",
    "HarvestResult": "_harvest",
    "PresetUse": "_harvest",
    "harvest": "_harvest",
    "TreeStatus": "_status",
    "status": "_status",
}

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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif name == "__version__":
        value = _version()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"__version__"})


def _version() -> str:
    """The installed distribution's version: kbundle/_version.py's,
    written by `make python` and `make wheel` (scripts/dev/version.sh),
    which `kbundle version` prints too. importlib.metadata is imported
    only when asked (about 20 ms)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("kbundle")
    except importlib.metadata.PackageNotFoundError:  # the source tree itself, not installed
        return "0+unknown"
