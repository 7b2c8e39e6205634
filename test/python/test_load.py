"""kbundle.load_bundle under a real MPI launcher: run by every rank
(python_test.go starts `mpirun -np N python -m pytest test_load.py`).

Every test is collective: each rank runs the same tests in the same order
and calls load_bundle the same number of times, and checks that matter
"on every rank" compare the ranks' values with allgather. The Go driver
makes the fixtures and passes them in KBUNDLE_PYTEST_* variables:
TREE (the cache tree), BUNDLE (it packed, recording the preset triton),
DAMAGED (one byte flipped), UNTRUSTED (in a directory others can write),
FOREIGN (recording another warm-up machine),
WORK (a fresh directory for destinations), VARIANT (openmpi or mpich).
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
from mpi4py import MPI

import kbundle
from kbundle import (
    BundleUnusableError,
    KbundleUsageError,
    KbundleWarning,
    LoadFailedError,
    LoadResult,
    load_bundle,
)

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
SIZE = COMM.Get_size()
TREE = Path(os.environ["KBUNDLE_PYTEST_TREE"])
BUNDLE = Path(os.environ["KBUNDLE_PYTEST_BUNDLE"])
DAMAGED = Path(os.environ["KBUNDLE_PYTEST_DAMAGED"])
UNTRUSTED = Path(os.environ["KBUNDLE_PYTEST_UNTRUSTED"])
FOREIGN = Path(os.environ["KBUNDLE_PYTEST_FOREIGN"])
OLDPYTHON = Path(os.environ["KBUNDLE_PYTEST_OLDPYTHON"])
WORK = Path(os.environ["KBUNDLE_PYTEST_WORK"])
VARIANT = os.environ["KBUNDLE_PYTEST_VARIANT"]

# Variables a test may change; restored after each.
TOUCHED = ("KBUNDLE_CACHE_DIR", "KBUNDLE_LOCAL_DIR", "KBUNDLE_TEST_RANKS_PER_NODE", "TMPDIR",
           "TRITON_CACHE_DIR", "TRITON_CACHE_AUTOTUNING", "KBUNDLE_TIMEOUT")


@pytest.fixture(autouse=True)
def clean_env() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in TOUCHED}
    for k in TOUCHED:
        os.environ.pop(k, None)
    COMM.Barrier()
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    COMM.Barrier()


def on_all(value: Any) -> List[Any]:
    """Every rank's value, in rank order."""
    return COMM.allgather(value)


def same_on_all(value: Any) -> None:
    vals = on_all(value)
    assert all(v == vals[0] for v in vals), f"ranks differ: {vals}"


# kbundle's mark at the top of a tree it installed (bundle.InstalledMarker).
MARKER = ".kbundle-installed"


def snapshot(root: Path) -> Dict[str, Tuple[str, int, int, bytes]]:
    """Kind, permission bits, nanosecond mtime and content of every entry
    (but kbundle's own mark at the top)."""
    out: Dict[str, Tuple[str, int, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p == root / MARKER:
                continue
            st = p.lstat()
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
            body = p.read_bytes() if kind == "file" else b""
            out[str(p.relative_to(root))] = (kind, stat.S_IMODE(st.st_mode), st.st_mtime_ns, body)
    return out


def collect(f: Callable[[], LoadResult]) -> Tuple[LoadResult, List[warnings.WarningMessage]]:
    """Runs f and returns its result and the KbundleWarnings it issued."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        res = f()
    return res, [w for w in got if issubclass(w.category, KbundleWarning)]


def dest_for(name: str) -> Path:
    return WORK / f"{name}-np{SIZE}"


def test_library_matches_mpi() -> None:
    assert kbundle.mpi_library().endswith(f"libkbundle-{VARIANT}.so")
    assert VARIANT == ("openmpi" if "Open MPI" in MPI.Get_library_version() else "mpich")
    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE  # mpi4py's default


def test_success() -> None:
    dest = dest_for("ok")
    res, warned = collect(lambda: load_bundle(COMM, bundle=BUNDLE, dest=dest))
    assert res and res.ok and res.reason == "" and res.kind == ""
    assert warned == []
    assert res.dest == str(dest)
    assert res.bundle == str(BUNDLE)
    assert res.entries == len(snapshot(TREE))  # files and directories
    assert res.bytes == BUNDLE.stat().st_size
    assert res.raw_bytes > 0 and res.nodes == 1 and res.ranks == SIZE
    assert res.seconds > 0 and 0 <= res.read_seconds <= res.seconds
    assert 0 <= res.bcast_seconds <= res.seconds and 0 < res.extract_seconds <= res.seconds
    # The preset recorded at pack time is applied; its variable is set here.
    assert res.presets == ("triton",)
    assert dict(res.env) == {"TRITON_CACHE_DIR": f"{dest}/triton", "TRITON_CACHE_AUTOTUNING": "1"}
    assert os.environ["TRITON_CACHE_DIR"] == f"{dest}/triton"
    assert on_all(res.leader).count(True) == 1
    same_on_all((res.dest, res.entries, res.bytes, res.presets, dict(res.env), res.extract_seconds))
    assert snapshot(dest) == snapshot(TREE)
    assert (dest / MARKER).is_file()
    with pytest.raises(Exception):
        res.ok = False  # type: ignore[misc]  # frozen


def test_explicit_presets() -> None:
    res = load_bundle(COMM, bundle=str(BUNDLE), dest=dest_for("nopreset"), preset=[], replace_presets=True)
    assert res.ok and res.presets == () and dict(res.env) == {}
    assert "TRITON_CACHE_DIR" not in os.environ
    res = load_bundle(COMM, bundle=BUNDLE, dest=dest_for("numba"), preset="numba,triton")
    assert res.ok and set(res.presets) == {"numba", "triton"}
    assert os.environ["TRITON_CACHE_DIR"] == f"{dest_for('numba')}/triton"
    assert os.environ["NUMBA_CACHE_DIR"].startswith(str(dest_for("numba")))


def test_preset_with_nothing_in_the_bundle() -> None:
    res, warned = collect(lambda: load_bundle(COMM, bundle=BUNDLE, dest=dest_for("jax"), preset="jax", replace_presets=True))
    assert res.ok and res.presets == ("jax",)
    assert len(warned) == (1 if RANK == 0 else 0)
    if RANK == 0:
        assert res.empty_presets == ("jax",)
        assert "nothing for preset jax" in str(warned[0].message)


def test_warmed_on_another_machine() -> None:
    res, warned = collect(lambda: load_bundle(COMM, bundle=FOREIGN, dest=dest_for("foreign")))
    assert res.ok and res.mismatch_nodes == res.nodes == 1
    if res.leader:
        assert len(res.mismatch_keys) == 1
        assert res.mismatch_keys[0].startswith('host.cpu_model: warmed on "Imaginary CPU 9000", here ')
    assert len(warned) == (1 if RANK == 0 else 0)
    if RANK == 0:
        text = str(warned[0].message)
        # One line for the nodes that differ alike, named in hostlist form.
        assert f"{socket.gethostname()} differs from the machine the cache was warmed on (host.cpu_model: warmed on" in text


def test_toolchain_read_in_process(probe_calls: List[bytes]) -> None:
    # The Numba preset compares Python's version: load_bundle reads this
    # interpreter's in process, on each node's leader only, and starts no
    # python3 for it (issue 31).
    calls = probe_calls
    res, _ = collect(lambda: load_bundle(COMM, bundle=OLDPYTHON, dest=dest_for("oldpython")))
    assert res.ok and res.mismatch_nodes == res.nodes
    here = "%d.%d.%d" % sys.version_info[:3]
    if res.leader:
        assert res.mismatch_keys == (f'toolchain.python: warmed on "2.7.18", here "{here}"',)
        assert len(calls) == 1  # one probe, in this interpreter
    else:
        assert calls == []


def test_defaults_from_environment() -> None:
    # Set after the library was loaded: the call must still see them.
    os.environ["KBUNDLE_CACHE_DIR"] = str(BUNDLE.parent)
    tmp = WORK / f"tmp-np{SIZE}"
    if RANK == 0:
        tmp.mkdir()
    COMM.Barrier()
    os.environ["TMPDIR"] = str(tmp)
    res = load_bundle(COMM)
    assert res.ok, res.reason
    assert Path(res.dest).parent == tmp and Path(res.dest).name.startswith("kbundle-")
    same_on_all(res.dest)
    assert snapshot(Path(res.dest)) == snapshot(TREE)
    # KBUNDLE_LOCAL_DIR comes before the default.
    os.environ["KBUNDLE_LOCAL_DIR"] = str(dest_for("localdir"))
    res = load_bundle(COMM)
    assert res.ok and res.dest == str(dest_for("localdir"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a directory of another user")
def test_default_destination_taken() -> None:
    # The default name (TMPDIR/kbundle-USER-JOB), made first by another
    # user: the load moves to an unguessable sibling, the same on every
    # rank, and rank 0 warns once (W6).
    tmp = WORK / f"taken-np{SIZE}"
    if RANK == 0:
        tmp.mkdir()
    COMM.Barrier()
    os.environ["TMPDIR"] = str(tmp)
    first = load_bundle(COMM, bundle=BUNDLE)
    assert first.ok, first.reason
    default = Path(first.dest)
    COMM.Barrier()
    if RANK == 0:
        import shutil

        shutil.rmtree(default)
        default.mkdir(mode=0o777)
        os.chown(default, 65534, 65534)
    COMM.Barrier()
    res, warned = collect(lambda: load_bundle(COMM, bundle=BUNDLE))
    assert res.ok, res.reason
    assert res.taken == str(default) and res.taken_nodes == 1
    assert res.dest.startswith(str(default) + "-") and len(res.dest) == len(str(default)) + 17
    same_on_all(res.dest)
    assert snapshot(Path(res.dest)) == snapshot(TREE)
    assert not any(default.iterdir())
    assert len(warned) == (1 if RANK == 0 else 0)
    if warned:
        assert "belongs to another user on 1 node" in str(warned[0].message)


def test_destination_exists() -> None:
    dest = dest_for("twice")
    assert load_bundle(COMM, bundle=BUNDLE, dest=dest).ok
    # The same set again: a no-op success, nothing rewritten (issue 18).
    again = load_bundle(COMM, bundle=BUNDLE, dest=dest)
    assert again.ok and again.already_installed_nodes == again.nodes
    same_on_all((again.ok, again.already_installed_nodes, again.content_digest))
    # The job compiled more there since: refused, the same on every rank.
    if again.leader:
        with open(os.path.join(again.dest, "new.bin"), "wb") as f:
            f.write(b"compiled")
    COMM.Barrier()
    res, warned = collect(lambda: load_bundle(COMM, bundle=BUNDLE, dest=dest))
    assert not res and res.kind == "failed"
    assert "nothing was installed on any node" in res.reason and "force=True" in res.hint
    assert len(warned) == (1 if RANK == 0 else 0)
    same_on_all((res.ok, res.kind, res.reason, res.hint))
    with pytest.raises(LoadFailedError) as e:
        load_bundle(COMM, bundle=BUNDLE, dest=dest, strict=True)
    same_on_all(str(e.value))
    assert load_bundle(COMM, bundle=BUNDLE, dest=dest, force=True).ok


@pytest.mark.parametrize(
    "which, words, hint",
    [
        ("missing", ["nope.kbundle"], "kbundle warm --pack"),
        ("damaged", ["damaged.kbundle"], "damaged or truncated"),
        ("untrusted", ["untrusted", "chmod go-w"], "KBUNDLE_TRUSTED_GROUPS"),
        ("unconfigured", ["no bundle given", "KBUNDLE_CACHE_DIR"], ""),
    ],
)
def test_unusable(which: str, words: List[str], hint: str) -> None:
    bundle = {"missing": WORK / "nope.kbundle", "damaged": DAMAGED, "untrusted": UNTRUSTED,
              "unconfigured": None}[which]
    dest = dest_for("unusable-" + which)
    res, warned = collect(lambda: load_bundle(COMM, bundle=bundle, dest=dest))
    assert not res and res.ok is False and res.kind == "unusable"
    for w in words:
        assert w in res.reason
    assert hint in res.hint
    assert res.dest == "" and res.env == {} and "TRITON_CACHE_DIR" not in os.environ
    # The same result on every rank, one warning on rank 0 only.
    same_on_all((res.ok, res.kind, res.reason, res.hint))
    assert len(warned) == (1 if RANK == 0 else 0)
    if RANK == 0:
        text = str(warned[0].message)
        assert text.startswith("kbundle: ") and words[0] in text and "compiles its kernels as usual" in text
    assert not dest.exists()
    # strict: the same exception on every rank.
    with pytest.raises(BundleUnusableError) as e:
        load_bundle(COMM, bundle=bundle, dest=dest, strict=True)
    assert e.value.kind == "unusable" and e.value.reason == res.reason
    same_on_all(str(e.value))
    assert not dest.exists()
    assert list(WORK.glob(".kbundle-tmp-*")) == []


def test_usage_errors() -> None:
    with pytest.raises(KbundleUsageError, match="nosuch"):
        load_bundle(COMM, bundle=BUNDLE, dest=dest_for("usage"), preset="nosuch")
    with pytest.raises(KbundleUsageError, match="timeout"):
        load_bundle(COMM, bundle=BUNDLE, dest=dest_for("usage"), timeout=-1)
    os.environ["KBUNDLE_TIMEOUT"] = "soon"
    with pytest.raises(KbundleUsageError, match="KBUNDLE_TIMEOUT"):
        load_bundle(COMM, bundle=BUNDLE, dest=dest_for("usage"))
    del os.environ["KBUNDLE_TIMEOUT"]
    with pytest.raises(TypeError):
        load_bundle(COMM, bundle=BUNDLE, timeout="10m")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        load_bundle("world", bundle=BUNDLE)  # type: ignore[arg-type]
    assert not dest_for("usage").exists()


def test_fake_nodes() -> None:
    # One "node" a rank: every rank is a leader and writes DEST.node<rank>.
    os.environ["KBUNDLE_TEST_RANKS_PER_NODE"] = "1"
    dest = dest_for("nodes")
    res = load_bundle(COMM, bundle=BUNDLE, dest=dest, timeout=60)
    assert res.ok, res.reason
    assert res.nodes == SIZE and res.leader
    assert res.dest == f"{dest}.node{RANK}"
    assert os.environ["TRITON_CACHE_DIR"] == f"{dest}.node{RANK}/triton"
    assert snapshot(Path(res.dest)) == snapshot(TREE)
    # A damaged bundle fails on every fake node alike; nothing is left.
    res, warned = collect(lambda: load_bundle(COMM, bundle=DAMAGED, dest=dest_for("nodes-bad")))
    assert not res and res.kind == "unusable"
    same_on_all((res.kind, res.reason))
    assert len(warned) == (1 if RANK == 0 else 0)
    assert list(WORK.glob(f"{dest_for('nodes-bad').name}*")) == []


def test_sub_communicator() -> None:
    # Each half of the world loads on its own communicator.
    color = RANK % 2
    sub = COMM.Split(color, RANK)
    try:
        dest = dest_for(f"half{color}")
        res = load_bundle(sub, bundle=BUNDLE, dest=dest, preset=[], replace_presets=True)
        assert res.ok and res.ranks == sub.Get_size() and res.dest == str(dest)
        sub.Barrier()
        assert snapshot(dest) == snapshot(TREE)
    finally:
        sub.Free()
    assert COMM.allreduce(1) == SIZE  # the world still works


def test_status() -> None:
    # status(): what the load installed on this node, read from its
    # install record, as `kbundle status` reads it; local, not collective.
    res = load_bundle(COMM, bundle=BUNDLE, dest=dest_for("status"))
    assert res.ok
    COMM.Barrier()
    (t,) = kbundle.status(res.dest)
    assert t.state == "installed" and t.ok and t.unchanged
    assert t.content_digest == res.content_digest and t.entries == res.entries
    assert t.layers and t.layers[0]["path"] == str(BUNDLE)
    COMM.Barrier()
    if res.leader:
        with open(os.path.join(res.dest, "compiled.bin"), "wb") as f:
            f.write(b"compiled by the job")
        (t,) = kbundle.status(res.dest)
        assert t.state == "installed" and not t.ok and (t.new, t.changed, t.missing) == (1, 0, 0)
    (m,) = kbundle.status(dest_for("status-never"))
    assert m.state == "missing" and "nothing installed" in m.reason
    COMM.Barrier()
