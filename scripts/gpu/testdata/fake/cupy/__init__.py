"""A stand-in for CuPy, for check_test.go: its kernels "compile" by
writing a file named after their source into CUPY_CACHE_DIR, as CuPy's
cache does, unless it is there."""
import hashlib
import os

float32 = "float32"


class _Array:
    def __truediv__(self, other):
        return self

    def sum(self):
        return 1.0


def arange(n, dtype=None):
    return _Array()


class ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name):
        d = os.environ["CUPY_CACHE_DIR"]
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, hashlib.md5(operation.encode()).hexdigest() + "_2.cubin")
        if not os.path.exists(p):
            with open(p, "wb") as f:
                f.write(b"0" * 32 + b"\x7fELF")

    def __call__(self, x):
        return x


class cuda:
    class runtime:
        @staticmethod
        def getDeviceCount():
            return 1

    class Device:
        compute_capability = "90"

        def synchronize(self):
            pass
