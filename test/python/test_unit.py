"""Tests of the kbundle package that need neither MPI nor mpi4py: run by
python_test.go's TestUnit (`python3 test_unit.py` with the package's
source on PYTHONPATH), or by hand the same way.

FrameworkTest checks what load_bundle does about a framework imported
before it (kbundle._frameworks.apply, called with the variables it set):
with Debian's numba when it is installed, with stand-ins for JAX and
PyTorch. The library tests build small stand-in libraries with cc: each writes its
name to $KBUNDLE_UNIT_RAN when ld.so runs its constructor, so a test sees
which file was loaded, and whether any was.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
import unittest.mock
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Optional

import warnings

import ctypes

import kbundle
import kbundle.__main__ as kbmain
from kbundle import (
    HarvestFailedError,
    HarvestNode,
    PresetUse,
    KbundleMPIError,
    KbundleUsageError,
    KbundleWarning,
    _frameworks,
    _harvest,
    _lib,
    _load,
)

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


class ImportTest(unittest.TestCase):
    """import kbundle brings what load_bundle needs and no more (docs/python.md,
    "What import kbundle costs"): every rank pays for it before the load's
    first collective."""

    #: Modules that import kbundle must not bring: harvest's, status's and
    #: clean's (imported on first use), and stdlib modules load_bundle does
    #: without (typing 2 ms, pathlib 3 ms, datetime and threading 1 ms).
    HEAVY = ("kbundle._harvest", "kbundle._status", "kbundle._clean", "kbundle._count", "importlib.metadata",
             "subprocess", "typing", "pathlib", "datetime", "threading")

    def test_import_is_light(self) -> None:
        prog = "import sys; before = set(sys.modules); import kbundle; print(' '.join(sorted(set(sys.modules) - before)))"
        env = dict(os.environ, PYTHONPATH=str(Path(kbundle.__file__).resolve().parent.parent))
        out = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        brought = out.stdout.split()
        self.assertIn("kbundle._load", brought)
        self.assertEqual([m for m in self.HEAVY if m in brought], [])

    def test_lazy_names(self) -> None:
        """The names imported on first use are there, and are the modules' own."""
        for name, module in kbundle._LAZY.items():
            self.assertIs(getattr(kbundle, name), getattr(importlib.import_module(f"kbundle.{module}"), name))


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
            _lib.library("openmpi", OPEN_MPI)
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
            f"    _lib.library('openmpi', {OPEN_MPI!r})\n"
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

    def test_no_harvest_in_an_older_library(self) -> None:
        # A library built before harvest loads (load_bundle works); harvest
        # names what is missing.
        lib = build(self.dir / "old", "old")
        with self.assertRaises(KbundleMPIError) as cm:
            _lib.function(ctypes.CDLL(str(lib)), "kbundle_harvest")
        self.assertIn("has no function kbundle_harvest: it was built by an older kbundle", cm.exception.reason)
        self.assertIn("make python", cm.exception.hint)

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
                self.assertIn(f"{target}: untrusted library: {want}", e.reason)
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

    def test_path_checked_from_the_root(self) -> None:
        # X5 of the 2026-12-01b review: only the file and its directory
        # were checked, after resolving symlinks. A group member who may
        # write an ancestor (its group not trusted) could swap the
        # library's directory for a symlink to another directory, and
        # another library was loaded. Every component from "/" is
        # checked, symlinks included, as for a bundle.
        os.chmod(self.dir, 0o700)
        proj = self.dir / "proj"
        lib = build(proj / "lib", "proj")
        os.chmod(proj, 0o775)
        e = self.load(lib)
        self.assertIn(f"{proj}: untrusted library: directory mode 0775 lets others write it", e.reason)
        self.assertEqual(self.ran_names(), "", "a library under a group-writable directory ran")
        site = build(self.dir / "site", "site")
        (proj / "lib").rename(proj / "lib.moved")
        (proj / "lib").symlink_to(site.parent)
        e = self.load(lib)
        self.assertIn(f"{proj}: untrusted library", e.reason)
        self.assertEqual(self.ran_names(), "", "the library the symlink swapped in ran")
        if os.getuid() == 0:
            os.chmod(proj, 0o755)
            with self.subTest("a symlink of another user"):
                os.lchown(proj / "lib", 65534, -1)
                e = self.load(lib)
                self.assertIn(f"{proj / 'lib'}: untrusted library: symlink is owned by uid 65534", e.reason)
                self.assertEqual(self.ran_names(), "")
            with self.subTest("a symlink of yours"):
                os.lchown(proj / "lib", 0, -1)
                e = self.load(lib)
                self.assertIn(f"{site} is not a libkbundle", e.reason)  # the target, checked and loaded

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


class AbiTest(unittest.TestCase):
    """_lib.abi: which library mpi4py's module MPI asks for, from what
    mpi4py reports (stand-ins for the module, as mpi4py 4.1.2's wheel,
    a source build and mpi4py 3.1 present themselves)."""

    def test_abi(self) -> None:
        wheel = "/venv/lib/python3.11/site-packages/mpi4py/MPI.{}.cpython-311-x86_64-linux-gnu.so"
        source = "/usr/lib/python3/dist-packages/mpi4py/MPI.cpython-311-x86_64-linux-gnu.so"
        cases = [
            # name, MPI.__file__, sizeof(MPI_Comm), Get_abi_version (None: mpi4py 3.1), want
            ("wheel on Open MPI", wheel.format("openmpi"), 8, (-1, -1), "openmpi"),
            ("wheel on MPICH or Intel MPI", wheel.format("mpich"), 4, (-1, -1), "mpich"),
            ("a wheel with an MPI-ABI build", wheel.format("mpiabi"), 8, (1, 0), "mpi-abi"),
            ("source build, Open MPI", source, 8, (-1, -1), "openmpi"),
            ("source build, MPICH", source, 4, (-1, -1), "mpich"),
            ("source build, MPI-5 ABI", source, 8, (1, 0), "mpi-abi"),
            ("mpi4py 3.1, MPICH", source, 4, None, "mpich"),
            ("mpi4py 3.1, Open MPI", source, 8, None, "openmpi"),
            ("handles of another size", source, 2, None, ""),
        ]
        for name, file, size, abi_version, want in cases:
            with self.subTest(name):
                mpi = ModuleType("mpi4py.MPI")
                mpi.__file__ = file
                mpi.Comm = object  # type: ignore[attr-defined]
                mpi._sizeof = lambda t, size=size: size  # type: ignore[attr-defined]
                if abi_version is not None:
                    mpi.Get_abi_version = lambda v=abi_version: v  # type: ignore[attr-defined]
                self.assertEqual(_lib.abi(mpi), want)

    def test_no_library_for_the_mpi_abi(self) -> None:
        # The package has no library of the MPI-5 ABI (docs/python.md):
        # the error names the MPI and its ABI.
        self.assertEqual(_lib.family("mpich", "Intel(R) MPI Library 2021.19.0 for Linux* OS"), "mpich")
        with self.assertRaises(KbundleMPIError) as cm:
            _lib.family("mpi-abi", "MPICH Version:      5.0.2\nMPICH Release date: …")
        self.assertEqual(
            cm.exception.reason,
            "kbundle is built for Open MPI and MPICH; mpi4py uses MPICH Version:      5.0.2 "
            "through the MPI-5 standard ABI (libmpi_abi.so)",
        )
        self.assertIn("KBUNDLE_LIBRARY", cm.exception.hint)


class FrameworkTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kbundle-unit-"))
        self.addCleanup(shutil.rmtree, self.dir)

    def fake(self, name: str, **attrs: Any) -> ModuleType:
        """Puts a stand-in module in sys.modules until the test ends."""
        m = ModuleType(name)
        for k, v in attrs.items():
            setattr(m, k, v)
        old = sys.modules.get(name)
        sys.modules[name] = m
        self.addCleanup(lambda: sys.modules.pop(name) if old is None else sys.modules.update({name: old}))
        return m

    def test_nothing_imported(self) -> None:
        for name in ("numba.core.config", "jax", "torch._inductor.codecache", "torch._inductor.utils"):
            self.assertNotIn(name, sys.modules, "a test imported it")
        env = {"NUMBA_CACHE_DIR": "/x/numba", "JAX_COMPILATION_CACHE_DIR": "/x/jax", "TORCHINDUCTOR_CACHE_DIR": "/x/i"}
        self.assertEqual(_frameworks.apply(env), [])

    @unittest.skipUnless(importlib.util.find_spec("numba"), "no numba")
    def test_numba_imported_first(self) -> None:
        # In a fresh interpreter: numba imported at the top, as programs do,
        # then the load's variables, then a function decorated after it.
        cache = self.dir / "numba"
        prog = (
            "import os, sys, warnings\n"
            "import numba\n"
            "from kbundle import _frameworks\n"
            "env = {'NUMBA_CACHE_DIR': sys.argv[1]}\n"
            "os.environ.update(env)\n"
            "print('warned:', _frameworks.apply(env))\n"
            "print('config:', numba.core.config.CACHE_DIR)\n"
            "print('again:', _frameworks.apply(env))\n"
            "exec(compile('@numba.njit(cache=True)\\ndef f(x):\\n    return x + 1\\n', sys.argv[2], 'exec'))\n"
            "print('f:', f(1))\n"
        )
        src = self.dir / "prog.py"  # numba's cache wants a source file
        src.write_text("")
        env = dict(os.environ, PYTHONPATH=str(Path(_frameworks.__file__).resolve().parent.parent))
        env.pop("NUMBA_CACHE_DIR", None)
        out = subprocess.run([sys.executable, "-c", prog, str(cache), str(src)], env=env,
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("warned: ['numba was imported before load_bundle", out.stdout)
        self.assertIn("decorated before keep the directory", out.stdout)
        self.assertIn(f"config: {cache}\n", out.stdout)
        self.assertIn("again: []\n", out.stdout)  # once applied, nothing more to say
        self.assertIn("f: 2\n", out.stdout)
        written = [n for _, _, files in os.walk(cache) for n in files]
        self.assertTrue(any(n.endswith(".nbi") for n in written), f"nothing cached in {cache}: {written}")

    def test_numba_same_value(self) -> None:
        reloaded: List[bool] = []
        self.fake("numba.core.config", CACHE_DIR="/x/numba", reload_config=lambda: reloaded.append(True))
        self.assertEqual(_frameworks.apply({"NUMBA_CACHE_DIR": "/x/numba"}), [])
        self.assertEqual(reloaded, [])

    def test_jax_imported_first(self) -> None:
        updates: Dict[str, Any] = {}
        resets: List[bool] = []

        class Config:
            jax_compilation_cache_dir: Optional[str] = None
            jax_persistent_cache_min_compile_time_secs = 1.0
            jax_persistent_cache_min_entry_size_bytes = 0

            def update(self, name: str, value: Any) -> None:
                updates[name] = value
                setattr(self, name, value)

        self.fake("jax", config=Config())
        self.fake("jax.experimental")
        self.fake("jax.experimental.compilation_cache")
        self.fake("jax.experimental.compilation_cache.compilation_cache", reset_cache=lambda: resets.append(True))
        env = {
            "JAX_COMPILATION_CACHE_DIR": "/x/jax",
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
            "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "none",  # not an option of this "version"
        }
        got = _frameworks.apply(env)
        self.assertEqual(updates, {
            "jax_compilation_cache_dir": "/x/jax",
            "jax_persistent_cache_min_compile_time_secs": 0.0,
            "jax_persistent_cache_min_entry_size_bytes": -1,
        })
        self.assertEqual(resets, [True])
        self.assertEqual(len(got), 1)
        self.assertIn("jax was imported before load_bundle", got[0])
        self.assertEqual(_frameworks.apply(env), [])

    def test_inductor_kept_its_first_value(self) -> None:
        # PyTorch 2.0-2.2: cache_dir is an lru_cache that read the variable
        # at the first compilation.
        import functools

        seen = {"dir": "/tmp/torchinductor_me"}

        @functools.lru_cache(None)
        def cache_dir() -> str:
            return seen["dir"]

        self.fake("torch._inductor.codecache", cache_dir=cache_dir)
        self.assertEqual(_frameworks.apply({"TORCHINDUCTOR_CACHE_DIR": "/x/i"}), [], "nothing compiled yet")
        cache_dir()
        seen["dir"] = "/x/i"
        got = _frameworks.apply({"TORCHINDUCTOR_CACHE_DIR": "/x/i"})
        self.assertEqual(len(got), 1)
        self.assertIn("cache_clear", got[0])
        self.assertEqual(cache_dir(), "/x/i")

    def test_inductor_reads_at_compile_time(self) -> None:
        # PyTorch 2.3 and later read the variable at each call.
        self.fake("torch._inductor.utils", cache_dir=lambda: os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
        self.assertEqual(_frameworks.apply({"TORCHINDUCTOR_CACHE_DIR": "/x/i"}), [])


class WarningTest(unittest.TestCase):
    """load_bundle prints the warnings libkbundle gives (Go's words, the
    same as ``kbundle load``'s): it has none of its own."""

    def test_failure_warns_with_gos_lines(self) -> None:
        out: Dict[str, Any] = {
            "ok": False,
            "kind": "unusable",
            "reason": "no usable bundle",
            "hint": "hint: pack it",
            "warnings": ["not loaded: from Go"],
        }
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            res = _load._failure(out, strict=False, rank0=True)
        self.assertFalse(res)
        self.assertEqual(res.warnings, ("not loaded: from Go",))
        self.assertEqual(len(got), 1)
        self.assertIs(got[0].category, KbundleWarning)
        self.assertEqual(str(got[0].message), "kbundle: no usable bundle\nkbundle: hint: pack it\nkbundle: not loaded: from Go")

    def test_lines(self) -> None:
        lines = _load._lines({"warnings": ["warning: a", "warning: b"]})
        # KbundleWarning says "warning" once: Go's "warning: " goes (U50).
        self.assertEqual(lines, ["kbundle: a", "kbundle: b"])
        self.assertEqual(_load._lines({"warnings": ["not loaded: x"]}), ["kbundle: not loaded: x"])
        self.assertEqual(_load._lines({}), [])

    def test_mpi4py_advice(self) -> None:
        """U40: a launcher of the other ABI than mpi4py's library gets
        mpi4py's fix, not the CLI's "the MPICH build"."""
        out: Dict[str, Any] = {
            "ok": False, "kind": "usage",
            "reason": "this kbundle is built for Open MPI but runs under Hydra (MPICH) (2 tasks): use mpirun.openmpi, or the MPICH build",
        }
        with self.assertRaises(KbundleUsageError) as cm, \
                unittest.mock.patch.object(_load, "_switchable_mpi4py", lambda: True):
            _load._failure(out, strict=False, rank0=True)
        self.assertEqual(cm.exception.reason, "mpi4py runs on Open MPI (libmpi.so.40), but this job runs under Hydra (MPICH) (2 tasks)")
        self.assertIn("MPI4PY_LIBMPI=libmpi.so.12", cm.exception.hint)
        self.assertNotIn("the MPICH build", str(cm.exception))
        reason, hint = _load.mpi4py_advice(
            "this kbundle is built for MPICH (or an MPI of its ABI) but runs under Open MPI's mpirun (4 tasks): use mpiexec.hydra", "",
            switchable=True)
        self.assertEqual(reason, "mpi4py runs on MPICH's ABI (libmpi.so.12), but this job runs under Open MPI's mpirun (4 tasks)")
        self.assertIn("unset MPI4PY_LIBMPI", hint)
        self.assertEqual(_load.mpi4py_advice("bad --jobs", "h"), ("bad --jobs", "h"))
        # A source build of mpi4py has one library: MPI4PY_LIBMPI cannot help.
        reason, hint = _load.mpi4py_advice(out["reason"], "", switchable=False)
        self.assertEqual(reason, "mpi4py is built for Open MPI, but this job runs under Hydra (MPICH) (2 tasks)")
        self.assertIn("MPICC=mpicc.mpich pip install --no-binary mpi4py mpi4py", hint)

    def test_no_texts_of_its_own(self) -> None:
        src = Path(_load.__file__).read_text()
        for text in ("as if to deny", "has nothing for preset", "compiled kernels may miss", "compiles its kernels as usual"):
            self.assertNotIn(text, src)


class HarvestTest(unittest.TestCase):
    """harvest() reads libkbundle's answer (loadcmd.HarvestOutcome) into a
    HarvestResult, maps its kind as load_bundle does, and prints Go's
    lines: it has no texts of its own."""

    OUT: Dict[str, Any] = {
        "ok": True,
        "nodes": [
            {"host": "kbn1", "first_rank": 0, "last_rank": 1, "entries": 0, "bytes": 0, "also_on_other_nodes": 0,
             "chosen": 0},
            {"host": "kbn2", "first_rank": 2, "last_rank": 3, "entries": 2, "bytes": 30, "also_on_other_nodes": 1,
             "chosen": 2, "skipped": [{"name": "link", "why": "symlink"}]},
        ],
        "units": 1, "files": 2, "bytes": 30, "layer": "/s/set.kbundle.d/000001-ab.kbundle", "base": False,
        "digest": "xxh3-128:aa", "content": "xxh3-128:bb", "packed_bytes": 400, "set": "/s/set.kbundle",
        "report": ["kbn1 (ranks 0-1): from Go", "kbn2 (ranks 2-3): from Go", "wrote: from Go"],
        "warnings": [],
    }

    def test_result(self) -> None:
        res = _harvest.result(self.OUT)
        self.assertTrue(res)
        self.assertEqual(res.bundle, "/s/set.kbundle")
        self.assertEqual(res.layer, "/s/set.kbundle.d/000001-ab.kbundle")
        self.assertEqual((res.units, res.files, res.bytes, res.base, res.packed_bytes), (1, 2, 30, False, 400))
        self.assertEqual((res.digest, res.content_digest), ("xxh3-128:aa", "xxh3-128:bb"))
        self.assertEqual(res.report, tuple(self.OUT["report"]))
        self.assertEqual(res.nodes[1], HarvestNode(host="kbn2", first_rank=2, last_rank=3, entries=2, bytes=30,
                                                   also_on_other_nodes=1, chosen=2, skipped=(("link", "symlink"),)))
        self.assertEqual(res.nodes[1].ranks, range(2, 4))
        # The presets' counts and cause, and the job's verdict (issue 30).
        use = {"preset": "numba", "units_loaded": 3, "units_used": 0, "entries_new": 0, "entries_recompiled": 0,
               "cause": {"rule": "exports", "text": "loaded but unused: pass NUMBA_CACHE_DIR", "verdict": "v"}}
        nodes = [dict(self.OUT["nodes"][0], presets=[use])]
        cold = _harvest.result(dict(self.OUT, nodes=nodes, verdict="cache: loaded but unused: pass NUMBA_CACHE_DIR"))
        self.assertEqual(cold.verdict, "cache: loaded but unused: pass NUMBA_CACHE_DIR")
        self.assertEqual(cold.nodes[0].presets, (PresetUse(preset="numba", units_loaded=3, cause_rule="exports",
                                                            cause="loaded but unused: pass NUMBA_CACHE_DIR"),))
        none = _harvest.result(dict(self.OUT, layer="", digest="", content=""))
        self.assertTrue(none)
        self.assertIsNone(none.layer)

    def test_failure(self) -> None:
        out: Dict[str, Any] = {"ok": False, "kind": "failed", "reason": "harvest: from Go", "warnings": []}
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            kind, reason, hint = _load.failure(out, False, True, HarvestFailedError, stacklevel=2)
        self.assertEqual((kind, reason, hint), ("failed", "harvest: from Go", ""))
        self.assertEqual([str(w.message) for w in got], ["kbundle: harvest: from Go"])
        with self.assertRaises(HarvestFailedError) as cm:
            _load.failure(out, True, True, HarvestFailedError, stacklevel=2)
        self.assertEqual(str(cm.exception), "kbundle: harvest: from Go")
        with self.assertRaises(KbundleUsageError):
            _load.failure(dict(out, kind="usage"), False, True, HarvestFailedError, stacklevel=2)
        with self.assertRaises(KbundleMPIError):
            _load.failure(dict(out, kind="mpi"), False, True, HarvestFailedError, stacklevel=2)

    def test_no_texts_of_its_own(self) -> None:
        src = Path(_harvest.__file__).read_text()
        for text in ("wrote a new layer", "first bundle", "nothing new:", "would write", "the bundle lacked",
                     "also on other nodes", "not harvested:"):
            self.assertNotIn(text, src)


class CountTest(unittest.TestCase):
    """load_bundle(count=True)'s hooks (kbundle._count) on stand-in
    frameworks: JAX's monitoring events, Triton's compilation listener,
    Inductor's counters read against their values at start; harvest's
    lines from every rank's counts (issue 30)."""

    def setUp(self) -> None:
        import importlib

        from kbundle import _count

        self.count = importlib.reload(_count)  # its state is the process's

    def test_hooks(self) -> None:
        listeners: List[Any] = []
        jax = ModuleType("jax")
        mon = ModuleType("jax.monitoring")
        mon.register_event_listener = listeners.append  # type: ignore[attr-defined]
        triton = ModuleType("triton")
        knobs = ModuleType("triton.knobs")
        seen: List[bool] = []
        knobs.compilation = type("C", (), {"listener": lambda *a, cache_hit=False, **k: seen.append(cache_hit)})()  # type: ignore[attr-defined]
        from collections import Counter, defaultdict

        counters: Dict[str, "Counter[str]"] = defaultdict(Counter)
        counters["inductor"]["fxgraph_cache_hit"] = 5  # before the load: not this job's
        utils = ModuleType("torch._dynamo.utils")
        utils.counters = counters  # type: ignore[attr-defined]
        mods = {"jax": jax, "jax.monitoring": mon, "triton": triton, "triton.knobs": knobs, "torch._dynamo.utils": utils}
        with unittest.mock.patch.dict(sys.modules, mods):
            self.assertIsNone(self.count.snapshot())
            self.assertEqual(self.count.start(("jax", "inductor")), ["JAX", "Triton"])
            for ev in [self.count.JAX_MISS, self.count.JAX_MISS, self.count.JAX_HIT, "/jax/other"]:
                listeners[0](ev)
            knobs.compilation.listener(src=None, metadata={}, metadata_group={}, times=None, cache_hit=True)
            counters["inductor"]["fxgraph_cache_hit"] += 3
            counters["inductor"]["fxgraph_cache_miss"] += 1
            snap = self.count.snapshot()
        self.assertEqual(snap, {"JAX": (1, 2), "Triton": (1, 0), "Inductor": (3, 1)})  # vLLM not imported: not read
        self.assertEqual(seen, [True])  # the listener there before still called

    def test_report(self) -> None:
        same = {"JAX": (16, 0)}
        self.assertEqual(self.count.report([same, same], False), ["JAX: 16 hits, 0 misses on every rank"])
        self.assertEqual(self.count.report([{"JAX": (10, 2)}, {"JAX": (6, 0)}, None], True), [
            "JAX: 16 hits, 2 misses over 2 ranks (a rank: 6 to 10 hits, 0 to 2 misses)",
            "Numba: no hook; its counts come from file use (the numba line above)",
            "1 of 3 ranks did not count (load_bundle without count=True)",
        ])
        self.assertEqual(self.count.report([None, None], False), [])


class MainTest(unittest.TestCase):
    """python -m kbundle and the kbundle console script (kbundle/__main__.py)."""

    def setUp(self) -> None:
        self.tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.tmp)

    def test_environment_mpi_first(self) -> None:
        venv = self.tmp / "venv"
        (venv / "lib").mkdir(parents=True)
        with unittest.mock.patch.object(sys, "prefix", str(venv)), \
                unittest.mock.patch.object(sys, "base_prefix", "/usr"):
            self.assertEqual(kbmain.environment({"A": "1"}), {"A": "1"})  # no MPI in the environment
            (venv / "lib" / "libmpi.so.12").touch()  # PyPI's mpich or impi-rt
            lib = str(venv / "lib")
            self.assertEqual(kbmain.environment({"A": "1"}), {"A": "1", "LD_LIBRARY_PATH": lib})
            self.assertEqual(kbmain.environment({"LD_LIBRARY_PATH": "/opt/x"}), {"LD_LIBRARY_PATH": lib + ":/opt/x"})
        with unittest.mock.patch.object(sys, "prefix", str(venv)), \
                unittest.mock.patch.object(sys, "base_prefix", str(venv)):
            self.assertEqual(kbmain.environment({}), {})  # not a virtual environment

    def test_runs_the_front(self) -> None:
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir()
        front = bin_dir / "kbundle"
        front.write_text('#!/bin/sh\nprintf "%s|%s\\n" "$0" "$*"\n')
        front.chmod(0o755)
        code = f"import kbundle.__main__ as m, pathlib; m.BIN_DIR = pathlib.Path({str(bin_dir)!r}); m.main()"
        out = subprocess.run([sys.executable, "-c", code, "load", "--bundle", "a b"], capture_output=True, text=True,
                             check=True)
        self.assertEqual(out.stdout, f"{front}|load --bundle a b\n")

    def test_mpich_launch(self) -> None:
        hydra = {"MPI_LOCALRANKID": "0", "PMI_RANK": "0", "PMI_SIZE": "2"}
        self.assertTrue(kbmain.mpich_launch(hydra))
        self.assertTrue(kbmain.mpich_launch({"PALS_RANKID": "1", "PMI_SIZE": "4"}))
        self.assertTrue(kbmain.mpich_launch({"KBUNDLE_BUILD": "mpich"}))
        self.assertFalse(kbmain.mpich_launch(dict(hydra, KBUNDLE_BUILD="openmpi")))
        self.assertFalse(kbmain.mpich_launch(dict(hydra, PMI_SIZE="1")))
        self.assertFalse(kbmain.mpich_launch(dict(hydra, OMPI_COMM_WORLD_SIZE="2")))
        self.assertFalse(kbmain.mpich_launch({}))

    def test_missing_mpich_library(self) -> None:
        """U40: the wheel's kbundle-mpich on Debian's MPICH (libmpich.so.12,
        no libmpi.so.12) is one message with the link that fixes it."""
        bin_dir, sys_lib, ld = self.tmp / "bin", self.tmp / "usr-lib", self.tmp / "ld"
        for d in (bin_dir, sys_lib, ld):
            d.mkdir()
        (bin_dir / "kbundle-mpich").write_bytes(b"\x7fELF...libc.so.6\0libmpi.so.12\0...")  # as the wheel's
        env = {"MPI_LOCALRANKID": "0", "PMI_RANK": "0", "PMI_SIZE": "2", "LD_LIBRARY_PATH": str(ld)}
        none = lambda name: False  # noqa: E731: the loader finds nothing
        msg = kbmain.missing_mpi(env, bin_dir, loads=none, system_dirs=[sys_lib])
        assert msg is not None
        self.assertRegex(msg, r"^kbundle: kbundle-mpich needs libmpi.so.12, MPICH's library .* finds none\n"
                              r"kbundle: hint: load the MPI you launch with .*\n$")
        (sys_lib / "libmpich.so.12").touch()
        msg = kbmain.missing_mpi(env, bin_dir, loads=none, system_dirs=[sys_lib])
        assert msg is not None
        lines = msg.splitlines()
        self.assertEqual(len(lines), 2)
        self.assertEqual(lines[0], f"kbundle: kbundle-mpich needs libmpi.so.12, and this MPICH names it "
                                   f"{sys_lib}/libmpich.so.12 (as Debian and Ubuntu do)")
        self.assertIn(f"ln -sf {sys_lib}/libmpich.so.12 $HOME/.local/lib/kbundle-mpich/libmpi.so.12", lines[1])
        self.assertIn("MPI4PY_LIBMPI=libmpi.so.12", lines[1])
        # Found: on LD_LIBRARY_PATH, or by the loader; or another launcher.
        (ld / "libmpi.so.12").touch()
        self.assertIsNone(kbmain.missing_mpi(env, bin_dir, loads=none, system_dirs=[sys_lib]))
        (ld / "libmpi.so.12").unlink()
        self.assertIsNone(kbmain.missing_mpi(env, bin_dir, loads=lambda n: n == "libmpi.so.12", system_dirs=[sys_lib]))
        self.assertIsNone(kbmain.missing_mpi({"OMPI_COMM_WORLD_SIZE": "2"}, bin_dir, loads=none, system_dirs=[sys_lib]))
        self.assertIsNone(kbmain.missing_mpi(env, self.tmp / "nobin", loads=none, system_dirs=[sys_lib]))
        # Built by make python with Debian's mpicc.mpich: it needs libmpich.so.12, found.
        (bin_dir / "kbundle-mpich").write_bytes(b"\x7fELF...libc.so.6\0libmpich.so.12\0...")
        self.assertIsNone(kbmain.missing_mpi(env, bin_dir, loads=none, system_dirs=[sys_lib]))

    def test_missing_mpich_library_exits_2(self) -> None:
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir()
        for name in ("kbundle", "kbundle-mpich"):
            (bin_dir / name).write_text("#!/bin/sh\necho ran\n# libmpi.so.12\0\n")
            (bin_dir / name).chmod(0o755)
        code = (f"import kbundle.__main__ as m, pathlib; m.BIN_DIR = pathlib.Path({str(bin_dir)!r}); "
                "m._loads = lambda n: False; m._system_dirs = lambda: []; m.main()")
        env = dict(os.environ, MPI_LOCALRANKID="1", PMI_RANK="1", PMI_SIZE="2", LD_LIBRARY_PATH="")
        out = subprocess.run([sys.executable, "-c", code, "load"], capture_output=True, text=True, env=env)
        self.assertEqual((out.returncode, out.stdout, out.stderr), (2, "", ""))  # rank 1: silent
        env["PMI_RANK"] = "0"
        out = subprocess.run([sys.executable, "-c", code, "load"], capture_output=True, text=True, env=env)
        self.assertEqual(out.returncode, 2)
        self.assertIn("kbundle-mpich needs libmpi.so.12", out.stderr)
        self.assertNotIn("ran", out.stdout)

    def test_no_front(self) -> None:
        with unittest.mock.patch.object(kbmain, "BIN_DIR", self.tmp / "none"), \
                unittest.mock.patch.object(sys, "stderr", new_callable=io.StringIO) as err:
            with self.assertRaises(SystemExit) as cm:
                kbmain.main(["kbundle", "version"])
        self.assertEqual(cm.exception.code, 1)
        self.assertIn("this installation of the package has no kbundle program", err.getvalue())
        self.assertIn("hint: install the wheel", err.getvalue())


class CleanTest(unittest.TestCase):
    """kbundle.clean() runs the package's kbundle clean, without MPI, and
    reads its --json answer (U50: the Python API had no way to remove what
    load_bundle installed)."""

    def setUp(self) -> None:
        self.tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.tmp)
        self.bin = self.tmp / "bin"
        self.bin.mkdir()
        self.log = self.tmp / "args"

    def front(self, answer: str) -> None:
        f = self.bin / "kbundle"
        f.write_text(f'#!/bin/sh\necho "$KBUNDLE_BUILD $*" > {self.log}\ncat <<"EOF"\n{answer}\nEOF\n')
        f.chmod(0o755)

    def test_removed(self) -> None:
        from kbundle import _clean
        self.front('{"schema_version":1,"ok":true,"removed":["/t/d"],"missing":[],"stale":[],"refused":[],"left":[]}')
        with unittest.mock.patch.object(kbmain, "BIN_DIR", self.bin):
            res = kbundle.clean(Path("/t/d"), older_than=90)
        self.assertTrue(res)
        self.assertEqual(res.removed, ("/t/d",))
        self.assertEqual(self.log.read_text(), "none clean --json --older-than 90 -- /t/d\n")
        self.assertIs(_clean.CleanResult, kbundle.CleanResult)

    def test_refused(self) -> None:
        self.front('{"schema_version":1,"ok":false,"kind":"failed","reason":"/t: destination refused: no record",'
                   '"hint":"hint: pass a DEST","exit_status":1,"removed":[],"missing":[],"stale":[],"refused":["/t"],"left":[]}')
        with unittest.mock.patch.object(kbmain, "BIN_DIR", self.bin):
            res = kbundle.clean(["/t", "/u"])
        self.assertFalse(res)
        self.assertEqual((res.refused, res.reason, res.hint), (("/t",), "/t: destination refused: no record", "pass a DEST"))
        self.assertEqual(self.log.read_text(), "none clean --json -- /t /u\n")

    def test_usage(self) -> None:
        with self.assertRaises(KbundleUsageError):
            kbundle.clean([])
        with unittest.mock.patch.object(kbmain, "BIN_DIR", self.tmp / "none"):
            with self.assertRaises(kbundle.KbundleError) as cm:
                kbundle.clean("/t/d")
        self.assertIn("no kbundle program", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
