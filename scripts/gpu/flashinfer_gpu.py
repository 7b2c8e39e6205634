"""FlashInfer: one small op that FlashInfer JIT-builds with ninja (RMSNorm
from the norm module), called on a few shapes. FlashInfer counts nothing
itself: a miss is a module whose NAME.so under cached_ops appeared or was
rewritten during the run, or whose .ninja_log gained lines (ninja ran a
command); a hit is a module whose NAME.so was there and ninja ran nothing.

The layout, from flashinfer-ai/flashinfer flashinfer/jit/env.py
(FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/VERSION/ARCHS/cached_ops,
read when flashinfer is imported) and flashinfer/jit/core.py
(JitSpecNvcc: cached_ops/NAME/{build.ninja,NAME.so}; build_and_load runs
ninja every time, a no-op when the module is up to date; a module found
under the AOT directory, flashinfer_jit_cache or data/aot, is loaded
without ninja and is no JIT cache)."""
import os

# flashinfer/norm/__init__.py: RMSNorm runs the CuTe DSL kernels unless
# this is set when flashinfer.norm is imported; with it, the JIT-built
# CUDA norm module.
os.environ.setdefault("FLASHINFER_USE_CUDA_NORM", "1")

from _check import emit, mtimes, skip, torch_cuda  # noqa: E402

NAME = "flashinfer"


def ninja_lines(d):
    """Lines of each module's .ninja_log under d, by module directory."""
    out = {}
    for root, _, names in os.walk(d or "/nonexistent"):
        if ".ninja_log" in names:
            try:
                with open(os.path.join(root, ".ninja_log"), "rb") as f:
                    out[os.path.relpath(root, d)] = sum(1 for _ in f)
            except OSError:
                pass
    return out


def main():
    torch = torch_cuda(NAME)
    import flashinfer
    from flashinfer.jit import env as jit_env

    jit_dir = str(getattr(jit_env, "FLASHINFER_JIT_DIR", ""))
    if not jit_dir:
        skip(NAME, "flashinfer %s has no flashinfer.jit.env.FLASHINFER_JIT_DIR" % flashinfer.__version__)
    before, logs = mtimes(jit_dir, ".so"), ninja_lines(jit_dir)
    total = 0.0
    for rows, hidden in ((4, 128), (16, 512), (7, 4096)):
        x = torch.randn(rows, hidden, device="cuda", dtype=torch.float16)
        w = torch.ones(hidden, device="cuda", dtype=torch.float16)
        total += float(flashinfer.norm.rmsnorm(x, w).float().abs().sum())
    torch.cuda.synchronize()
    after, logs2 = mtimes(jit_dir, ".so"), ninja_lines(jit_dir)
    # One module per directory under cached_ops (tmp/ holds the locks).
    so = {os.path.dirname(p): p for p in after if os.path.basename(p) == os.path.basename(os.path.dirname(p)) + ".so"}
    mods = set(so)
    built = {m for m in mods if before.get(so[m]) != after[so[m]] or logs2.get(m, 0) > logs.get(m, 0)}
    if not mods:
        skip(NAME, "flashinfer %s JIT-built nothing under %s (its modules come from the AOT directory %s)"
             % (flashinfer.__version__, jit_dir, getattr(jit_env, "FLASHINFER_AOT_DIR", "?")))
    emit(NAME, len(mods - built), len(built), modules=sorted(mods),
         ninja_commands=sum(logs2.values()) - sum(logs.get(m, 0) for m in logs2),
         version=flashinfer.__version__, gpu=torch.cuda.get_device_name(), checksum=round(total, 3))


if __name__ == "__main__":
    main()
