"""kbundle.clean(): remove node-local trees kbundle installed, as
``kbundle clean`` does, by running it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from ._errors import KbundleError, KbundleUsageError

PathArg = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class CleanResult:
    """What :func:`clean` did: the trees ``removed``, the DESTs that did
    not exist (``missing``), those refused because kbundle did not install
    them or a live load is installing them (``refused``, each with why),
    and those left by ``older_than`` (``left``); ``stale`` are the
    temporaries of killed runs removed beside them. Falsy when something
    failed: ``reason`` and ``hint`` say what, as ``kbundle clean`` does."""

    ok: bool
    removed: Tuple[str, ...] = ()
    missing: Tuple[str, ...] = ()
    refused: Tuple[str, ...] = ()
    left: Tuple[str, ...] = ()
    stale: Tuple[str, ...] = ()
    reason: str = ""
    hint: str = ""

    def __bool__(self) -> bool:
        return self.ok


def clean(dest: Union[PathArg, Sequence[PathArg]], *, older_than: Optional[float] = None) -> CleanResult:
    """Removes each DEST (a path, or a sequence of paths: a LoadResult's
    ``dest``) when kbundle installed it, and the temporaries killed runs
    left beside it, by the rules of ``kbundle clean DEST...`` (it runs the
    package's ``bin/kbundle``, its build without MPI: cleaning is local to
    this node). Call it on one rank per node once the job is done with
    DEST, e.g. where ``LoadResult.leader`` is true, after ``harvest``.
    ``older_than`` (seconds) removes only trees installed longer ago.
    Anything else is refused and left as it is; nothing raises for it. A
    bad argument raises KbundleUsageError; a package without its program,
    KbundleError."""
    if isinstance(dest, (str, os.PathLike)):
        dests = [os.fspath(dest)]
    else:
        dests = [os.fspath(d) for d in dest]
    if not dests or any(d == "" for d in dests):
        raise KbundleUsageError("usage", "clean: pass the DEST to remove (a path, or a sequence of paths)")
    from .__main__ import BIN_DIR, environment  # the console script's program and environment

    front = BIN_DIR / "kbundle"
    if not os.access(front, os.X_OK):
        raise KbundleError("failed", f"{front}: this installation of the package has no kbundle program",
                           "install the wheel (`make wheel` in kbundle's source tree), or run `make python` there")
    args: List[str] = [str(front), "clean", "--json"]
    if older_than is not None:
        if older_than < 0:
            raise KbundleUsageError("usage", f"clean: older_than={older_than!r}: want seconds, 0 or more")
        args += ["--older-than", f"{older_than:g}"]
    env = environment(dict(os.environ))
    env["KBUNDLE_BUILD"] = "none"  # local: never MPI inside an MPI task
    proc = subprocess.run(args + ["--"] + dests, capture_output=True, text=True, env=env)
    try:
        out: Dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise KbundleError("failed", f"kbundle clean: exit {proc.returncode}: {proc.stderr.strip()[:500]}") from None
    hint = str(out.get("hint", ""))
    if hint.startswith("hint: "):
        hint = hint[len("hint: "):]
    if out.get("kind") == "usage":
        raise KbundleUsageError("usage", str(out.get("reason", "")), hint)

    def strings(key: str) -> Tuple[str, ...]:
        return tuple(str(s) for s in out.get(key) or ())

    return CleanResult(ok=bool(out.get("ok")), removed=strings("removed"), missing=strings("missing"),
                       refused=strings("refused"), left=strings("left"), stale=strings("stale"),
                       reason=str(out.get("reason", "")), hint=hint)
