"""The process's JAX runtime for the entry points: XLA flags and the compilation cache.

    runtime.configure_xla(cfg.cpu_xla_flags)        # before anything starts a backend
    runtime.enable_compilation_cache(cfg.compilation_cache)

Both act on the process (environment variables, `jax.config`), so they live with the
entry points, not with the library code the entry points call.
"""

from __future__ import annotations

import importlib.util
import logging
import os

import jax
from jax.extend import backend as jax_backend

_LOG = logging.getLogger(__name__)

COMPILE_CACHE_MIN_SECONDS = 0.1  # programs that compile faster are not worth a file


def enable_compilation_cache(path: str) -> str | None:
    """Turns on JAX's persistent compilation cache in `path` ("" = leave it off).

    XLA executables are stored by a hash of the program, its compile options
    and the jaxlib/backend, so a later process running the same programs (a
    rerun, a resume, the next sweep point with the same shapes) loads them
    instead of compiling: on W1 the first step drops from ~7 s to ~2 s.
    Returns the expanded directory, or None when off.
    """
    if not path:
        return None
    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", COMPILE_CACHE_MIN_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


_ACCELERATOR_MODULES = ("jax_plugins", "libtpu", "jax_cuda12_plugin", "jax_cuda13_plugin")


def cpu_only() -> bool:
    """Whether JAX will run on the CPU: JAX_PLATFORMS (env or config) names cpu
    first, or no GPU/TPU plugin is installed. Starts no backend."""
    platforms = os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms or ""
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return not any(importlib.util.find_spec(m) for m in _ACCELERATOR_MODULES)


def backend_started() -> bool:
    """Whether this process has started a JAX backend (and so read XLA_FLAGS): every
    computation goes through `jax.extend.backend.get_backend`, whose cache then holds it."""
    return jax_backend.get_backend.cache_info().currsize > 0


def configure_xla(flags: str) -> str:
    """Adds `flags` (the config's `cpu_xla_flags`) to XLA_FLAGS in a CPU-only
    process (see `cpu_only`) and returns what was added ("" when nothing was:
    empty, not CPU-only, or every flag already set by the user, whose value wins).

    The default, `-disable-lsr`: LLVM's loop-strength reduction took ~18% of
    XLA:CPU's compile time for W1's update (perf: LSRInstance::
    GenerateAllReuseFormulae); without it the update compiles ~25% faster and
    runs as fast (benchmarks/RESULTS.md). GPU kernels keep LLVM's default.

    XLA reads XLA_FLAGS once, when JAX starts its first backend, so this must
    run before any computation; later (e.g. an entry point's main called from
    a process that already computed) it adds nothing and logs a warning.
    """
    if not flags or not cpu_only():
        return ""
    current = os.environ.get("XLA_FLAGS", "")
    have = {f.split("=", 1)[0] for f in current.split()}
    new = [f for f in flags.split() if f.split("=", 1)[0] not in have]
    if not new:
        return ""
    if backend_started():
        _LOG.warning("cpu_xla_flags %r not applied: JAX has already started a backend "
                     "and read XLA_FLAGS", " ".join(new))
        return ""
    os.environ["XLA_FLAGS"] = " ".join([current, *new]).strip()
    return " ".join(new)
