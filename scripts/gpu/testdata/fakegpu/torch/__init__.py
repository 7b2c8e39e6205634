"""A stand-in for PyTorch on an SM90 GPU, for check_test.go: tensors are
numbers, enough for the programs of the JIT frameworks faked beside it."""
from . import version  # noqa: F401

__version__ = "0.0+fakegpu"
float16 = bfloat16 = "dtype"


class _Tensor:
    def __init__(self, shape):
        self.shape = shape

    def float(self):
        return self

    def abs(self):
        return self

    def sum(self):
        return 1.0


def randn(*shape, **kw):
    return _Tensor(shape)


ones = empty = randn
empty_like = _Tensor


class cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def get_device_name():
        return "Fake H200"

    @staticmethod
    def get_device_capability():
        return (9, 0)
