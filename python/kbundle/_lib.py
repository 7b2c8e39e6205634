"""Finding and loading libkbundle, the c-shared build of kbundle's Go code
that matches the MPI library mpi4py uses."""

from __future__ import annotations

import _thread
import ctypes
import grp
import os
import pwd
import re
import stat

from ._errors import KbundleMPIError, KbundleUsageError

#: typing.TYPE_CHECKING, without importing typing (docs/python.md, "What import
#: kbundle costs").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Set, Tuple

#: Where ``make python`` puts the libraries, inside the package.
LIB_DIR = os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib")

#: The MPI ABIs as kbundle_mpi_family names them, and how they read in
#: messages.
_NAMES = {
    "openmpi": "Open MPI",
    "mpich": "MPICH (or an MPI of its ABI)",
    "mpi-abi": "the MPI-5 standard ABI (libmpi_abi.so)",
}

#: The ABIs the package holds a library for: lib/libkbundle-ABI.so.
FAMILIES = ("openmpi", "mpich")

_lock = _thread.allocate_lock()  # threading.Lock, without importing threading
_loaded: Optional[ctypes.CDLL] = None
_loaded_path = ""
_loaded_abi = ""


def abi(mpi: Any) -> str:
    """The ABI of the MPI library that mpi4py's module MPI (passed as mpi)
    runs on, as mpi4py reports it: "openmpi", "mpich", "mpi-abi", or "" for
    none kbundle knows. mpi4py's binary wheel (4.1 and newer) holds one
    build of the module per ABI and imports the one for the libmpi it
    found (MPI.openmpi.*.so, MPI.mpich.*.so): its name says which. A build
    of mpi4py for one MPI (from source, Debian's python3-mpi4py) is
    of the MPI-5 standard ABI when MPI_Abi_get_version answers (mpi4py
    4.1's Get_abi_version), else of MPICH's when its MPI_Comm is an int
    (the size mpi4py was compiled with), of Open MPI's when a pointer."""
    name = os.path.basename(getattr(mpi, "__file__", None) or "")
    for variant, found in (("openmpi", "openmpi"), ("mpich", "mpich"), ("mpiabi", "mpi-abi")):
        if name.startswith(f"MPI.{variant}."):
            return found
    get_abi_version = getattr(mpi, "Get_abi_version", None)
    if get_abi_version is not None and get_abi_version()[0] > 0:
        return "mpi-abi"
    return {4: "mpich", 8: "openmpi"}.get(mpi._sizeof(mpi.Comm), "")


def family(found: str, version: str) -> str:
    """Returns found, the ABI mpi4py runs on (abi), if the package holds a
    library for it; version is the MPI's MPI_Get_library_version text."""
    if found in FAMILIES:
        return found
    first = version.strip().splitlines()[0] if version.strip() else "an unknown MPI"
    through = f" through {_NAMES[found]}" if found in _NAMES else ""
    raise KbundleMPIError(
        "mpi",
        f"kbundle is built for Open MPI and MPICH; mpi4py uses {first}{through}",
        "hint: set KBUNDLE_LIBRARY to a libkbundle built with this MPI's mpicc "
        "(CC=mpicc go build -buildmode=c-shared -tags mpi ./cmd/libkbundle)",
    )


def path_for(found: str, version: str) -> str:
    """The library for the ABI found (abi) of the MPI whose version text
    is given, or $KBUNDLE_LIBRARY (made absolute: a bare name would make
    dlopen search LD_LIBRARY_PATH instead of loading the file checked)."""
    override = os.environ.get("KBUNDLE_LIBRARY")
    if override:
        return os.path.abspath(override)
    return os.path.join(LIB_DIR, f"libkbundle-{family(found, version)}.so")


#: The functions of libkbundle the package calls.
_SYMBOLS = ("kbundle_load", "kbundle_mpi_family", "kbundle_free")

#: Functions of newer libkbundles, looked up when called (function): a
#: library built before them still loads for load_bundle.
_LATER = ("kbundle_harvest",)

#: Functions of newer libkbundles that take only a request (not
#: collective, no MPI call): char *name(const char *request).
_LOCAL = ("kbundle_status",)


def mpi4py_library() -> ctypes.CDLL:
    """library for the MPI that mpi4py runs on."""
    from mpi4py import MPI

    return library(abi(MPI), MPI.Get_library_version())


def comm_handle(comm: Any) -> int:
    """The integer handle of the mpi4py communicator comm that the loaded
    library's collective functions take: in the MPI-5 standard ABI, which
    has no MPI_Fint in C, MPI_Comm_toint's (the library calls
    MPI_Comm_fromint); otherwise the Fortran handle, MPI_Comm_c2f's (the
    library calls MPI_Comm_f2c)."""
    if _loaded_abi == "mpi-abi":
        h: int = comm.toint()
    else:
        h = comm.py2f()
    return h


def library(found: str, version: str) -> ctypes.CDLL:
    """Loads (once per process) the libkbundle for the MPI of ABI found
    (abi) whose MPI_Get_library_version text is version, and checks that
    it was built for that ABI. The library runs in this process like the
    kernels of a bundle, so it must pass the bundle's trust rules (see
    open_trusted) before anything of it runs."""
    global _loaded, _loaded_path, _loaded_abi
    with _lock:
        if _loaded is not None:
            return _loaded
        path, fd = open_trusted(path_for(found, version))
        try:
            # The descriptor checked is the file loaded: no path is looked
            # up again (ld.so keeps the file mapped once it is closed).
            lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
        except OSError as e:
            raise KbundleMPIError("mpi", f"{path}: cannot load: {e}", "") from e
        finally:
            os.close(fd)
        try:
            load, mpi_family, free = (getattr(lib, name) for name in _SYMBOLS)
        except AttributeError as e:
            missing = next(n for n in _SYMBOLS if not hasattr(lib, n))
            raise KbundleMPIError(
                "mpi",
                f"{path} is not a libkbundle (it has no function {missing})",
                "hint: build it with `make python` in kbundle's source tree"
                + (", or unset KBUNDLE_LIBRARY" if os.environ.get("KBUNDLE_LIBRARY") else ""),
            ) from e
        for f in [load] + [getattr(lib, n) for n in _LATER if hasattr(lib, n)]:
            f.argtypes = [ctypes.c_longlong, ctypes.c_char_p]
            f.restype = ctypes.c_void_p
        for f in [getattr(lib, n) for n in _LOCAL if hasattr(lib, n)]:
            f.argtypes = [ctypes.c_char_p]
            f.restype = ctypes.c_void_p
        mpi_family.argtypes = []
        mpi_family.restype = ctypes.c_void_p
        free.argtypes = [ctypes.c_void_p]
        free.restype = None
        # The library's MPI calls bind to the libmpi mpi4py loaded: they
        # must be of the same ABI family, or the first handle crashes.
        built = take_string(lib, mpi_family())
        if built not in _NAMES or built != found:
            first = " ".join(version.replace("\x00", " ").split()[:3]) or "an unknown MPI"
            raise KbundleMPIError(
                "mpi",
                f"{path} is built for {_NAMES.get(built, built)}, but mpi4py runs on {first}",
                "hint: use the libkbundle built with the mpicc of the MPI that mpi4py was built with"
                + (" (unset KBUNDLE_LIBRARY)" if os.environ.get("KBUNDLE_LIBRARY") else ""),
            )
        if hasattr(lib, "kbundle_set_probe"):
            lib.kbundle_set_probe.argtypes = [_PROBE_FN]
            lib.kbundle_set_probe.restype = None
            lib.kbundle_set_probe(_probe_fn)
        _loaded, _loaded_path, _loaded_abi = lib, str(path), built
        return lib


#: long long probe(const char *script, const char *want, char *out, long long cap):
#: libkbundle's kb_probe_fn (cmd/libkbundle/probe.go).
_PROBE_FN = ctypes.CFUNCTYPE(ctypes.c_longlong, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_longlong)


def _probe(script: bytes, want: bytes, out: int, cap: int) -> int:
    """The toolchain probe (Go's hostinfo.ProbeScript) run in this
    interpreter: load compares this process's own Python and packages
    with the warm-up's without starting another python3 (0.1-0.3 s; issue
    31). libkbundle calls it on a node's leader only, when the bundle's
    rules compare a Python key. Its JSON answer goes to out; -1 if it
    failed, -n if it needs n bytes."""
    try:
        answer = _run_probe(script, want)
    except Exception:
        return -1
    if len(answer) > cap:
        return -len(answer)
    ctypes.memmove(out, answer, len(answer))
    return len(answer)


def _run_probe(script: bytes, want: bytes) -> bytes:
    """Runs the probe's script (Go's, trusted like the library) and
    returns its answer to want as JSON."""
    import json

    ns: Dict[str, Any] = {"__name__": "kbundle_probe"}
    exec(compile(script.decode(), "<kbundle toolchain probe>", "exec"), ns)
    return json.dumps(ns["probe"](json.loads(want))).encode()


_probe_fn = _PROBE_FN(_probe)  # kept for as long as the library is loaded


_MAX_LINKS = 40  # symlinks followed while resolving one path, as the kernel's (bundle/trust.go maxLinks)


def open_trusted(path: str) -> Tuple[str, int]:
    """Opens the library file path for reading and returns its resolved
    path and descriptor, after checking it as kbundle checks a bundle
    (bundle/trust.go): every component from "/" to the file, each opened
    relative to the directory before it without following a symlink and
    checked on its descriptor. Each directory and the file is owned by you
    or root (or a KBUNDLE_TRUSTED_OWNERS user), not writable by others, nor
    by its group unless that group is in KBUNDLE_TRUSTED_GROUPS (a
    root-owned sticky directory such as /tmp may be writable by all); a
    symlink on the way is owned so, and its target is checked the same
    way. (X5 of the 2026-12-01b review: only the file and its directory
    were checked, after resolving symlinks, so a group member who could
    write an ancestor swapped the library's directory for a symlink.)"""
    owners, groups = _trusted_ids()
    todo = [c for c in os.path.abspath(path).split("/") if c]
    todo.reverse()  # a stack: the next component last
    stack: List[Tuple[int, str]] = []  # the open directories, "/" first
    links = 0
    try:
        root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        stack.append((root, "/"))
        problem = _problem("directory", "/", os.fstat(root), owners, groups)
        if problem:
            raise _untrusted("/", problem)
        while todo:
            name = todo.pop()
            dfd, dpath = stack[-1]
            here = os.path.join(dpath, name)
            if name == ".":
                continue
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop()[0])
                continue
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                os.close(fd)
                _check_link(here, st, owners)
                links += 1
                if links > _MAX_LINKS:
                    raise KbundleMPIError("mpi", f"{path}: cannot open the library: too many levels of symbolic links", "")
                target = os.readlink(name, dir_fd=dfd)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop()[0])
                todo.extend(reversed([c for c in target.split("/") if c]))
                continue
            if not todo:
                os.close(fd)
                break  # the file itself: opened, and checked, below
            if not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                raise KbundleMPIError("mpi", f"{here}: cannot open the library: not a directory", "")
            stack.append((fd, here))
            problem = _problem("directory", here, st, owners, groups)
            if problem:
                raise _untrusted(here, problem)
        else:
            raise KbundleMPIError("mpi", f"{path}: cannot open the library: not a file", "")
        dfd, dpath = stack[-1]
        real = os.path.join(dpath, name)
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dfd)
    except FileNotFoundError as e:
        raise KbundleMPIError(
            "mpi",
            f"{os.path.abspath(path)}: no such library (kbundle's Go code built for this MPI)",
            "hint: build it with `make python` in kbundle's source tree, "
            "then `pip install ./python` again",
        ) from e
    except OSError as e:
        raise KbundleMPIError("mpi", f"{os.path.abspath(path)}: cannot open the library: {e.strerror}", "") from e
    finally:
        for fd_, _ in stack:
            os.close(fd_)
    st = os.fstat(fd)
    problem = _problem("file", real, st, owners, groups) if stat.S_ISREG(st.st_mode) else "not a regular file"
    if problem:
        os.close(fd)
        raise _untrusted(real, problem)
    return real, fd


def _check_link(path: str, st: os.stat_result, owners: Set[int]) -> None:
    """A symlink on the way must be owned by you, root or a trusted owner
    (its own mode bits mean nothing)."""
    me = os.getuid()
    if st.st_uid not in (me, 0) and st.st_uid not in owners:
        raise _untrusted(path, f"symlink is owned by uid {st.st_uid}, not by you (uid {me}) or root")


def _untrusted(path: str, problem: str) -> KbundleMPIError:
    return KbundleMPIError(
        "mpi",
        f"{path}: untrusted library: {problem}",
        "hint: libkbundle runs inside your program: keep it where only you (or root) can write, "
        "the file and its directory",
    )


def _problem(what: str, path: str, st: os.stat_result, owners: Set[int], groups: Set[int]) -> str:
    """Why someone other than you (or root, or a trusted owner or group)
    could change the file or directory of stat st, or ""."""
    me = os.getuid()
    if st.st_uid not in (me, 0) and st.st_uid not in owners:
        return f"{what} is owned by uid {st.st_uid}, not by you (uid {me}) or root"
    sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_uid == 0
    perm = stat.S_IMODE(st.st_mode) & 0o777
    if perm & 0o002 and not sticky:
        return f"{what} mode {perm:04o} lets others write it; run: chmod go-w {path}"
    if perm & 0o020 and not sticky and st.st_gid not in groups:
        return (
            f"{what} mode {perm:04o} lets others write it; run: chmod go-w {path} (its group {st.st_gid} can "
            "write it; to trust a project group, see KBUNDLE_TRUSTED_GROUPS in docs/troubleshooting.md)"
        )
    return ""


def _trusted_ids() -> Tuple[Set[int], Set[int]]:
    """The uids of KBUNDLE_TRUSTED_OWNERS and gids of
    KBUNDLE_TRUSTED_GROUPS (names or numbers, separated by commas or
    spaces), as bundle/trust.go reads them."""
    out: Tuple[Set[int], Set[int]] = (set(), set())
    lookups: Tuple[Tuple[str, Callable[[str], int]], ...] = (
        ("KBUNDLE_TRUSTED_OWNERS", lambda n: pwd.getpwnam(n).pw_uid),
        ("KBUNDLE_TRUSTED_GROUPS", lambda n: grp.getgrnam(n).gr_gid),
    )
    for (env, lookup), ids in zip(lookups, out):
        for n in re.split(r"[, ]+", os.environ.get(env, "")):
            if not n:
                continue
            try:
                ids.add(int(n) if n.isdigit() else lookup(n))
            except KeyError:
                raise KbundleUsageError("usage", f"{env}: {n!r} is not a known name or a number") from None
    return out


def local_function(lib: ctypes.CDLL, name: str) -> Callable[[bytes], Optional[int]]:
    """The local entry name of lib (kbundle_status):
    char *name(const char *request)."""
    fn: Callable[[bytes], Optional[int]] = function(lib, name)  # type: ignore[assignment]
    return fn


def function(lib: ctypes.CDLL, name: str) -> Callable[[int, bytes], Optional[int]]:
    """The collective entry name of lib (kbundle_load, kbundle_harvest):
    char *name(long long comm, const char *request)."""
    try:
        fn: Callable[[int, bytes], Optional[int]] = getattr(lib, name)
    except AttributeError:
        raise KbundleMPIError(
            "mpi",
            f"{_loaded_path} has no function {name}: it was built by an older kbundle",
            "hint: build it again with `make python` in kbundle's source tree"
            + (", or unset KBUNDLE_LIBRARY" if os.environ.get("KBUNDLE_LIBRARY") else ""),
        ) from None
    return fn


def loaded_path() -> str:
    """The path of the library loaded, or ""."""
    return _loaded_path


def take_string(lib: ctypes.CDLL, p: Optional[int]) -> str:
    """Copies and frees a string the library returned."""
    if not p:
        raise KbundleMPIError("mpi", "libkbundle returned no result (out of memory?)", "")
    try:
        return ctypes.string_at(p).decode("utf-8", "replace")
    finally:
        lib.kbundle_free(p)
