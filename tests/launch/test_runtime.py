"""The process's JAX runtime (launch/runtime.py): `cpu_only` and `configure_xla`."""

import logging
import os
import subprocess
import sys

import jax
import pytest

from configs import base
from launch import runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fresh_process(code: str, **env) -> str:
    """stdout of `code` in a new interpreter (no JAX backend started yet)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**clean, **env},
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_configure_xla_adds_the_flags_before_the_backend_starts():
    code = ("import os; from launch import runtime; "
            "print(repr(runtime.configure_xla('--xla_backend_extra_options=-disable-lsr'))); "
            "print(os.environ['XLA_FLAGS']); "
            "print(repr(runtime.configure_xla('--xla_backend_extra_options=-disable-lsr')))")
    # JAX_PLATFORMS=cpu: a CPU-only process also where an accelerator plugin is installed
    # (`make test` installs libtpu for launch.compile)
    added, flags, again = _fresh_process(
        code, XLA_FLAGS="--xla_force_host_platform_device_count=2",
        JAX_PLATFORMS="cpu").splitlines()
    assert added == "'--xla_backend_extra_options=-disable-lsr'"
    assert flags == ("--xla_force_host_platform_device_count=2 "
                     "--xla_backend_extra_options=-disable-lsr")
    assert again == "''"  # already there: nothing added twice


def test_configure_xla_keeps_the_users_value_and_skips_accelerators():
    code = ("import os; from launch import runtime; "
            "print(repr(runtime.configure_xla('--xla_backend_extra_options=-disable-lsr'))); "
            "print(os.environ.get('XLA_FLAGS', ''))")
    mine = "--xla_backend_extra_options=-enable-misched"
    assert _fresh_process(code, XLA_FLAGS=mine).splitlines() == ["''", mine]
    assert _fresh_process(code, JAX_PLATFORMS="cuda").splitlines() == ["''"]


def test_cpu_only_reads_jax_platforms(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert runtime.cpu_only()
    monkeypatch.setenv("JAX_PLATFORMS", "tpu,cpu")
    assert not runtime.cpu_only()


def test_configure_xla_after_the_backend_started_warns_and_adds_nothing(monkeypatch, caplog):
    jax.devices()  # this test process has started its backend
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    with caplog.at_level(logging.WARNING, logger="launch.runtime"):
        assert runtime.configure_xla("--xla_backend_extra_options=-disable-lsr") == ""
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8"
    assert "not applied" in caplog.text


@pytest.mark.parametrize("flags", ["", None])
def test_configure_xla_empty_is_off(flags):
    assert runtime.configure_xla(flags) == ""


def test_the_default_config_carries_the_cpu_flags():
    assert base.get_config().cpu_xla_flags == base.CPU_XLA_FLAGS
