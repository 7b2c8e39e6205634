"""What load_bundle does about frameworks the program imported before it:
some read their cache variable once, at import, and would go on using the
old value (docs/python.md, "Import order")."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

#: typing.TYPE_CHECKING, without importing typing (docs/python.md, "What import
#: kbundle costs").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Mapping, Optional


def apply(env: Mapping[str, str]) -> List[str]:
    """Applies the variables just set in os.environ to the frameworks
    already imported that read them earlier, where the framework allows it,
    and returns one warning a framework that had read another value."""
    out: List[str] = []
    for var, fix in _FIXES.items():
        if var in env:
            try:
                msg = fix(env)
            except Exception as e:  # a framework version this code does not know
                msg = f"{var}: could not apply it to the framework already imported ({type(e).__name__}: {e})"
            if msg:
                out.append(msg)
    return out


def _numba(env: Mapping[str, str]) -> str:
    # numba.core.config reads NUMBA_* at import and again before each
    # compilation, but a function decorated with cache=True picks its cache
    # directory when it is decorated, from the value read last.
    config = sys.modules.get("numba.core.config")
    if config is None or getattr(config, "CACHE_DIR", None) == env["NUMBA_CACHE_DIR"]:
        return ""
    config.reload_config()
    return (
        "numba was imported before load_bundle, with another NUMBA_CACHE_DIR: kbundle reloaded its "
        "configuration (numba.core.config.reload_config()), so functions decorated with cache=True from now "
        "on use the loaded cache, but those decorated before keep the directory they had; call load_bundle "
        "before importing the modules that define them"
    )


def _jax(env: Mapping[str, str]) -> str:
    # JAX reads each JAX_* variable at import, as its option's default;
    # jax.config.update sets the option, and the persistent cache takes it
    # when it is set up, at the first compilation (reset_cache starts that
    # over, for a program that compiled already).
    jax = sys.modules.get("jax")
    config = getattr(jax, "config", None)
    if config is None:
        return ""
    changed: List[str] = []
    for var, value in env.items():
        name = var.lower()
        if not var.startswith("JAX_"):
            continue
        try:
            cur = getattr(config, name)
        except AttributeError:
            continue  # not an option of this JAX version
        new = _typed(cur, value)
        if cur != new:
            config.update(name, new)
            changed.append(name)
    if not changed:
        return ""
    try:
        reset = importlib.import_module("jax.experimental.compilation_cache.compilation_cache").reset_cache
    except (ImportError, AttributeError):
        reset = None
    if reset is not None:
        reset()
    return (
        "jax was imported before load_bundle (JAX reads its JAX_* variables at import): kbundle set "
        f"{', '.join(changed)} with jax.config.update"
        + (" and reset JAX's persistent cache" if reset is not None else "")
        + ", so compilations from now on use the loaded cache; what was compiled before is not in it"
    )


def _inductor(env: Mapping[str, str]) -> str:
    # torch._inductor reads TORCHINDUCTOR_CACHE_DIR when it compiles, not at
    # import. Older PyTorch 2 releases kept the first value read (cache_dir
    # is an lru_cache there, in torch._inductor.codecache or .utils): start
    # it over. Some paths derived from it are cached as well, so the
    # warning still asks for the call before the first compilation.
    stale = False
    for mod in ("torch._inductor.codecache", "torch._inductor.utils"):
        f = _attr(mod, "cache_dir")
        info = getattr(f, "cache_info", None)
        if f is not None and info is not None and info().currsize and f() != env["TORCHINDUCTOR_CACHE_DIR"]:
            f.cache_clear()
            stale = True
    if not stale:
        return ""
    return (
        "torch.compile compiled before load_bundle and kept another TORCHINDUCTOR_CACHE_DIR: kbundle cleared it "
        "(cache_dir.cache_clear()), but this PyTorch may keep paths derived from it, and what was compiled before "
        "is not in the loaded cache; call load_bundle before the first torch.compile"
    )


_FIXES: Dict[str, Callable[[Mapping[str, str]], str]] = {
    "NUMBA_CACHE_DIR": _numba,
    "JAX_COMPILATION_CACHE_DIR": _jax,
    "TORCHINDUCTOR_CACHE_DIR": _inductor,
    # Triton reads TRITON_CACHE_DIR at each compilation (its cache manager):
    # importing it first changes nothing.
}


def _attr(module: str, name: str) -> Any:
    """The attribute name of module if it is imported, else None (nothing is
    imported here)."""
    m: Optional[ModuleType] = sys.modules.get(module)
    return getattr(m, name, None)


def _typed(cur: Any, value: str) -> Any:
    """value as the type of the option's current value (a string when it
    is unset)."""
    if isinstance(cur, bool):
        return value.lower() in ("1", "true", "yes", "on")
    if isinstance(cur, int):
        return int(value)
    if isinstance(cur, float):
        return float(value)
    return value
