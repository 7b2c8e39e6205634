"""Finding and loading libkbundle, the c-shared build of kbundle's Go code
that matches the MPI library mpi4py uses."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Optional

from ._errors import KbundleMPIError

#: Where ``make python`` puts the libraries, inside the package.
LIB_DIR = Path(__file__).resolve().parent / "lib"

#: The MPI families kbundle is built for: a marker in
#: MPI_Get_library_version's text, and the library's name.
FAMILIES = (("Open MPI", "openmpi"), ("MPICH", "mpich"))

#: How kbundle_mpi_family's names read in messages.
_NAMES = {"openmpi": "Open MPI", "mpich": "MPICH (or an MPI of its ABI)"}

_lock = threading.Lock()
_loaded: Optional[ctypes.CDLL] = None
_loaded_path = ""


def family(version: str) -> str:
    """Returns "openmpi" or "mpich" for an MPI_Get_library_version text."""
    for marker, name in FAMILIES:
        if marker in version:
            return name
    first = version.strip().splitlines()[0] if version.strip() else "an unknown MPI"
    raise KbundleMPIError(
        "mpi",
        f"kbundle is built for Open MPI and MPICH; mpi4py uses {first}",
        "hint: set KBUNDLE_LIBRARY to a libkbundle built with this MPI's mpicc "
        "(CC=mpicc go build -buildmode=c-shared -tags mpi ./cmd/libkbundle)",
    )


def path_for(version: str) -> Path:
    """The library for the MPI whose version text is given, or
    $KBUNDLE_LIBRARY."""
    override = os.environ.get("KBUNDLE_LIBRARY")
    if override:
        return Path(override)
    return LIB_DIR / f"libkbundle-{family(version)}.so"


def library(version: str) -> ctypes.CDLL:
    """Loads (once per process) the libkbundle for the MPI whose
    MPI_Get_library_version text is version, and checks that it was built
    for that MPI's ABI."""
    global _loaded, _loaded_path
    with _lock:
        if _loaded is not None:
            return _loaded
        path = path_for(version)
        if not path.is_file():
            raise KbundleMPIError(
                "mpi",
                f"{path}: no such library (kbundle's Go code built for this MPI)",
                "hint: build it with `make python` in kbundle's source tree, "
                "then `pip install ./python` again",
            )
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise KbundleMPIError("mpi", f"{path}: cannot load: {e}", "") from e
        lib.kbundle_load.argtypes = [ctypes.c_longlong, ctypes.c_char_p]
        lib.kbundle_load.restype = ctypes.c_void_p
        lib.kbundle_mpi_family.argtypes = []
        lib.kbundle_mpi_family.restype = ctypes.c_void_p
        lib.kbundle_free.argtypes = [ctypes.c_void_p]
        lib.kbundle_free.restype = None
        # The library's MPI calls bind to the libmpi mpi4py loaded: they
        # must be of the same ABI family, or the first handle crashes.
        built = take_string(lib, lib.kbundle_mpi_family())
        ompi = "Open MPI" in version
        if built not in ("openmpi", "mpich") or (built == "openmpi") != ompi:
            first = " ".join(version.replace("\x00", " ").split()[:3]) or "an unknown MPI"
            raise KbundleMPIError(
                "mpi",
                f"{path} is built for {_NAMES.get(built, built)}, but mpi4py runs on {first}",
                "hint: use the libkbundle built with the mpicc of the MPI that mpi4py was built with"
                + (" (unset KBUNDLE_LIBRARY)" if os.environ.get("KBUNDLE_LIBRARY") else ""),
            )
        _loaded, _loaded_path = lib, str(path)
        return lib


def loaded_path() -> str:
    """The path of the library loaded, or ""."""
    return _loaded_path


def take_string(lib: ctypes.CDLL, p: Optional[int]) -> str:
    """Copies and frees a string the library returned."""
    if not p:
        raise KbundleMPIError("mpi", "libkbundle returned no result (out of memory?)", "")
    try:
        return ctypes.string_at(p).decode("utf-8", "replace")
    finally:
        lib.kbundle_free(p)
