"""JAX workload for kbundle's JIT tests.

Jits NFUNCS distinct functions (each its own XLA program), calls each
once, and prints one JSON line with JAX's own signals, recorded through
jax.monitoring: how many compilations asked the persistent cache
('/jax/compilation_cache/compile_requests_use_cache'), how many it served
('/jax/compilation_cache/cache_hits'), how many it had to compile and
write ('/jax/compilation_cache/cache_misses'), and every warning JAX gave
about an entry it could not read (the XLA:CPU AOT loader rejecting an
entry is one: jax-ml/jax#38445). The rank comes from the launcher's
environment; the script itself does not use MPI.
"""
import os
import warnings

from _common import emit, rank

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import monitoring  # noqa: E402

NFUNCS = 8

events = {}


def _listen(event, **kwargs):
    events[event] = events.get(event, 0) + 1


monitoring.register_event_listener(_listen)


def make(i):
    # Distinct bodies: each is its own XLA program and cache entry.
    def f(x):
        y = jnp.sin(x) * (i + 1) + jnp.cos(x * (i + 2))
        for _ in range(i % 3 + 1):
            y = jnp.tanh(y @ y.T / y.shape[0]) + x
        return y.sum() + i
    f.__name__ = f"kernel{i:02d}"
    return jax.jit(f)


# KBUNDLE_TEST_NEW_SHAPES=1: "new shapes", the first half of the
# functions called on a 16x16 input too (test/cluster's harvest loop).
NEW_SHAPES = os.environ.get("KBUNDLE_TEST_NEW_SHAPES") == "1"


def main():
    x = jnp.arange(64.0).reshape(8, 8) / 64.0
    x16 = jnp.arange(256.0).reshape(16, 16) / 256.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fs = [make(i) for i in range(NFUNCS)]
        results = [float(f(x)) for f in fs]
        if NEW_SHAPES:
            results += [float(f(x16)) for f in fs[: NFUNCS // 2]]
    rejected = [str(w.message)[:300] for w in caught
                if "persistent compilation cache" in str(w.message)]
    emit({
        "rank": rank(),
        "functions": NFUNCS,
        "requests": events.get("/jax/compilation_cache/compile_requests_use_cache", 0),
        "hits": events.get("/jax/compilation_cache/cache_hits", 0),
        "misses": events.get("/jax/compilation_cache/cache_misses", 0),
        "rejected": rejected,
        "cache_dir": jax.config.jax_compilation_cache_dir or "",
        "checksum": round(sum(results), 6),
    })


if __name__ == "__main__":
    main()
