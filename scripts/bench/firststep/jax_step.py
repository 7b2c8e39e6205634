"""Time to a warm first step, JAX (scripts/bench/harvest.sh).

The "first step" jits and runs N distinct functions (each its own XLA
program and persistent-cache entry) on the CPU, N from $KBUNDLE_BENCH_N.
The persistent cache is JAX's own, configured by the environment that
`kbundle load` prints for the jax preset (JAX_COMPILATION_CACHE_DIR and
its thresholds; the benchmark sets the same for every case). Prints one
JSON line: the step's seconds, and JAX's cache hits and misses.
"""
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
t0 = time.monotonic()
if os.environ.get("KBUNDLE_BENCH_LOAD"):
    import bench_inproc  # noqa: F401 (mdlat.sh's inproc case: loads the set before JAX)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import monitoring  # noqa: E402

events = {}
monitoring.register_event_listener(lambda e, **kw: events.__setitem__(e, events.get(e, 0) + 1))


def make(i):
    def f(x):
        y = x
        for k in range(6 + i % 5):
            y = jnp.tanh(y @ y.T / y.shape[0] + jnp.sin(y * (i + k + 1)))
            y = y + jnp.cos(x * (k + 2)) * (i + 1)
        return jnp.sum(jnp.exp(-y * y)) + i
    return jax.jit(f)


def main():
    n = int(os.environ.get("KBUNDLE_BENCH_N", "16"))
    x = jnp.arange(256.0).reshape(16, 16) / 256.0
    total = sum(float(make(i)(x)) for i in range(n))
    print(json.dumps({"step_seconds": time.monotonic() - t0,
                      "hits": events.get("/jax/compilation_cache/cache_hits", 0),
                      "misses": events.get("/jax/compilation_cache/cache_misses", 0), "value": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
