"""What the GPU check's programs share: the line they print."""
import json
import os


def files(d):
    """The files under d, relative, with their sizes."""
    out = {}
    for root, _, names in os.walk(d or "/nonexistent"):
        for n in names:
            p = os.path.join(root, n)
            try:
                out[os.path.relpath(p, d)] = os.path.getsize(p)
            except OSError:
                pass
    return out


def emit(framework, hits, misses, **extra):
    """One line for check.sh: how many kernels the cache served and how
    many were compiled in this process."""
    print("KBUNDLE_CHECK " + json.dumps({"framework": framework, "hits": hits, "misses": misses, **extra}), flush=True)
