"""Tests of the kbundle package that need neither MPI nor mpi4py: run by
python_test.go's TestUnit (`python3 -m unittest test_unit` with the
package's source on PYTHONPATH), or by hand the same way.

The library tests build small stand-in libraries with cc: each writes its
name to $KBUNDLE_UNIT_RAN when ld.so runs its constructor, so a test sees
which file was loaded, and whether any was.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Dict, Optional

from kbundle import KbundleMPIError, _lib

OPEN_MPI = "Open MPI v4.1.4, package: Debian OpenMPI"

CONSTRUCTOR = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void ran(void) {
    const char *p = getenv("KBUNDLE_UNIT_RAN");
    FILE *f = p ? fopen(p, "a") : NULL;
    if (f) { fputs(NAME "\n", f); fclose(f); }
}
"""


def build(where: Path, name: str, lib: str = "libkbundle-openmpi.so") -> Path:
    """Builds a library without kbundle's functions into where, whose
    constructor records name."""
    where.mkdir(mode=0o755, parents=True, exist_ok=True)
    src = where / "l.c"
    src.write_text(f'#define NAME "{name}"\n' + CONSTRUCTOR)
    out = where / lib
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    src.unlink()
    return out


@unittest.skipUnless(shutil.which("cc"), "no C compiler")
class LibraryTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kbundle-unit-"))
        self.addCleanup(shutil.rmtree, self.dir)
        self.ran = self.dir / "ran"
        self.saved: Dict[str, Optional[str]] = {}
        self.setenv("KBUNDLE_UNIT_RAN", str(self.ran))
        for k in ("KBUNDLE_LIBRARY", "KBUNDLE_TRUSTED_GROUPS", "KBUNDLE_TRUSTED_OWNERS"):
            self.setenv(k, None)

    def setenv(self, k: str, v: Optional[str]) -> None:
        if k not in self.saved:
            self.saved[k] = os.environ.get(k)
            self.addCleanup(self.restore, k)
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v

    def restore(self, k: str) -> None:
        v = self.saved[k]
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v

    def ran_names(self) -> str:
        return self.ran.read_text() if self.ran.exists() else ""

    def load(self, lib: Path) -> KbundleMPIError:
        """library() with KBUNDLE_LIBRARY=lib: it must raise."""
        self.setenv("KBUNDLE_LIBRARY", str(lib))
        with self.assertRaises(KbundleMPIError) as cm:
            _lib.library(OPEN_MPI)
        return cm.exception

    def test_relative_override_is_the_file_checked(self) -> None:
        # A relative KBUNDLE_LIBRARY is the file in the current directory,
        # never a library of the same name in LD_LIBRARY_PATH (which ld.so
        # reads at start: hence a fresh interpreter).
        here = build(self.dir / "here", "here")
        build(self.dir / "elsewhere", "elsewhere")
        prog = (
            "from kbundle import _lib, KbundleMPIError\n"
            "try:\n"
            f"    _lib.library({OPEN_MPI!r})\n"
            "except KbundleMPIError as e:\n"
            "    print(e)\n"
        )
        env = dict(
            os.environ,
            KBUNDLE_LIBRARY="./libkbundle-openmpi.so",
            LD_LIBRARY_PATH=str(self.dir / "elsewhere"),
            PYTHONPATH=str(Path(_lib.__file__).resolve().parent.parent),
        )
        out = subprocess.run(
            [sys.executable, "-c", prog], cwd=here.parent, env=env, capture_output=True, text=True, timeout=60
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(self.ran_names(), "here\n")
        self.assertIn(f"{here} is not a libkbundle (it has no function kbundle_load)", out.stdout)

    def test_missing_function_is_an_mpi_error(self) -> None:
        lib = build(self.dir / "d", "nosymbols")
        e = self.load(lib)
        self.assertEqual(e.kind, "mpi")
        self.assertIn(f"{lib} is not a libkbundle (it has no function kbundle_load)", e.reason)
        self.assertIn("unset KBUNDLE_LIBRARY", e.hint)
        self.assertEqual(self.ran_names(), "nosymbols\n")

    def test_untrusted_is_not_loaded(self) -> None:
        os.chmod(self.dir, 0o700)
        lib = build(self.dir / "d", "untrusted")
        cases = [
            ("file writable by all", lib, 0o666, "file mode 0666 lets others write it"),
            ("file writable by its group", lib, 0o775, "file mode 0775 lets others write it"),
            ("directory writable by all", lib.parent, 0o777, "directory mode 0777 lets others write it"),
            ("directory writable by its group", lib.parent, 0o775, "directory mode 0775 lets others write it"),
        ]
        for name, target, mode, want in cases:
            with self.subTest(name):
                before = stat.S_IMODE(target.stat().st_mode)
                os.chmod(target, mode)
                try:
                    e = self.load(lib)
                finally:
                    os.chmod(target, before)
                self.assertIn(f"{lib}: untrusted library: {want}", e.reason)
                self.assertEqual(self.ran_names(), "", "the library ran before it was checked")
        if os.getuid() == 0:
            owned = self.dir / "owned"
            other = build(owned, "other")
            for name, target in (("file", other), ("directory", owned)):
                with self.subTest(f"{name} of another user"):
                    os.chown(target, 65534, -1)
                    try:
                        e = self.load(other)
                    finally:
                        os.chown(target, 0, -1)
                    self.assertIn(f"untrusted library: {name} is owned by uid 65534", e.reason)
                    self.assertEqual(self.ran_names(), "")

    def test_trusted_group(self) -> None:
        # A group-writable directory passes when its group is trusted, as
        # for a bundle; then the stand-in fails as not a libkbundle.
        os.chmod(self.dir, 0o700)
        lib = build(self.dir / "d", "group")
        os.chmod(lib.parent, 0o775)
        self.setenv("KBUNDLE_TRUSTED_GROUPS", str(lib.parent.stat().st_gid))
        e = self.load(lib)
        self.assertIn("is not a libkbundle", e.reason)

    def test_symlink_checks_its_target(self) -> None:
        os.chmod(self.dir, 0o700)
        lib = build(self.dir / "d", "target")
        link = self.dir / "link.so"
        link.symlink_to(lib)
        os.chmod(lib, 0o666)
        e = self.load(link)
        self.assertIn(f"{lib}: untrusted library: file mode 0666", e.reason)
        self.assertEqual(self.ran_names(), "")

    def test_missing(self) -> None:
        e = self.load(self.dir / "nonexistent.so")
        self.assertIn("nonexistent.so: no such library", e.reason)


if __name__ == "__main__":
    unittest.main()
