"""PyTorch C++ extension workload for kbundle's JIT tests.

Builds (or loads) one C++ extension with torch.utils.cpp_extension.load,
ninja and the C++ compiler, into $TORCH_EXTENSIONS_DIR/kb_scaled_add, runs
its op once, and prints one JSON line: the op's result, the build
directory, the .so's path and mtime (nanoseconds) and whether ninja had to
run a command. With KBUNDLE_TEST_NEW_SHAPES=1 it builds a second
extension too (kb_scaled_mul: what a later job compiles anew); "extensions"
and "built" count them all. The C++ sources are written next to this
script on the first run only (atomically: many ranks start at once), so
their paths and mtimes stay the same for every later run: ninja compares
them with the objects'. The rank comes from the launcher's environment;
the script itself does not use MPI.
"""
import contextlib
import io
import os
import sys
import tempfile

from _common import emit, rank

SOURCES = {
    "kb_scaled_add": ("a + b * s", "scaled_add"),
    "kb_scaled_mul": ("a * b * s", "scaled_mul"),
}
NAME = "kb_scaled_add"  # the extension every run builds


def source(here, name):
    """The extension's C++ file beside this script, written once: a
    whole file linked into place, never one another rank is writing."""
    expr, fn = SOURCES[name]
    path = os.path.join(here, fn + ".cpp")
    if os.path.exists(path):
        return path
    text = (
        "#include <torch/extension.h>\n\n"
        "torch::Tensor %s(torch::Tensor a, torch::Tensor b, double s) {\n"
        "    return %s;\n}\n\n"
        "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
        '    m.def("%s", &%s, "%s");\n}\n' % (fn, expr, fn, fn, expr)
    )
    fd, tmp = tempfile.mkstemp(dir=here, prefix="." + fn)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        os.fchmod(f.fileno(), 0o644)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return path


def build(here, name):
    """cpp_extension.load of one extension: the module and ninja's output."""
    from torch.utils import cpp_extension

    # verbose=True makes torch run ninja with its output shown: capture
    # it at the file-descriptor level (ninja is a child process).
    log = tempfile.TemporaryFile()
    saved = os.dup(1)
    sys.stdout.flush()
    os.dup2(log.fileno(), 1)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            mod = cpp_extension.load(name=name, sources=[source(here, name)], verbose=True)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    log.seek(0)
    lines = [l for l in log.read().decode(errors="replace").splitlines() if l.strip()]
    return mod, [l for l in lines if l.startswith("[")], any("no work to do" in l for l in lines)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    import torch

    extra = ["kb_scaled_mul"] if os.environ.get("KBUNDLE_TEST_NEW_SHAPES") == "1" else []
    first, ran, no_work = build(here, NAME)
    # each extension's (commands ninja ran, no work to do)
    outcomes = [(ran, no_work)] + [build(here, name)[1:] for name in extra]
    out = first.scaled_add(torch.ones(4), torch.arange(4.0), 2.0)
    build_dir = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], NAME)
    so = os.path.join(build_dir, NAME + ".so")
    emit({
        "rank": rank(),
        "result": out.tolist(),
        "build_dir": build_dir,
        "so": so,
        "so_mtime_ns": os.stat(so).st_mtime_ns,
        "module_file": first.__file__,
        "ran_commands": ran,
        "no_work": no_work,
        "extensions": len(outcomes),
        "built": sum(1 for r, nw in outcomes if r or not nw),
    })


main()
