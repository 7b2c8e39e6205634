"""Build of the kbundle Python package: pyproject.toml has the metadata;
this file only refuses to build without the Go libraries and the version
that `make python` (or `make wheel`) writes, and tags the wheel for this
platform, since it holds shared objects and programs. The package itself
has no Python extension module (it loads libkbundle with ctypes), so one
wheel serves every Python 3: py3-none-PLATFORM."""

from pathlib import Path
from typing import Tuple

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.dist import Distribution

PKG = Path(__file__).resolve().parent / "kbundle"
LIB = PKG / "lib"


class BinaryDistribution(Distribution):
    """A distribution with platform code (kbundle/lib/*.so, kbundle/bin/*)."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for any Python 3 on this platform (py3-none-PLATFORM)."""

    def get_tag(self) -> Tuple[str, str, str]:
        plat = super().get_tag()[2]
        return "py3", "none", plat


def hint(what: str) -> str:
    return (
        f"kbundle: no {what}\n"
        "kbundle: hint: run `make python` at the top of kbundle's source tree first "
        "(it builds the libraries with mpicc.openmpi and mpicc.mpich and writes the version), "
        "then `pip install ./python`; or `make wheel` for a wheel that installs anywhere"
    )


if not list(LIB.glob("libkbundle-*.so")):
    raise SystemExit(hint(f"libkbundle-*.so in {LIB}"))
if not (PKG / "_version.py").exists():
    raise SystemExit(hint(f"{PKG / '_version.py'}"))

setup(distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
