"""DeepGEMM: a few small BF16 GEMMs (deep_gemm.bf16_gemm_nt), which
DeepGEMM JIT-compiles with NVCC or NVRTC. DeepGEMM counts nothing
itself: a miss is a kernel directory that appeared in the cache during
the run, a hit one that was there before (the program runs the same
GEMMs every time, so after a load every directory it needs is there).

The layout, from deepseek-ai/DeepGEMM csrc/jit/compiler.hpp
(Compiler::Compiler: DG_JIT_CACHE_DIR, default $HOME/.deep_gemm;
Compiler::build: DIR/cache/kernel.NAME.HASH/, compiled in DIR/tmp and
renamed into place) and csrc/jit/kernel_runtime.hpp (check_validity: a
directory with kernel.cu and kernel.cubin is reused without compiling)."""
import os

from _check import emit, skip, torch_cuda

NAME = "deepgemm"
SHAPES = ((128, 256, 256), (256, 512, 512))


def kernels(d):
    try:
        return {n for n in os.listdir(os.path.join(d, "cache")) if n.startswith("kernel.")}
    except OSError:
        return set()


def main():
    torch = torch_cuda(NAME)
    major, minor = torch.cuda.get_device_capability()
    if torch.version.hip is not None or major not in (9, 10):
        skip(NAME, "DeepGEMM's JIT kernels need SM90 or SM100; this GPU is %s (sm_%d%d)" % (torch.cuda.get_device_name(), major, minor))
    import deep_gemm
    gemm = getattr(deep_gemm, "bf16_gemm_nt", None)
    if gemm is None:
        skip(NAME, "this deep_gemm has no bf16_gemm_nt (DeepGEMM before 2.0)")
    cache = os.environ.get("DG_JIT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".deep_gemm")
    before = kernels(cache)
    total = 0.0
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        gemm(a, b, d)
        total += float(d.float().abs().sum())
    torch.cuda.synchronize()
    new = kernels(cache) - before
    emit(NAME, len(before), len(new), gemms=len(SHAPES), kernels=sorted(new or before),
         gpu=torch.cuda.get_device_name(), checksum=round(total, 1))


if __name__ == "__main__":
    main()
