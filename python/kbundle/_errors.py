"""kbundle's exceptions and warning."""

from __future__ import annotations


class KbundleError(Exception):
    """A load (or harvest) that did not happen. ``kind`` is "unusable",
    "failed", "usage" or "mpi"; ``reason`` the message lines; ``hint`` how
    to fix it ("" if none)."""

    def __init__(self, kind: str, reason: str, hint: str = "") -> None:
        self.kind = kind
        self.reason = reason
        if hint.startswith("hint: "):
            hint = hint[len("hint: ") :]  # the label is message()'s
        self.hint = hint
        super().__init__(message(reason, hint))


class BundleUnusableError(KbundleError):
    """The bundle cannot be used (missing, damaged, untrusted, none
    configured): raised with ``strict=True``, the same on every rank."""


class LoadFailedError(KbundleError):
    """The load failed on some node (destination exists or cannot be
    written, disk full) and nothing was installed anywhere: raised with
    ``strict=True``, the same on every rank."""


class HarvestFailedError(KbundleError):
    """The harvest failed (the set's layer could not be written, a file
    changed while it was sent, the set has too many layers) and nothing
    was published: raised by :func:`kbundle.harvest` with ``strict=True``,
    the same on every rank."""


class KbundleUsageError(KbundleError, ValueError):
    """A bad argument or KBUNDLE_ variable on some rank: raised on every
    rank, whatever ``strict`` says."""


class KbundleMPIError(KbundleError, RuntimeError):
    """MPI cannot be used for the load on this rank: mpi4py's MPI is not
    one kbundle is built for, its thread level is too low, or a
    communication failed. Raised whatever ``strict`` says; local to the
    rank (others may see another error)."""


class KbundleWarning(UserWarning):
    """Issued on rank 0 when the bundle was not loaded or the harvest
    failed (without ``strict``), or when nodes differ from the machine it
    was warmed on."""


def message(reason: str, hint: str) -> str:
    """The lines as ``kbundle load`` prints them: each with "kbundle: ",
    the hint's with "hint: " (``hint`` itself is without it)."""
    lines = [l for l in reason.splitlines() if l] + (["hint: " + hint] if hint else [])
    return "\n".join("kbundle: " + l for l in lines)
