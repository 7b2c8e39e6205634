"""A stand-in for FlashInfer, for check_test.go: rmsnorm "builds" the norm
module as FlashInfer's JIT does, NAME.so and a .ninja_log line under
FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/VERSION/ARCHS/cached_ops/norm,
unless it is there (ninja has nothing to do)."""
from . import norm  # noqa: F401
from .jit import env  # noqa: F401

__version__ = "0.0.fake"
