"""A stand-in for a ROCm build of PyTorch on a machine with no GPU, for
check_test.go: every torch-based program must say "skipped: no GPU"."""
from . import version  # noqa: F401

__version__ = "0.0+fake"


class cuda:
    @staticmethod
    def is_available():
        return False
