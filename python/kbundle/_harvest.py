"""harvest: `kbundle harvest` inside an mpi4py program."""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

from . import _count, _load, _megacache, _torch
from ._errors import HarvestFailedError, KbundleUsageError, KbundleWarning
from ._load import _lines, call, comm_rank, failure, path, seconds

if TYPE_CHECKING:
    from mpi4py import MPI  # imported at call time only

    from ._load import PathArg


@dataclass(frozen=True)
class PresetUse:
    """What one node's job did with one preset's cache: a line of the
    report ("numba: 47 of 48 units used; 1 new, 0 recompiled")."""

    #: The preset's name ("" for files under no preset's directory).
    preset: str
    #: Cache units loaded into DEST, and those the job read (access times).
    units_loaded: int = 0
    units_used: int = 0
    #: Entries compiled that the set lacks, and entries it holds that were
    #: compiled again (or a new key beside one of the same kernel name).
    entries_new: int = 0
    entries_recompiled: int = 0
    #: The likely cause of units loaded but unused, or compiled again
    #: ("" when the job ran warm): its rule ("exports", "toolchain",
    #: "key", "machine", "unread") and words.
    cause_rule: str = ""
    cause: str = ""


@dataclass(frozen=True)
class HarvestNode:
    """What one node compiled that the set lacked: one line of the
    report (``kbundle harvest``'s)."""

    #: The node's name (its leader's host name).
    host: str
    #: Its ranks of comm: first_rank to last_rank (``ranks``).
    first_rank: int
    last_rank: int
    #: New and changed files in its DEST that the set lacked, and their size.
    entries: int = 0
    bytes: int = 0
    #: How many of them other nodes compiled too (the same bytes).
    also_on_other_nodes: int = 0
    #: Files taken from this node for the layer (each cache unit is taken
    #: whole from the lowest rank holding it).
    chosen: int = 0
    #: Paths left out, and why: (name, why) pairs (symlinks, special
    #: files, unreadable files, other owners' files, kbundle's own).
    skipped: Tuple[Tuple[str, str], ...] = ()
    #: Why the node was not harvested ("" when it was): a DEST without
    #: install record (no_record), one that cannot be read.
    error: str = ""
    no_record: bool = False
    #: The node has no DEST (nothing was loaded there).
    missing_dest: bool = False
    #: Per preset, what the job did with the cache units loaded here.
    presets: Tuple[PresetUse, ...] = ()

    @property
    def ranks(self) -> range:
        """The node's ranks of comm."""
        return range(self.first_rank, self.last_rank + 1)


@dataclass(frozen=True)
class HarvestResult:
    """What :func:`harvest` did, the same on every rank. Truthy when the
    harvest succeeded, whether or not it wrote a layer (``layer``).

    On failure (``ok`` False, without ``strict``) ``kind`` is "failed"
    (nothing was published), ``reason`` and ``hint`` say why, and the
    other fields are empty.
    """

    ok: bool
    reason: str = ""
    hint: str = ""
    kind: str = ""
    #: The set harvested into (rank 0's ``bundle``).
    bundle: str = ""
    #: One report a node of comm, in rank order.
    nodes: Tuple[HarvestNode, ...] = ()
    #: Cache units and files written (with ``dry_run``: that would be
    #: written), and the files' size.
    units: int = 0
    files: int = 0
    bytes: int = 0
    #: The bundle written: a new layer of the set (``bundle.d/NNNNNN-….kbundle``),
    #: or the set itself when none existed (``base``); None when nothing
    #: was written (nothing new, or ``dry_run``).
    layer: Optional[str] = None
    base: bool = False
    #: The layer's whole-file and content digests ("xxh3-128:…"; "" when
    #: none was written), and its size.
    digest: str = ""
    content_digest: str = ""
    packed_bytes: int = 0
    dry_run: bool = False
    #: The report ``kbundle harvest`` prints, in Go's words, without
    #: "kbundle: ": a line a node (identical lines merged), then what was
    #: written. harvest() does not print it.
    report: Tuple[str, ...] = ()
    #: The job's one line, as ``kbundle harvest`` ends with it: "cache:
    #: warm (47 of 48 units used; 1 new)", or the likely cause of a cold
    #: cache ("cache: loaded but unused: pass NUMBA_CACHE_DIR (…)").
    verdict: str = ""
    #: Every rank's framework counts, in rank order, with
    #: ``load_bundle(..., count=True)``: framework → (hits, misses), None
    #: for a rank that did not count; () when none did. The report then
    #: ends with a line a framework ("JAX: 16 hits, 0 misses on every rank").
    counts: Tuple[Optional[Dict[str, Tuple[int, int]]], ...] = ()
    #: The warnings rank 0 issued as KbundleWarning (libkbundle's words,
    #: without "kbundle: ").
    warnings: Tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok


def harvest(
    comm: "MPI.Comm",
    bundle: Optional[PathArg] = None,
    dest: Optional[PathArg] = None,
    *,
    timeout: Union[float, datetime.timedelta, None] = None,
    dry_run: bool = False,
    max_size: Optional[int] = None,
    strict: bool = False,
) -> HarvestResult:
    """Gathers what the job compiled into its bundle set, as a new layer,
    as ``kbundle harvest`` does; collective: call it on every rank of comm
    (an intracommunicator), with the same arguments, typically at the end
    of a job that called :func:`load_bundle`.

    Each node's leader compares its dest with the install record
    load_bundle wrote there and sends rank 0 the list of its new and
    changed files; rank 0 takes each cache unit whole from the lowest
    rank holding it, receives only those bytes and writes them as one new
    layer of the set (the set itself when none exists yet). A job that
    compiled nothing writes nothing.

    bundle: the set (rank 0's is used); default, with dest, what the
    last load_bundle() of this process was given; else $KBUNDLE_BUNDLE,
    else $KBUNDLE_CACHE_DIR/cache.kbundle, else the set rank 0's dest was
    loaded from (its install record).
    dest: the node-local directory load_bundle installed; default as
    load_bundle's: $KBUNDLE_LOCAL_DIR, else $TMPDIR/kbundle-USER-JOB (or
    /tmp/...), else, where that does not exist, the newest tree of the
    user's named so that kbundle installed from the set on the node.
    timeout: seconds or a timedelta; default $KBUNDLE_TIMEOUT, else 10
    minutes; 0: none. When it runs out the whole job is ended with
    MPI_Abort.
    dry_run: report what would be harvested; move and write nothing.
    max_size: bound the set's merged view to this many bytes, as
    ``kbundle harvest --max-size``: past it, the least recently used cache
    units go, down to 90 %; None or 0: no bound.
    strict: raise instead of warning when the harvest failed.

    Every rank returns the same HarvestResult: the per-node reports, what
    was written (``layer``, None if nothing), and ``report``, the lines
    ``kbundle harvest`` prints. When the harvest fails (nothing is
    published) every rank gets the same outcome: by default a
    KbundleWarning on rank 0 and a falsy result with the reason; with
    strict=True, HarvestFailedError on every rank. Bad arguments raise
    KbundleUsageError (or TypeError) and MPI problems KbundleMPIError,
    whatever strict says.
    """
    given = (path("bundle", bundle), path("dest", dest))
    blobs_to = given[1] or (_load._last_result[0] if _load._last_result else "")
    if given == ("", "") and _load._last_load is not None:
        given = _load._last_load  # what load_bundle() was given in this process
    if _load._last_result is not None and _megacache.wanted(_load._last_result[1]) and blobs_to and not dry_run:
        # Every rank's Mega-Cache blob goes into DEST before any node
        # leader looks at it; a rank that cannot write its blob still
        # reaches the barrier (the others wait there), and says why.
        try:
            _megacache.save(blobs_to)
        except Exception as e:
            warnings.warn(f"kbundle: cannot save this rank's Mega-Cache blob: {e}", KbundleWarning, stacklevel=2)
        _barrier(comm)
    req: Dict[str, Any] = {
        "bundle": given[0],
        "dest": given[1],
        "timeout": seconds(timeout),
        "dry_run": bool(dry_run),
        "max_size": _size(max_size),
        # The toolchain the layer records is this interpreter's (U41).
        "python": sys.executable,
        # Go copies the environment when the library loads; pass today's.
        "environ": dict(os.environ),
    }
    # Every rank's framework counts (load_bundle's count=True), gathered
    # before the harvest: None on a rank that did not count.
    counts = _allgather(comm, _count.snapshot())
    out = call("kbundle_harvest", "harvest", comm, req)
    rank0 = comm_rank(comm) == 0
    if not out.get("ok"):
        kind, reason, hint = failure(out, strict, rank0, HarvestFailedError, stacklevel=3)
        return HarvestResult(ok=False, reason=reason, hint=hint, kind=kind, warnings=tuple(out.get("warnings") or ()))
    res = result(out)
    if any(c is not None for c in counts):
        extra = _count.report(list(counts), _count.numba_loaded())
        res = dataclasses.replace(res, counts=counts, report=res.report + tuple(extra))
    if rank0:
        for line in _lines(out):
            warnings.warn(line, KbundleWarning, stacklevel=2)
    return res


def _size(n: Optional[int]) -> int:
    """max_size as kbundle_harvest takes it: bytes, 0 for no bound."""
    if n is None:
        return 0
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"max_size: want a number of bytes (int) or None, got {type(n).__name__}")
    if n < 0:
        raise KbundleUsageError("usage", f"max_size={n}: want a size of 0 or more")
    return n


def result(out: Dict[str, Any]) -> HarvestResult:
    """The HarvestResult of libkbundle's successful answer out
    (loadcmd.HarvestOutcome)."""
    nodes = tuple(
        HarvestNode(
            host=str(n.get("host", "")),
            first_rank=int(n.get("first_rank", 0)),
            last_rank=int(n.get("last_rank", 0)),
            entries=int(n.get("entries", 0)),
            bytes=int(n.get("bytes", 0)),
            also_on_other_nodes=int(n.get("also_on_other_nodes", 0)),
            chosen=int(n.get("chosen", 0)),
            skipped=tuple((str(s.get("name", "")), str(s.get("why", ""))) for s in n.get("skipped") or ()),
            error=str(n.get("error", "")),
            no_record=bool(n.get("no_record", False)),
            missing_dest=bool(n.get("missing_dest", False)),
            presets=tuple(
                PresetUse(
                    preset=str(u.get("preset", "")),
                    units_loaded=int(u.get("units_loaded", 0)),
                    units_used=int(u.get("units_used", 0)),
                    entries_new=int(u.get("entries_new", 0)),
                    entries_recompiled=int(u.get("entries_recompiled", 0)),
                    cause_rule=str((u.get("cause") or {}).get("rule", "")),
                    cause=str((u.get("cause") or {}).get("text", "")),
                )
                for u in n.get("presets") or ()
            ),
        )
        for n in out.get("nodes") or ()
    )
    return HarvestResult(
        ok=True,
        bundle=str(out.get("set", "")),
        nodes=nodes,
        units=int(out.get("units", 0)),
        files=int(out.get("files", 0)),
        bytes=int(out.get("bytes", 0)),
        layer=str(out["layer"]) if out.get("layer") else None,
        base=bool(out.get("base", False)),
        digest=str(out.get("digest", "")),
        content_digest=str(out.get("content", "")),
        packed_bytes=int(out.get("packed_bytes", 0)),
        verdict=str(out.get("verdict", "")),
        dry_run=bool(out.get("dry_run", False)),
        report=tuple(out.get("report") or ()),
        warnings=tuple(out.get("warnings") or ()),
    )


def _barrier(comm: Any) -> None:
    """A barrier over comm: an mpi4py communicator's, or a torch.distributed
    group's (over its gloo group: a Mega-Cache blob is on the host)."""
    if _torch.is_group(comm):
        import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

        dist.barrier(group=_torch.gloo_group(comm))
    elif hasattr(comm, "Barrier"):  # else call() says what comm should be
        comm.Barrier()


def _allgather(comm: Any, mine: Optional[Dict[str, Tuple[int, int]]]) -> Tuple[Optional[Dict[str, Tuple[int, int]]], ...]:
    """Every rank's counts, in rank order: mpi4py's allgather, or over a
    torch.distributed group's gloo group as JSON in uint8 CPU tensors (no
    pickle): the lengths, then the bytes padded to the longest."""
    if not _torch.is_group(comm):
        gather = getattr(comm, "allgather", None)  # none: call() says what comm should be
        return tuple(gather(mine)) if gather is not None else ()
    import json

    import torch  # type: ignore[import-not-found,unused-ignore]
    import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

    g = _torch.gloo_group(comm)
    raw = json.dumps(mine).encode()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size(g))]
    dist.all_gather(sizes, torch.tensor([len(raw)], dtype=torch.int64), group=g)
    longest = max(int(n.item()) for n in sizes)
    buf = torch.zeros(longest, dtype=torch.uint8)
    buf[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    outs = [torch.zeros(longest, dtype=torch.uint8) for _ in sizes]
    dist.all_gather(outs, buf, group=g)
    got = []
    for n, t in zip(sizes, outs):
        d = json.loads(bytes(t[: int(n.item())].tolist()))
        got.append(None if d is None else {k: (int(v[0]), int(v[1])) for k, v in d.items()})
    return tuple(got)
