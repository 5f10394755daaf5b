"""Test session setup: 8 simulated CPU devices, fp32 matmuls, fixed seeds.

XLA_FLAGS must be set before jax is imported anywhere, so it is done here at
collection time. Single-device tests simply use device 0.
"""

import os

from configs.base import CPU_XLA_FLAGS  # no jax import: safe before XLA_FLAGS is set
from tests.subprocess_env import TEST_XLA_FLAGS

# the launch/ entry points' CPU flags (compile ~25% faster at equal speed) and the suite's
# (tests/subprocess_env.py: LLVM at -O0); a machine whose environment already sets
# XLA_FLAGS keeps them, with the 8 devices added
_DEVICES = "--xla_force_host_platform_device_count"
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = f"{_DEVICES}=8 {CPU_XLA_FLAGS} {TEST_XLA_FLAGS}"
elif _DEVICES not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] = f"{_DEVICES}=8 {os.environ['XLA_FLAGS']}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drops JAX's compiled programs after each test module. An xdist worker
    otherwise keeps every executable of the whole suite alive (the samplers
    compile one decode per row/group/width bucket), and two fresh-clone runs
    ended with XLA's compiler crashing late in a worker's life."""
    yield
    jax.clear_caches()


@pytest.fixture(autouse=True, scope="session")
def _shared_compilation_cache(tmp_path_factory):
    """JAX's persistent compilation cache in one directory for the whole session, shared
    by the xdist workers (their base temp directories' parent; pytest keeps the last
    three sessions' and removes older ones). Many tests compile the same small programs
    (every trainer test's sampler, reference and eval), and the modules' cleanup above
    drops them from memory: the second compile of a program is then a file read. A
    fresh session starts empty, as CI does; launch/ subprocesses use their own cache
    (`config.compilation_cache`)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = shared / "xla_cache"
    path.mkdir(exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    yield
from tests.storage_emulator import gcs  # noqa: E402, F401 - the local GCS server fixture
