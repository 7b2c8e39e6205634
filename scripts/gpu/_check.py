"""What the GPU check's programs share: the line they print."""
import json
import os
import sys


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


def mtimes(d, suffix=""):
    """The files under d whose names end in suffix, relative, with their
    modification times in nanoseconds."""
    out = {}
    for root, _, names in os.walk(d or "/nonexistent"):
        for n in names:
            if n.endswith(suffix):
                p = os.path.join(root, n)
                try:
                    out[os.path.relpath(p, d)] = os.stat(p).st_mtime_ns
                except OSError:
                    pass
    return out


def emit(framework, hits, misses, **extra):
    """One line for check.sh: how many kernels the cache served and how
    many were compiled in this process."""
    print("KBUNDLE_CHECK " + json.dumps({"framework": framework, "hits": hits, "misses": misses, **extra}), flush=True)


def skip(framework, reason):
    """One line for check.sh saying the program could not check anything
    here (no GPU, no local model, ...), and exit 0: check.sh reports the
    framework skipped, not failed."""
    print("KBUNDLE_CHECK " + json.dumps({"framework": framework, "skipped": reason}), flush=True)
    sys.exit(0)


def torch_cuda(framework):
    """torch, when it sees a CUDA (or ROCm) device; else skip."""
    import torch
    if not torch.cuda.is_available():
        skip(framework, "no GPU (torch %s: torch.cuda.is_available() is False)" % torch.__version__)
    return torch


def installed(module):
    """Whether module is installed, found without importing it (a skip
    takes well under a second): "torch+hip" is a ROCm build of torch (its
    torch/version.py names a HIP version)."""
    import importlib.util
    name, _, build = module.partition("+")
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    dirs = list(spec.submodule_search_locations or [])
    for part in rest:
        dirs = [os.path.join(d, part) for d in dirs if os.path.isdir(os.path.join(d, part)) or os.path.isfile(os.path.join(d, part + ".py"))]
        if not dirs:
            return False
    if build == "hip":
        try:
            with open(os.path.join(dirs[0], "version.py")) as f:
                return any(line.startswith("hip") and "None" not in line for line in f)
        except (OSError, IndexError):
            return False
    return True


if __name__ == "__main__":
    # python _check.py installed MODULE: exit 0 when it is.
    sys.exit(0 if len(sys.argv) == 3 and sys.argv[1] == "installed" and installed(sys.argv[2]) else 1)
