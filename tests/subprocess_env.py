"""The environment of a process a test starts (`python -m launch.<x>`): JAX on the CPU,
and XLA_FLAGS with the suite's compile flags (tests/conftest.py) and the devices the
test asks for instead of the suite's 8 simulated ones.

No jax import here: tests/conftest.py reads TEST_XLA_FLAGS before jax starts.
"""

import os

# LLVM's code generation at -O0: the suite's programs are tiny and compiling them is
# most of its time (a tiny model's gradient compiles in 2.4 s instead of 4.3 s); XLA's
# own HLO passes, which decide what is computed and in which order, are unchanged
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"


def env(devices: int = 1, **extra: str) -> dict[str, str]:
    """os.environ for a child process with `devices` simulated CPU devices (1: what a
    user's process has) and `extra` variables. The entry points add the config's
    `cpu_xla_flags` themselves (launch/runtime.py)."""
    flags = TEST_XLA_FLAGS
    if devices != 1:
        flags = f"--xla_force_host_platform_device_count={devices} {flags}"
    return dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags, **extra)
