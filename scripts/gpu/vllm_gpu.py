"""vLLM's compile cache: a tiny Llama built here with random weights
(nothing is downloaded: the GPU machine reaches nothing outside it),
served by vLLM in this process, a few tokens generated; hits and misses
by vLLM's own compilation counters. Without transformers (to write the
model) or with no way to build one, the program says "skipped: no local
model". KBUNDLE_CHECK_VLLM_MODEL names a local model to use instead.

The layout and the counters, from vllm-project/vllm
vllm/compilation/backends.py (VllmBackend: VLLM_CACHE_ROOT/
torch_compile_cache/HASH/rank_R_D/, HASH of the environment, the
configuration, the traced forward code and the compiler;
CompilerManager.compile: a graph found in vllm_compile_cache.py is
loaded, else compiled and num_cache_entries_updated counted) and
vllm/compilation/counter.py (num_backend_compilations, every graph
asked for; num_aot_artifacts_loaded/saved where the AOT compile of
torch_aot_compile/ is on). The counters live in the engine's process:
VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps the engine in this one."""
import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _check import emit, skip, torch_cuda  # noqa: E402

NAME = "vllm"


def model_dir():
    """A tiny Llama with seeded random weights, at the same path in the
    warm-up and after the load (the path is in vLLM's HASH)."""
    if os.environ.get("KBUNDLE_CHECK_VLLM_MODEL"):
        return os.environ["KBUNDLE_CHECK_VLLM_MODEL"]
    d = os.path.join(os.environ.get("KBUNDLE_CHECK_WORK") or os.path.join("/tmp", "kbundle-check-%d" % os.getuid()), "tiny-llama")
    if os.path.exists(os.path.join(d, "config.json")):
        return d
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          torch_dtype="bfloat16")
        LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    except Exception as e:
        skip(NAME, "no local model (could not build a tiny Llama: %s: %s)" % (type(e).__name__, e))
    return d


def main():
    torch = torch_cuda(NAME)
    model = model_dir()
    from vllm import LLM, SamplingParams
    from vllm.compilation.counter import compilation_counter as cc

    root = os.path.join(os.environ.get("VLLM_CACHE_ROOT", ""), "torch_compile_cache")
    hashes = lambda: set(os.listdir(root)) if os.path.isdir(root) else set()  # noqa: E731
    before = hashes()
    llm = LLM(model=model, skip_tokenizer_init=True, dtype="bfloat16", max_model_len=128, max_num_seqs=4,
              gpu_memory_utilization=0.2, seed=0)
    out = llm.generate([{"prompt_token_ids": [1, 2, 3, 4]}], SamplingParams(max_tokens=4, temperature=0, detokenize=False))
    tokens = list(out[0].outputs[0].token_ids)
    n = lambda k: getattr(cc, k, 0)  # noqa: E731
    misses = n("num_cache_entries_updated") + n("num_aot_artifacts_saved")
    hits = n("num_aot_artifacts_loaded") + max(0, n("num_backend_compilations") - n("num_cache_entries_updated"))
    emit(NAME, hits, misses, min_hits=1, backend_compilations=n("num_backend_compilations"),
         inductor_compiles=n("num_inductor_compiles"), aot_loaded=n("num_aot_artifacts_loaded"),
         new_hashes=sorted(hashes() - before), reused_hashes=sorted(before & hashes()),
         gpu=torch.cuda.get_device_name(), tokens=tokens)


if __name__ == "__main__":
    main()
