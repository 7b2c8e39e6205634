"""kbundle.harvest under a real MPI launcher: run by every rank
(python_test.go's TestHarvestUnderMPI starts `mpirun -np 2 python -m
pytest test_harvest.py`), with KBUNDLE_TEST_RANKS_PER_NODE=1 where a test
wants several nodes: every rank is then a node of its own, with its own
DEST.node<rank>.

Every test is collective, as in test_load.py: each rank runs the same
tests in the same order, and "on every rank" checks compare the ranks'
values with allgather. The fixtures are test_load.py's (KBUNDLE_PYTEST_*):
BUNDLE (packed from TREE, recording the preset triton) is copied into a
store of each test's own, since a harvest writes next to the set.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, List, Tuple, TypeVar

import kbundle
import kbundle._load
import pytest
from mpi4py import MPI

from kbundle import (
    HarvestFailedError,
    HarvestResult,
    KbundleUsageError,
    KbundleWarning,
    harvest,
    load_bundle,
)

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
SIZE = COMM.Get_size()
BUNDLE = Path(os.environ["KBUNDLE_PYTEST_BUNDLE"])
WORK = Path(os.environ["KBUNDLE_PYTEST_WORK"])

TOUCHED = ("KBUNDLE_BUNDLE", "KBUNDLE_CACHE_DIR", "KBUNDLE_LOCAL_DIR", "KBUNDLE_TEST_RANKS_PER_NODE", "TMPDIR",
           "TRITON_CACHE_DIR", "TRITON_CACHE_AUTOTUNING", "KBUNDLE_TIMEOUT")

#: What the last rank's node compiles after the load.
NEW = "numba/new.nbi"
BODY = b"compiled on the last node"

T = TypeVar("T")


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


def same_on_all(value: Any) -> None:
    vals = COMM.allgather(value)
    assert all(v == vals[0] for v in vals), f"ranks differ: {vals}"


def collect(f: Callable[[], T]) -> Tuple[T, List[warnings.WarningMessage]]:
    """Runs f and returns its result and the KbundleWarnings it issued."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        res = f()
    return res, [w for w in got if issubclass(w.category, KbundleWarning)]


def store(name: str) -> Path:
    """A private directory holding a copy of BUNDLE as cache.kbundle, made
    by rank 0; its path on every rank."""
    d = WORK / f"store-{name}-np{SIZE}"
    if RANK == 0:
        d.mkdir(mode=0o700)
        shutil.copy2(BUNDLE, d / "cache.kbundle")
    COMM.Barrier()
    return d


def layers(set_: Path) -> List[Path]:
    return sorted(set_.parent.glob(set_.name + ".d/*.kbundle"))


def wrote_one_layer(res: HarvestResult, set_: Path) -> None:
    """Checks that res wrote NEW as the one layer of set_, the same on
    every rank."""
    assert res and res.files == 1 and res.bundle == str(set_)
    assert res.layer is not None and [Path(res.layer)] == layers(set_)
    same_on_all(res)


def load_and_compile(set_: Path, dest: Path, body: bytes = BODY) -> None:
    """Loads set_ on SIZE fake nodes (DEST.node<rank>), then the last
    rank's node compiles NEW (body)."""
    os.environ["KBUNDLE_TEST_RANKS_PER_NODE"] = "1"
    res = load_bundle(COMM, bundle=set_, dest=dest, timeout=60, strict=True)
    assert res.nodes == SIZE and res.dest == f"{dest}.node{RANK}"
    if RANK == SIZE - 1:
        (Path(res.dest) / NEW).write_bytes(body)
    COMM.Barrier()


def test_harvest_writes_one_layer() -> None:
    set_ = store("layer") / "cache.kbundle"
    dest = WORK / f"dest-layer-np{SIZE}"
    load_and_compile(set_, dest)

    # A dry run reports it and writes nothing.
    dry = harvest(COMM, bundle=set_, dest=dest, timeout=60, dry_run=True)
    assert dry and dry.dry_run and dry.files == 1 and dry.units == 1 and dry.layer is None
    assert dry.report[-1] == f"dry run: would write 1 file (1 cache unit) to {set_}"
    same_on_all(dry)
    assert layers(set_) == []

    res, warned = collect(lambda: harvest(COMM, bundle=set_, dest=dest, timeout=60))
    assert isinstance(res, HarvestResult) and res and res.ok and res.kind == "" and warned == []
    assert (res.files, res.units, res.bytes, res.base, res.dry_run) == (1, 1, len(BODY), False, False)
    assert res.bundle == str(set_)
    assert res.layer is not None and [Path(res.layer)] == layers(set_)
    assert res.digest.startswith("xxh3-128:") and res.content_digest.startswith("xxh3-128:")
    assert res.packed_bytes == Path(res.layer).stat().st_size
    assert [n.ranks for n in res.nodes] == [range(r, r + 1) for r in range(SIZE)]
    assert [n.entries for n in res.nodes] == [0] * (SIZE - 1) + [1]
    assert res.nodes[-1].bytes == len(BODY) and res.nodes[-1].chosen == 1 and res.nodes[-1].skipped == ()
    host = res.nodes[0].host
    assert host and all(n.host == host for n in res.nodes)  # fake nodes of one machine
    # The report is `kbundle harvest`'s lines, in Go's words.
    assert res.report[-1] == f"wrote a new layer, {res.layer}: 1 file (1 cache unit, {res.bytes} B)"
    assert res.report[-2] == f"{host} (rank {SIZE - 1}): compiled 1 entry ({len(BODY)} B) the bundle lacked"
    # Before the nodes' lines, what each node did with each preset's units
    # (issue 30), and the job's verdict beside the report.
    nodes = [line for line in res.report if ": compiled " in line]
    assert len(nodes) == (1 if SIZE == 1 else 2) and len(res.report) == len(nodes) + 1 + sum(": numba: " in line or ": triton: " in line for line in res.report)
    assert res.verdict.startswith("cache: ")
    # The same result object on every rank.
    same_on_all(res)

    # The layer loads with the set: every node gets the new file.
    again = load_bundle(COMM, bundle=set_, dest=WORK / f"dest-again-np{SIZE}", timeout=60, strict=True)
    assert (Path(again.dest) / NEW).read_bytes() == BODY

    # Harvested already: a second harvest writes nothing.
    second = harvest(COMM, bundle=set_, dest=dest, timeout=60)
    assert second and second.layer is None and second.files == 0 and second.digest == ""
    assert second.report[-1] == f"nothing new: no layer written to {set_}"
    same_on_all(second)
    assert len(layers(set_)) == 1


def test_toolchain_read_in_process(request: pytest.FixtureRequest) -> None:
    # The layer records this interpreter's versions (U41): harvest reads
    # them in process, as load_bundle does, and starts no python3 for
    # them (issue 31): rank 0 once, for the layer; another leader at most
    # once, where its presets look cold.
    d = store("probe")
    load_and_compile(d / "cache.kbundle", WORK / f"dest-probe-np{SIZE}")
    calls: List[bytes] = request.getfixturevalue("probe_calls")  # the harvest's alone
    res = harvest(COMM)
    wrote_one_layer(res, d / "cache.kbundle")
    assert len(calls) == 1 if RANK == 0 else len(calls) <= 1, calls


def test_harvest_failure_is_the_same_everywhere() -> None:
    set_ = store("fail") / "cache.kbundle"
    dest = WORK / f"dest-fail-np{SIZE}"
    # Larger than MPI's eager limit: the last node's send of it completes
    # only once rank 0 receives it, which rank 0 must do though it cannot
    # write the layer (or that node waits until the timeout).
    load_and_compile(set_, dest, body=os.urandom(9 << 20))
    missing = set_  # its folder removed since the load: rank 0 cannot write there
    if RANK == 0:
        shutil.rmtree(set_.parent)
    COMM.Barrier()
    res, warned = collect(lambda: harvest(COMM, bundle=missing, dest=dest, timeout=20))
    assert not res and res.ok is False and res.kind == "failed"
    assert res.reason.startswith(f"harvest: cannot write a layer of {missing}")
    assert res.layer is None and res.nodes == () and res.report == ()
    same_on_all(res)
    assert len(warned) == (1 if RANK == 0 else 0)
    if warned:
        assert str(warned[0].message).startswith(f"kbundle: harvest: cannot write a layer of {missing}")
    with pytest.raises(HarvestFailedError) as e:
        harvest(COMM, bundle=missing, dest=dest, timeout=20, strict=True)
    # (The reason names rank 0's temporary file, another each time.)
    assert e.value.kind == "failed" and e.value.reason.startswith(f"harvest: cannot write a layer of {missing}")
    same_on_all((type(e.value).__name__, str(e.value)))
    assert not missing.parent.exists()
    assert layers(set_) == []


def test_no_install_record_is_reported() -> None:
    # A DEST that load_bundle did not install is named in the report, as
    # `kbundle harvest` does: not an error.
    set_ = store("plain") / "cache.kbundle"
    plain = WORK / f"plain-np{SIZE}"
    if RANK == 0:
        plain.mkdir()
        (plain / "x.bin").write_bytes(b"x")
    COMM.Barrier()
    res = harvest(COMM, bundle=set_, dest=plain)
    assert res and len(res.nodes) == 1 and res.nodes[0].no_record and res.layer is None
    assert "not harvested: " in res.report[0] and "install record" in res.nodes[0].error
    same_on_all(res)


def test_defaults_from_environment() -> None:
    # The set from KBUNDLE_CACHE_DIR, DEST as load_bundle's default.
    d = store("defaults")
    tmp = WORK / f"tmp-np{SIZE}"
    if RANK == 0:
        tmp.mkdir()
    COMM.Barrier()
    os.environ["KBUNDLE_CACHE_DIR"] = str(d)
    os.environ["TMPDIR"] = str(tmp)
    loaded = load_bundle(COMM, strict=True)
    if loaded.leader:
        (Path(loaded.dest) / NEW).write_bytes(BODY)
    COMM.Barrier()
    res = harvest(COMM)
    wrote_one_layer(res, d / "cache.kbundle")


def test_reuses_the_load() -> None:
    # U36: harvest(comm) after load_bundle(comm, bundle=SET, dest=D)
    # harvests D into SET, with no argument and no variable.
    d = store("reuse")
    load_and_compile(d / "cache.kbundle", WORK / f"dest-reuse-np{SIZE}")
    res = harvest(COMM)
    wrote_one_layer(res, d / "cache.kbundle")
    # Each node's DEST records the harvest (U44), which status() reads.
    (t,) = kbundle.status(f"{WORK}/dest-reuse-np{SIZE}.node{RANK}")
    assert t.harvested and t.harvested_set == str(d / "cache.kbundle") and t.harvested_layer == res.layer


def test_max_size_prunes() -> None:
    # The CLI's pruning (--max-size): past the bound, the harvest merges
    # the set without its least recently used units, and says so.
    d = store("prune")
    load_and_compile(d / "cache.kbundle", WORK / f"dest-prune-np{SIZE}")
    res = harvest(COMM, max_size=1)
    assert res and res.layer is not None
    assert any("pruning merge folded" in line or "over max_size=" in line for line in res.report), res.report
    assert not any("--max-size" in line or "--json" in line for line in res.report), res.report  # Python's words
    same_on_all(res)
    with pytest.raises(TypeError):
        harvest(COMM, max_size="1G")  # type: ignore[arg-type]


def test_usage_errors() -> None:
    set_ = BUNDLE
    with pytest.raises(KbundleUsageError) as e:
        harvest(COMM, bundle=set_, timeout=-1)
    assert "timeout=-1" in str(e.value)
    same_on_all(str(e.value))
    # Only rank 0's set is used: with none given, nothing loaded in this
    # process and no tree loaded on its node, it is every rank's error.
    kbundle._load._last_load = None
    os.environ["TMPDIR"] = str(WORK)
    with pytest.raises(KbundleUsageError) as e:
        harvest(COMM, bundle=None if RANK == 0 else set_)
    assert "no bundle set: " in str(e.value) and "; pass bundle=PATH or set KBUNDLE_BUNDLE" in str(e.value)
    assert "--bundle" not in str(e.value)
    same_on_all(str(e.value))
    del os.environ["TMPDIR"]
    os.environ["KBUNDLE_TIMEOUT"] = "soon"
    with pytest.raises(KbundleUsageError, match="KBUNDLE_TIMEOUT"):
        harvest(COMM, bundle=set_)
    del os.environ["KBUNDLE_TIMEOUT"]
    with pytest.raises(TypeError):
        harvest(COMM, bundle=set_, timeout="10m")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        harvest("world", bundle=set_)  # type: ignore[arg-type]
    assert list(BUNDLE.parent.glob("*.d")) == []
