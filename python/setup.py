"""Build of the kbundle Python package: pyproject.toml has the metadata;
this file only refuses to build without the Go libraries and the version
that `make python` writes, and tags the wheel for this platform, since it
holds shared objects."""

from pathlib import Path

from setuptools import setup
from setuptools.dist import Distribution

LIB = Path(__file__).resolve().parent / "kbundle" / "lib"


class BinaryDistribution(Distribution):
    """A distribution with platform code (kbundle/lib/*.so)."""

    def has_ext_modules(self) -> bool:
        return True


if not list(LIB.glob("libkbundle-*.so")):
    raise SystemExit(
        f"kbundle: no libkbundle-*.so in {LIB}\n"
        "kbundle: hint: run `make python` at the top of kbundle's source tree first "
        "(it builds them with mpicc.openmpi and mpicc.mpich), then `pip install ./python`"
    )

if not (LIB.parent / "_version.py").exists():
    raise SystemExit(
        f"kbundle: no {LIB.parent / '_version.py'}\n"
        "kbundle: hint: run `make python` at the top of kbundle's source tree first "
        "(it writes the version with the libraries), then `pip install ./python`"
    )

setup(distclass=BinaryDistribution)
