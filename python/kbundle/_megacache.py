"""PyTorch's Mega-Cache blobs (the ``mega-cache`` preset, docs/presets.md):
``torch.compiler.save_cache_artifacts()`` serializes what this process's
compile caches gained into one portable blob, and
``torch.compiler.load_cache_artifacts(blob)`` fills another process's
caches from it. load_bundle hot-loads the set's blobs after a load;
harvest() first writes this process's blob into DEST, so that the
harvest takes it into the set."""

from __future__ import annotations

import os
import sys

#: typing.TYPE_CHECKING, without importing typing (docs/python.md, "What import
#: kbundle costs").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

#: The preset's name and its folder under DEST (warmup/table.go).
PRESET = "mega-cache"
SUBDIR = "mega-cache"


def wanted(presets: Sequence[str]) -> bool:
    return PRESET in presets


def hot_load(dest: str) -> int:
    """Calls torch.compiler.load_cache_artifacts on every blob under
    DEST/mega-cache, in name order; returns how many it loaded."""
    from pathlib import Path  # here: a load without the preset does not need it

    folder = Path(dest) / SUBDIR
    try:
        names = sorted(p for p in os.listdir(folder) if p.endswith(".bin"))
    except FileNotFoundError:
        return 0
    if not names:
        return 0
    import torch.compiler  # type: ignore[import-not-found,unused-ignore]  # the preset asks for it

    for name in names:
        torch.compiler.load_cache_artifacts((folder / name).read_bytes())
    return len(names)


def save(dest: str) -> str:
    """Writes this process's torch.compiler.save_cache_artifacts() blob to
    DEST/mega-cache/SHA256.bin (a temporary file renamed, so a reader
    never sees a part); returns its path, or "" when torch is not
    imported or its caches gained nothing."""
    if "torch" not in sys.modules:
        return ""
    import hashlib  # here, not at import: load_bundle does not need them
    import tempfile
    from pathlib import Path

    import torch.compiler  # type: ignore[import-not-found,unused-ignore]

    got = torch.compiler.save_cache_artifacts()
    if not got or not got[0]:
        return ""
    blob = bytes(got[0])
    folder = Path(dest) / SUBDIR
    folder.mkdir(exist_ok=True)
    final = folder / (hashlib.sha256(blob).hexdigest() + ".bin")
    if final.exists():
        return str(final)  # the same blob from another rank
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".blob-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return str(final)
