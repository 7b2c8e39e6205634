"""kbundle.status(): what kbundle installed on this node, as ``kbundle
status --json`` reads it, through the same Go code."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _lib
from ._errors import KbundleMPIError, KbundleUsageError

PathArg = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class TreeStatus:
    """One DEST: ``state`` is "installed", "missing", "old_marker",
    "newer_record", "not_kbundle" or "unreadable" (then ``reason`` says
    why); for an installed tree, what its install record says and whether
    the tree still matches it (``unchanged``; else ``new``, ``changed`` and
    ``missing`` entries, counted)."""

    dest: str
    state: str
    reason: str = ""
    content_digest: str = ""
    #: The set's bundles as installed, base first: each ``path``,
    #: ``file_digest``, ``content_digest``, ``entries``.
    layers: Tuple[Mapping[str, Any], ...] = ()
    installed: str = ""
    job: str = ""
    host: str = ""
    presets: Tuple[str, ...] = ()
    #: The presets' variables for this DEST, as load_bundle sets them.
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    entries: int = 0
    files: int = 0
    dirs: int = 0
    raw_bytes: int = 0
    unchanged: Optional[bool] = None
    new: int = 0
    #: How many of the ``new`` entries are directories (the others are
    #: files, as harvest counts them).
    new_dirs: int = 0
    changed: int = 0
    missing: int = 0
    #: The tree's last harvest, from its harvest record: when (RFC 3339),
    #: into which set, and the layer written ("": nothing new); all ""
    #: when it was not harvested since its install.
    harvested: str = ""
    harvested_set: str = ""
    harvested_layer: str = ""

    @property
    def ok(self) -> bool:
        """The tree is installed and unchanged since."""
        return self.state == "installed" and bool(self.unchanged)


def status(dest: Union[PathArg, Sequence[PathArg], None] = None) -> Tuple[TreeStatus, ...]:
    """What kbundle installed on this node: each DEST given (a path or a
    sequence of paths), else every tree of yours named like the default
    DEST ($TMPDIR/kbundle-$USER-*), read from its install record, as
    ``kbundle status`` does. It is local, not collective: call it on the
    ranks whose node you ask about (a leader of each, say). A DEST that
    is not a tree kbundle installed is a TreeStatus whose state says so;
    nothing raises for it."""
    if dest is None:
        dests: List[str] = []
    elif isinstance(dest, (str, os.PathLike)):
        dests = [os.fspath(dest)]
    else:
        dests = [os.fspath(d) for d in dest]
    lib = _lib.mpi4py_library()
    fn = _lib.local_function(lib, "kbundle_status")
    req = {"dests": dests, "environ": dict(os.environ)}
    raw = _lib.take_string(lib, fn(json.dumps(req).encode("utf-8")))
    try:
        out: Dict[str, Any] = json.loads(raw)
    except ValueError as e:
        raise KbundleMPIError("mpi", f"libkbundle returned a bad result: {e}: {raw[:200]!r}") from e
    if out.get("kind") == "usage":
        raise KbundleUsageError("usage", str(out.get("reason", "")))
    return tuple(_tree(t) for t in out.get("trees") or ())


def _tree(t: Mapping[str, Any]) -> TreeStatus:
    env: Dict[str, str] = {}
    for kv in t.get("env") or ():
        k, _, v = str(kv).partition("=")
        env[k] = v
    tree = t.get("tree") or {}
    h = t.get("harvested") or {}
    return TreeStatus(
        dest=str(t.get("dest", "")),
        state=str(t.get("state", "")),
        reason=str(t.get("reason", "")),
        content_digest=str(t.get("content_digest", "")),
        layers=tuple(MappingProxyType(dict(l)) for l in t.get("layers") or ()),
        installed=str(t.get("installed", "")),
        job=str(t.get("job", "")),
        host=str(t.get("host", "")),
        presets=tuple(str(p) for p in t.get("presets") or ()),
        env=MappingProxyType(env),
        entries=int(t.get("entries", 0)),
        files=int(t.get("files", 0)),
        dirs=int(t.get("dirs", 0)),
        raw_bytes=int(t.get("raw_bytes", 0)),
        unchanged=bool(tree["unchanged"]) if "unchanged" in tree else None,
        new=int(tree.get("new", 0)),
        new_dirs=int(tree.get("new_dirs", 0)),
        changed=int(tree.get("changed", 0)),
        missing=int(tree.get("missing", 0)),
        harvested=str(h.get("harvested", "")),
        harvested_set=str(h.get("set", "")),
        harvested_layer=str(h.get("layer", "")),
    )
