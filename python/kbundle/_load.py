"""load_bundle: `kbundle load` inside an mpi4py program."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from . import _frameworks, _lib, _megacache, _torch
from ._errors import (
    BundleUnusableError,
    KbundleError,
    KbundleMPIError,
    KbundleUsageError,
    KbundleWarning,
    LoadFailedError,
    message,
)

#: typing.TYPE_CHECKING, without importing typing (docs/python.md, "What import
#: kbundle costs").
TYPE_CHECKING = False
if TYPE_CHECKING:
    import datetime
    from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, Union

    from mpi4py import MPI  # imported at call time only

    PathArg = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class LoadResult:
    """What :func:`load_bundle` did; the same on every rank except
    ``leader``, ``mismatch_keys``, ``empty_presets``, ``seconds`` (each rank's own) and, with
    nodes whose paths differ, ``dest`` and ``env``. Truthy when the
    bundle was loaded.

    On failure (``ok`` False) ``kind`` is "unusable" (the bundle: missing,
    damaged, untrusted, none configured) or "failed" (a node: destination
    exists or cannot be written, disk full; nothing was installed on any
    node), ``reason`` and ``hint`` say why, and the other fields are empty.
    """

    ok: bool
    reason: str = ""
    hint: str = ""
    kind: str = ""
    #: This node's destination directory (absolute).
    dest: str = ""
    #: The bundle file rank 0 read.
    bundle: str = ""
    #: Files and directories in the bundle.
    entries: int = 0
    #: The bundle's size, and the size of its files unpacked.
    bytes: int = 0
    raw_bytes: int = 0
    nodes: int = 0
    ranks: int = 0
    #: This rank unpacked the bundle for its node.
    leader: bool = False
    #: The whole call on this rank, in seconds; then its phases (the same
    #: on every rank), which overlap: rank 0 reading the bundle, the
    #: broadcast, the slowest node's unpacking.
    seconds: float = 0.0
    read_seconds: float = 0.0
    bcast_seconds: float = 0.0
    extract_seconds: float = 0.0
    #: The framework presets applied (given, or recorded in the bundle).
    presets: Tuple[str, ...] = ()
    #: Presets named in the call that the bundle has nothing for (their
    #: variables point at an empty directory; leaders only, a
    #: KbundleWarning on rank 0 says so).
    empty_presets: Tuple[str, ...] = ()
    #: The variables set in os.environ, pointing the frameworks at dest.
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: PyTorch Mega-Cache blobs given to torch.compiler.load_cache_artifacts
    #: after the load (the mega-cache preset; 0 without it).
    mega_cache_blobs: int = 0
    #: Nodes that differ from the machine the cache was warmed on (kernels
    #: may miss there), and how this node differs (leaders): one
    #: "key: warmed on X, here Y" item a key.
    mismatch_nodes: int = 0
    mismatch_keys: Tuple[str, ...] = ()
    #: The default destination when another user held it on ``taken_nodes``
    #: nodes (made in advance to deny the load): ``dest`` is then an
    #: unguessable sibling, and a KbundleWarning on rank 0 says so.
    taken: str = ""
    taken_nodes: int = 0
    #: The set's content digest ("xxh3-128:..."), the nodes whose
    #: destination already held it unchanged since its install (left as
    #: they were, nothing rewritten), and whether this node's did (leaders).
    content_digest: str = ""
    already_installed_nodes: int = 0
    already_installed: bool = False
    #: No bundle set existed yet (allow_missing): dest is an empty cache.
    missing_set: bool = False
    #: The warnings rank 0 issued as KbundleWarning (libkbundle's words,
    #: without "kbundle: ").
    warnings: Tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok


def mpi_library() -> str:
    """The path of the libkbundle in use (loading it if needed), for
    diagnostics."""
    _lib.mpi4py_library()
    return _lib.loaded_path()


def load_bundle(
    comm: "MPI.Comm",
    bundle: Optional[PathArg] = None,
    dest: Optional[PathArg] = None,
    preset: Union[str, Sequence[str], None] = None,
    timeout: Union[float, datetime.timedelta, None] = None,
    *,
    force: bool = False,
    strict: bool = False,
    jobs: Optional[int] = None,
    allow_missing: Optional[bool] = None,
    parents: bool = False,
    replace_presets: bool = False,
    count: bool = False,
) -> LoadResult:
    """Loads a kbundle bundle into node-local storage on every node of
    comm, as ``kbundle load`` does; collective: call it on every rank of
    comm (an intracommunicator), with the same arguments.

    bundle: the bundle file (rank 0's is read); default
    $KBUNDLE_CACHE_DIR/cache.kbundle.
    dest: the node-local directory; default $KBUNDLE_LOCAL_DIR, else
    $TMPDIR/kbundle-USER-JOB (or /tmp/...), as ``kbundle load``.
    preset: a preset name, a comma-separated list or a sequence of names,
    added to the presets recorded in the bundle; default (None):
    $KBUNDLE_PRESET, else only the recorded ones.
    timeout: seconds or a timedelta; default $KBUNDLE_TIMEOUT, else 10
    minutes; 0: none. When it runs out (a node or link down, a rank that
    did not call) the whole job is ended with MPI_Abort.
    force: replace a non-empty dest.
    strict: raise instead of warning when nothing was loaded.
    jobs: unpacking workers per node; default $KBUNDLE_JOBS, else 0 (all
    cores).
    replace_presets: apply only preset's presets, not the bundle's
    recorded ones (with preset=[]: none).
    parents: create dest's missing parent directories (else a missing
    one raises KbundleUsageError, naming it).
    allow_missing: when no bundle set exists at bundle yet, install an
    empty dest (the job compiles cold, and kbundle.harvest at its end
    writes the set) instead of failing; default $KBUNDLE_ALLOW_MISSING,
    else False.
    count: register the frameworks' own hit and miss hooks in this
    process (JAX's monitoring events, Triton's compilation listener,
    Inductor's and vLLM's counters): :func:`kbundle.harvest` then gathers
    every rank's counts into its result (``counts``) and report.

    On success the presets' variables are set in os.environ (before the
    framework reads them) and the result says what was loaded. When the
    bundle cannot be used, or the load fails on a node, every rank gets
    the same outcome: by default a KbundleWarning on rank 0 and a falsy
    result with the reason; with strict=True, BundleUnusableError or
    LoadFailedError on every rank. Bad arguments raise KbundleUsageError
    (or TypeError) and MPI problems KbundleMPIError, whatever strict says.
    """
    req = _request(bundle, dest, preset, timeout, force, jobs)
    if allow_missing is not None:
        req["allow_missing"] = bool(allow_missing)
    req["parents"] = bool(parents)
    req["replace_presets"] = bool(replace_presets)
    out = call("kbundle_load", "load_bundle", comm, req)
    rank0 = comm_rank(comm) == 0
    if not out.get("ok"):
        return _failure(out, strict, rank0)
    global _last_load, _last_result
    _last_load = (req["bundle"], req["dest"])
    env = dict(kv.split("=", 1) for kv in out.get("env") or [] if "=" in kv)
    for k, v in env.items():
        os.environ[k] = v
    # A framework imported before the call may have read the old values.
    late = _frameworks.apply(env)
    if count:
        from . import _count

        _count.start(tuple(out.get("presets") or ()))
    res = LoadResult(
        ok=True,
        dest=out.get("dest", ""),
        bundle=out.get("bundle", ""),
        entries=int(out.get("entries", 0)),
        bytes=int(out.get("bytes", 0)),
        raw_bytes=int(out.get("raw_bytes", 0)),
        nodes=int(out.get("nodes", 0)),
        ranks=int(out.get("ranks", 0)),
        leader=bool(out.get("leader", False)),
        seconds=float(out.get("total_seconds", 0.0)),
        read_seconds=float(out.get("read_seconds", 0.0)),
        bcast_seconds=float(out.get("bcast_seconds", 0.0)),
        extract_seconds=float(out.get("extract_seconds", 0.0)),
        presets=tuple(out.get("presets") or ()),
        empty_presets=tuple(out.get("empty_presets") or ()),
        env=MappingProxyType(env),
        mismatch_nodes=int(out.get("mismatch_nodes", 0)),
        mismatch_keys=tuple(out.get("mismatch_keys") or ()),
        taken=out.get("taken", ""),
        taken_nodes=int(out.get("taken_nodes", 0)),
        content_digest=out.get("content_digest", ""),
        already_installed_nodes=int(out.get("already_installed_nodes", 0)),
        already_installed=bool(out.get("already_installed", False)),
        missing_set=bool(out.get("missing_set", False)),
        warnings=tuple(out.get("warnings") or ()),
    )
    _last_result = (res.dest, res.presets)
    if _megacache.wanted(res.presets):
        res = dataclasses.replace(res, mega_cache_blobs=_megacache.hot_load(res.dest))
    if rank0:
        for msg in late:
            warnings.warn(f"kbundle: {_unlabelled(msg)}", KbundleWarning, stacklevel=2)
        for line in _lines(out):
            warnings.warn(line, KbundleWarning, stacklevel=2)
    return res


def comm_rank(comm: Any) -> int:
    """This process's rank in comm, an mpi4py communicator or a
    torch.distributed process group."""
    if _torch.is_group(comm):
        return _torch.rank(comm)
    r: int = comm.Get_rank()
    return r


def call(function: str, name: str, comm: "MPI.Comm", req: Dict[str, Any]) -> Dict[str, Any]:
    """Checks comm, then calls libkbundle's collective entry function
    (kbundle_load, kbundle_harvest) for the package's function name over
    it with request req, and returns its JSON answer. A torch.distributed
    process group goes over the group instead (_torch: no mpi4py)."""
    if _torch.is_group(comm):
        return _torch.call(function, name, comm, req)
    from mpi4py import MPI

    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm: want an mpi4py communicator, got {type(comm).__name__}")
    if comm == MPI.COMM_NULL:
        raise KbundleUsageError("usage", f"comm is MPI.COMM_NULL: call {name} on the ranks of a communicator")
    if comm.Is_inter():
        raise KbundleUsageError("usage", "comm is an intercommunicator: pass an intracommunicator such as MPI.COMM_WORLD")
    lib = _lib.mpi4py_library()
    fn = _lib.function(lib, function)
    raw = _lib.take_string(lib, fn(_lib.comm_handle(comm), json.dumps(req).encode("utf-8")))
    try:
        out: Dict[str, Any] = json.loads(raw)
    except ValueError as e:
        raise KbundleMPIError("mpi", f"libkbundle returned a bad result: {e}: {raw[:200]!r}") from e
    return out


#: The bundle and dest the last successful load_bundle() of this process
#: was given ("": not given), which harvest() reuses when given neither
#: (U36).
_last_load: Optional[Tuple[str, str]] = None

#: The DEST and presets of the last successful load_bundle(): harvest()
#: writes the Mega-Cache blob there first (mega-cache preset).
_last_result: Optional[Tuple[str, Tuple[str, ...]]] = None


def _request(
    bundle: Optional[PathArg],
    dest: Optional[PathArg],
    preset: Union[str, Sequence[str], None],
    timeout: Union[float, datetime.timedelta, None],
    force: bool,
    jobs: Optional[int],
) -> Dict[str, Any]:
    """Checks the arguments' types (the same on every rank: nothing
    collective has started) and builds kbundle_load's request."""
    req: Dict[str, Any] = {
        "bundle": path("bundle", bundle),
        "dest": path("dest", dest),
        "force": bool(force),
        # Go copies the environment when the library loads; pass today's.
        "environ": dict(os.environ),
        # The toolchain compared with the warm-up's is this interpreter's.
        "python": sys.executable,
    }
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int)):
        raise TypeError(f"jobs: want an int or None, got {type(jobs).__name__}")
    req["jobs"] = jobs
    if preset is None:
        req["presets"] = None
    elif isinstance(preset, str):
        req["presets"] = [preset]
    elif isinstance(preset, Sequence) and all(isinstance(p, str) for p in preset):
        req["presets"] = list(preset)
    else:
        raise TypeError("preset: want a name, a sequence of names or None")
    req["timeout"] = seconds(timeout)
    return req


def seconds(timeout: Union[float, datetime.timedelta, None]) -> Optional[float]:
    """The timeout argument as the request's seconds (None: not given)."""
    if timeout is None:
        return None
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return float(timeout)
    import datetime  # here: a timedelta's caller imported it already

    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    raise TypeError(f"timeout: want seconds or a timedelta, got {type(timeout).__name__}")


def path(name: str, p: Optional[PathArg]) -> str:
    if p is None:
        return ""
    s = os.fspath(p)
    if not isinstance(s, str):
        raise TypeError(f"{name}: want a str path, got bytes")
    if s == "":
        raise KbundleUsageError("usage", f"{name}: empty path (pass None for the default)")
    return s


def _lines(out: Dict[str, Any]) -> List[str]:
    """The warnings libkbundle gives, in Go's words, as rank 0 prints them
    ("kbundle: " each), without Go's "warning: ": the category,
    KbundleWarning, says it once (U50)."""
    return ["kbundle: " + _unlabelled(str(w)) for w in out.get("warnings") or []]


def _unlabelled(w: str) -> str:
    """w without a leading "warning: "."""
    return w[len("warning: "):] if w.startswith("warning: ") else w


def _failure(out: Dict[str, Any], strict: bool, rank0: bool) -> LoadResult:
    kind, reason, hint = failure(out, strict, rank0, LoadFailedError, stacklevel=4)
    return LoadResult(ok=False, reason=reason, hint=hint, kind=kind, bundle=str(out.get("bundle", "")),
                      warnings=tuple(out.get("warnings") or ()))


_MISMATCH = re.compile(r"this kbundle is built for (Open MPI|MPICH)[^:]*? but runs under (.+?) \(([^()]*) tasks\)")

#: Launchers of MPICH's ABI, as Go's mismatch message names them.
_MPICH_LAUNCHERS = ("Hydra (MPICH)", "Hydra (Intel MPI)", "srun --mpi=")


def _switchable_mpi4py() -> bool:
    """Whether the mpi4py imported is PyPI's binary wheel, which holds
    one build of its MPI module per ABI (MPI.openmpi.*.so, MPI.mpich.*.so)
    and opens the libmpi MPI4PY_LIBMPI names; a source build has one."""
    spec = importlib.util.find_spec("mpi4py")
    if spec is None or not spec.submodule_search_locations:
        return False
    for d in spec.submodule_search_locations:
        try:
            if any(n.startswith("MPI.mpich.") for n in os.listdir(d)):
                return True
        except OSError:
            continue
    return False


def mpi4py_advice(reason: str, hint: str, switchable: Optional[bool] = None) -> Tuple[str, str]:
    """reason and hint of a usage failure, with Go's advice for the CLI
    replaced where the library's MPI and the launcher disagree: in
    Python the library is the one mpi4py opened, and the fix is mpi4py's
    (PyPI's wheel opens Open MPI's libmpi.so.40 unless
    MPI4PY_LIBMPI=libmpi.so.12 says MPICH's; a source build needs one
    built for the launcher's MPI), not "the MPICH build". switchable:
    whether mpi4py is PyPI's wheel (None: look)."""
    m = _MISMATCH.match(reason)
    if m is None:
        return reason, hint
    built, launcher, tasks = m.groups()
    if switchable is None:
        switchable = _switchable_mpi4py()
    if not switchable:
        other = "MPICH's (MPICC=mpicc.mpich pip install --no-binary mpi4py mpi4py)" if built == "Open MPI" else "Open MPI's"
        return (
            f"mpi4py is built for {built}, but this job runs under {launcher} ({tasks} tasks)",
            f"use an mpi4py built for the launcher's MPI, {other}, or PyPI's mpi4py wheel "
            "(MPI4PY_LIBMPI chooses its library), or launch with the MPI mpi4py is built for",
        )
    if built == "Open MPI" and launcher.startswith(_MPICH_LAUNCHERS):
        return (
            f"mpi4py runs on Open MPI (libmpi.so.40), but this job runs under {launcher} ({tasks} tasks)",
            "set MPI4PY_LIBMPI=libmpi.so.12 so that PyPI's mpi4py opens MPICH's library "
            "(Debian and Ubuntu name it libmpich.so.12: link libmpi.so.12 to it in a folder on LD_LIBRARY_PATH; "
            "docs/python.md, Install), or launch with Open MPI's mpirun",
        )
    if built == "MPICH" and launcher == "Open MPI's mpirun":
        return (
            f"mpi4py runs on MPICH's ABI (libmpi.so.12), but this job runs under {launcher} ({tasks} tasks)",
            "unset MPI4PY_LIBMPI so that PyPI's mpi4py opens Open MPI's libmpi.so.40, "
            "or launch with mpiexec.hydra",
        )
    return reason, hint


def failure(
    out: Dict[str, Any], strict: bool, rank0: bool, failed: Type[KbundleError], stacklevel: int
) -> Tuple[str, str, str]:
    """What a failed answer out means, by its kind (Go's one
    classification, loadcmd.KindOf): "usage" raises KbundleUsageError and
    "mpi" KbundleMPIError, whatever strict says; "unusable" and "failed"
    raise BundleUnusableError and failed with strict, else issue one
    KbundleWarning on rank 0 with Go's lines. Returns kind, reason and
    hint."""
    kind = str(out.get("kind", "mpi"))
    reason = str(out.get("reason", "unknown failure"))
    hint = str(out.get("hint", ""))
    if hint.startswith("hint: "):
        hint = hint[len("hint: ") :]  # the label is message()'s
    if kind == "usage":
        reason, hint = mpi4py_advice(reason, hint)
        raise KbundleUsageError(kind, reason, hint)
    if kind not in ("unusable", "failed"):
        raise KbundleMPIError(kind, reason, hint)
    if strict:
        cls = BundleUnusableError if kind == "unusable" else failed
        raise cls(kind, reason, hint)
    if rank0:
        warnings.warn("\n".join([message(reason, hint)] + _lines(out)), KbundleWarning, stacklevel=stacklevel)
    return kind, reason, hint

