"""PyTorch C++ extension workload for kbundle's JIT tests.

Builds (or loads) one C++ extension with torch.utils.cpp_extension.load,
ninja and the C++ compiler, into $TORCH_EXTENSIONS_DIR/kb_scaled_add, runs
its op once, and prints one JSON line: the op's result, the build
directory, the .so's path and mtime (nanoseconds) and whether ninja had to
run a command. The C++ source is written next to this script on the first
run only, so its path and mtime stay the same for every later run: ninja
compares them with the objects'. The rank comes from the launcher's
environment; the script itself does not use MPI.
"""
import contextlib
import io
import os
import sys
import tempfile

from _common import emit, rank

SOURCE = r'''
#include <torch/extension.h>

torch::Tensor scaled_add(torch::Tensor a, torch::Tensor b, double s) {
    return a + b * s;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("scaled_add", &scaled_add, "a + s * b");
}
'''

NAME = "kb_scaled_add"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(here, "scaled_add.cpp")
    if not os.path.exists(src):
        with open(src, "w") as f:
            f.write(SOURCE)
    import torch
    from torch.utils import cpp_extension

    # verbose=True makes torch run ninja with its output shown: capture
    # it at the file-descriptor level (ninja is a child process).
    log = tempfile.TemporaryFile()
    saved = os.dup(1)
    sys.stdout.flush()
    os.dup2(log.fileno(), 1)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            mod = cpp_extension.load(name=NAME, sources=[src], verbose=True)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    log.seek(0)
    ninja = log.read().decode(errors="replace")
    out = mod.scaled_add(torch.ones(4), torch.arange(4.0), 2.0)
    build = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], NAME)
    so = os.path.join(build, NAME + ".so")
    lines = [l for l in ninja.splitlines() if l.strip()]
    emit({
        "rank": rank(),
        "result": out.tolist(),
        "build_dir": build,
        "so": so,
        "so_mtime_ns": os.stat(so).st_mtime_ns,
        "module_file": mod.__file__,
        "ran_commands": [l for l in lines if l.startswith("[")],
        "no_work": any("no work to do" in l for l in lines),
    })


main()
