"""JAX on the GPU: NFUNCS jitted functions, each called once; hits and
misses by JAX's own monitoring events (the persistent compilation
cache)."""
import jax
import jax.numpy as jnp
from jax import monitoring

from _check import emit, skip

NFUNCS = 4
events = {}


def _listen(event, *args, **kwargs):
    events[event] = events.get(event, 0) + 1


monitoring.register_event_listener(_listen)


def make(i):
    def f(x):
        y = jnp.sin(x) * (i + 1) + jnp.cos(x * (i + 2))
        return (jnp.tanh(y @ y.T / y.shape[0]) + x).sum() + i
    f.__name__ = f"kernel{i:02d}"
    return jax.jit(f)


def main():
    if jax.default_backend() != "gpu":
        skip("jax", "no GPU (JAX %s: backend %s)" % (jax.__version__, jax.default_backend()))
    x = jnp.arange(4096.0).reshape(64, 64) / 4096.0
    total = sum(float(make(i)(x)) for i in range(NFUNCS))
    emit("jax", events.get("/jax/compilation_cache/cache_hits", 0), events.get("/jax/compilation_cache/cache_misses", 0),
         requests=events.get("/jax/compilation_cache/compile_requests_use_cache", 0), functions=NFUNCS,
         device=jax.devices()[0].device_kind, checksum=round(total, 3))


if __name__ == "__main__":
    main()
