"""count: the frameworks' own cache hits and misses in this process.

``load_bundle(..., count=True)`` calls :func:`start`: it registers the
hooks the frameworks offer (issue 30), and :func:`kbundle.harvest`
gathers every rank's counts (:func:`snapshot`) into its result and
report:

- JAX: the ``/jax/compilation_cache/cache_hits`` and ``cache_misses``
  monitoring events (``jax.monitoring.register_event_listener``);
- Triton: ``triton.knobs.compilation.listener``, called with
  ``cache_hit`` for every kernel it compiles or finds;
- Inductor: ``torch._dynamo.utils.counters["inductor"]``'s
  ``fxgraph_cache_hit`` and ``fxgraph_cache_miss``, read against their
  values at start;
- vLLM: its compilation counter's ``num_aot_artifacts_loaded`` (hits)
  and ``num_aot_compiles`` (misses), where vLLM is imported.

A framework not imported when start() runs is hooked if it can be
imported then (JAX, Triton), or read at harvest if it is imported by then
(Inductor, vLLM). Numba has no hook: its counts come from file use (the
harvest's numba line).
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

_lock = threading.Lock()
_started = False
# framework → [hits, misses], counted by the hooks
_counts: Dict[str, List[int]] = {}
# framework → (hits, misses) at start, for counters read at harvest
_base: Dict[str, Tuple[int, int]] = {}
_hooked: List[str] = []
_numba = False

JAX_HIT = "/jax/compilation_cache/cache_hits"
JAX_MISS = "/jax/compilation_cache/cache_misses"


def _count(framework: str, hit: bool) -> None:
    with _lock:
        c = _counts.setdefault(framework, [0, 0])
        c[0 if hit else 1] += 1


def _jax_listener(event: str, **_kwargs: Any) -> None:
    if event == JAX_HIT:
        _count("JAX", True)
    elif event == JAX_MISS:
        _count("JAX", False)


def _module(name: str, import_it: bool) -> Optional[Any]:
    mod = sys.modules.get(name)
    if mod is None and import_it:
        try:
            mod = importlib.import_module(name)
        except Exception:  # not installed, or broken: not counted
            return None
    return mod


def _hook_jax(import_it: bool) -> bool:
    mon = _module("jax.monitoring", import_it and _module("jax", import_it) is not None)
    if mon is None or not hasattr(mon, "register_event_listener"):
        return False
    mon.register_event_listener(_jax_listener)
    _counts.setdefault("JAX", [0, 0])
    return True


def _hook_triton(import_it: bool) -> bool:
    knobs = _module("triton.knobs", import_it and _module("triton", import_it) is not None)
    comp = getattr(knobs, "compilation", None)
    if comp is None or not hasattr(comp, "listener"):
        return False
    prev: Optional[Callable[..., None]] = comp.listener

    def listener(*args: Any, cache_hit: bool = False, **kwargs: Any) -> None:
        _count("Triton", bool(cache_hit))
        if prev is not None:
            prev(*args, cache_hit=cache_hit, **kwargs)

    comp.listener = listener
    _counts.setdefault("Triton", [0, 0])
    return True


def _inductor() -> Optional[Tuple[int, int]]:
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return None
    c = counters["inductor"]
    return int(c["fxgraph_cache_hit"]), int(c["fxgraph_cache_miss"])


def _vllm() -> Optional[Tuple[int, int]]:
    mod = sys.modules.get("vllm.compilation.counter")
    counter = getattr(mod, "compilation_counter", None)
    if counter is None:
        return None
    return int(getattr(counter, "num_aot_artifacts_loaded", 0)), int(getattr(counter, "num_aot_compiles", 0))


_READ: Dict[str, Callable[[], Optional[Tuple[int, int]]]] = {"Inductor": _inductor, "vLLM": _vllm}


def start(presets: Tuple[str, ...] = ()) -> List[str]:
    """Registers the hooks, once a process; returns the frameworks
    hooked or read. A preset loaded (jax, triton, inductor) imports its
    framework to hook it."""
    global _started, _numba
    with _lock:
        if _started:
            return list(_hooked)
        _started = True
    want = set(presets)
    _numba = "numba" in want
    if _hook_jax("jax" in want):
        _hooked.append("JAX")
    if _hook_triton(bool(want & {"triton", "inductor", "vllm", "sglang"})):
        _hooked.append("Triton")
    for name, read in _READ.items():
        now = read()
        _base[name] = now if now is not None else (0, 0)
    return list(_hooked)


def numba_loaded() -> bool:
    """Whether the load that started counting had the numba preset."""
    return _numba


def snapshot() -> Optional[Dict[str, Tuple[int, int]]]:
    """This process's counts since start(): framework → (hits, misses);
    None when start() was not called."""
    if not _started:
        return None
    with _lock:
        out = {k: (v[0], v[1]) for k, v in _counts.items()}
    for name, read in _READ.items():
        now = read()
        if now is not None:
            b = _base.get(name, (0, 0))
            out[name] = (now[0] - b[0], now[1] - b[1])
    return out


def report(per_rank: List[Optional[Dict[str, Tuple[int, int]]]], numba: bool) -> List[str]:
    """The report's lines from every rank's snapshot, in rank order:
    "JAX: 16 hits, 0 misses on every rank", or the totals and the range
    per rank when ranks differ. Ranks that did not count are said."""
    counted = [s for s in per_rank if s is not None]
    if not counted:
        return []
    lines = []
    names = sorted({k for s in counted for k in s})
    for name in names:
        each = [s.get(name, (0, 0)) for s in counted]
        if len(set(each)) == 1:
            h, m = each[0]
            lines.append(f"{name}: {h} {_plural(h, 'hit')}, {m} {_plural(m, 'miss')} on every rank")
            continue
        h, m = sum(e[0] for e in each), sum(e[1] for e in each)
        lo_h, hi_h = min(e[0] for e in each), max(e[0] for e in each)
        lo_m, hi_m = min(e[1] for e in each), max(e[1] for e in each)
        lines.append(f"{name}: {h} {_plural(h, 'hit')}, {m} {_plural(m, 'miss')} over {len(each)} ranks "
                     f"(a rank: {lo_h} to {hi_h} hits, {lo_m} to {hi_m} misses)")
    if numba:
        lines.append("Numba: no hook; its counts come from file use (the numba line above)")
    if len(counted) < len(per_rank):
        lines.append(f"{len(per_rank) - len(counted)} of {len(per_rank)} ranks did not count (load_bundle without count=True)")
    return lines


def _plural(n: int, word: str) -> str:
    if n == 1:
        return word
    return word + ("es" if word.endswith("s") else "s")
