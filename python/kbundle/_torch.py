"""load_bundle and harvest over a torch.distributed process group, with no
mpi4py and no libmpi: libkbundle's build without MPI
(lib/libkbundle-nompi.so) runs the same Go load and harvest (load.Run,
harvest.Run: all-or-nothing, one outcome on every rank, the timeout,
bounded memory, streaming), its collectives made in Go of point-to-point
bytes that this module moves with the group's send and recv: raw uint8
CPU tensors over gloo, never pickled objects. A group of another backend
(NCCL) gets a gloo group of the same ranks, made once."""

from __future__ import annotations

import _thread
import ctypes
import json
import os
import sys

from . import _lib
from ._errors import KbundleMPIError, KbundleUsageError

#: typing.TYPE_CHECKING, without importing typing (docs/python.md, "What import
#: kbundle costs").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

_XFER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_int)
_ERROR = ctypes.CFUNCTYPE(ctypes.c_longlong, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_longlong)


class _Transport(ctypes.Structure):
    """kbundle_transport (cmd/libkbundle/transport.go)."""

    _fields_ = [
        ("handle", ctypes.c_longlong),
        ("rank", ctypes.c_int),
        ("size", ctypes.c_int),
        ("send", _XFER),
        ("recv", _XFER),
        ("error", _ERROR),
    ]


_lock = _thread.allocate_lock()  # threading.Lock, without importing threading
_lib_nompi: Optional[ctypes.CDLL] = None
#: The gloo group made for each non-gloo group passed (kept with it).
_gloo: Dict[int, Tuple[Any, Any]] = {}


def is_group(comm: Any) -> bool:
    """Whether comm is a torch.distributed process group (torch itself is
    never imported here: only a program that imported it can pass one)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "distributed") or not torch.distributed.is_available():
        return False
    return isinstance(comm, torch.distributed.ProcessGroup)


def rank(comm: Any) -> int:
    """This process's rank in the group comm."""
    import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

    r: int = dist.get_rank(comm)
    return r


def library() -> ctypes.CDLL:
    """libkbundle built without MPI ($KBUNDLE_LIBRARY, else the package's
    lib/libkbundle-nompi.so), loaded once after the same trust check as
    the MPI builds'."""
    global _lib_nompi
    with _lock:
        if _lib_nompi is not None:
            return _lib_nompi
        override = os.environ.get("KBUNDLE_LIBRARY")
        want = os.path.abspath(override) if override else os.path.join(_lib.LIB_DIR, "libkbundle-nompi.so")
        path, fd = _lib.open_trusted(want)
        try:
            lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
        except OSError as e:
            raise KbundleMPIError("mpi", f"{path}: cannot load: {e}", "") from e
        finally:
            os.close(fd)
        for name in ("kbundle_load_transport", "kbundle_harvest_transport"):
            f = getattr(lib, name, None)
            if f is None:
                raise KbundleMPIError(
                    "mpi",
                    f"{path} has no function {name}: it is not a libkbundle of this kbundle, or an older one",
                    "hint: build it with `make python` in kbundle's source tree"
                    + (", or unset KBUNDLE_LIBRARY" if override else ""),
                )
            f.argtypes = [ctypes.POINTER(_Transport), ctypes.c_char_p]
            f.restype = ctypes.c_void_p
        lib.kbundle_free.argtypes = [ctypes.c_void_p]
        lib.kbundle_free.restype = None
        _lib_nompi = lib
        return lib


def gloo_group(comm: Any) -> Any:
    """comm itself when its backend moves CPU tensors with gloo, else a
    gloo group of its ranks, made once (collective over comm's ranks the
    first time)."""
    import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

    backend = str(dist.get_backend(comm)).lower()
    if backend == "gloo" or "cpu:gloo" in backend:
        return comm
    key = id(comm)
    if key not in _gloo:
        ranks = dist.get_process_group_ranks(comm)
        _gloo[key] = (comm, dist.new_group(ranks=ranks, backend="gloo", use_local_synchronization=True))
    return _gloo[key][1]


def call(function: str, name: str, comm: Any, req: Dict[str, Any]) -> Dict[str, Any]:
    """Calls libkbundle's function over the group comm (collective: every
    rank of comm calls it) and returns its JSON answer."""
    import torch  # type: ignore[import-not-found,unused-ignore]
    import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

    if not dist.is_initialized():
        raise KbundleUsageError("usage", f"{name}: torch.distributed is not initialised: call init_process_group first")
    group = gloo_group(comm)
    peers = dist.get_process_group_ranks(group)
    err = [""]

    def view(ptr: int, n: int) -> Any:
        return torch.frombuffer((ctypes.c_uint8 * n).from_address(ptr), dtype=torch.uint8)

    def send(_h: int, ptr: int, n: int, peer: int, tag: int) -> int:
        try:
            if n > 0:
                dist.send(view(ptr, n), dst=peers[peer], group=group, tag=tag)
            return 0
        except BaseException as e:  # noqa: BLE001: the Go side reports it
            err[0] = f"torch.distributed send of {n} bytes to rank {peer}: {e}"
            return 1

    def recv(_h: int, ptr: int, n: int, peer: int, tag: int) -> int:
        try:
            if n > 0:
                dist.recv(view(ptr, n), src=peers[peer], group=group, tag=tag)
            return 0
        except BaseException as e:  # noqa: BLE001
            err[0] = f"torch.distributed recv of {n} bytes from rank {peer}: {e}"
            return 1

    def error(_h: int, buf: int, cap: int) -> int:
        b = err[0].encode("utf-8", "replace")[:cap]
        ctypes.memmove(buf, b, len(b))
        return len(b)

    # The callbacks are kept alive by these names for the whole call.
    cb = (_XFER(send), _XFER(recv), _ERROR(error))
    t = _Transport(0, dist.get_rank(group), dist.get_world_size(group), *cb)
    lib = library()
    fn = getattr(lib, function + "_transport")
    raw = _lib.take_string(lib, fn(ctypes.byref(t), json.dumps(req).encode("utf-8")))
    try:
        out: Dict[str, Any] = json.loads(raw)
    except ValueError as e:
        raise KbundleMPIError("mpi", f"libkbundle returned a bad result: {e}: {raw[:200]!r}") from e
    return out
