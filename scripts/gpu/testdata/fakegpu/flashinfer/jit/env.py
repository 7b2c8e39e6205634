import os

FLASHINFER_JIT_DIR = os.path.join(os.environ.get("FLASHINFER_WORKSPACE_BASE", os.path.expanduser("~")),
                                  ".cache", "flashinfer", "0.0.fake", "90", "cached_ops")
FLASHINFER_AOT_DIR = "/nonexistent/aot"
