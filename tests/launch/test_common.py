"""Entry-point flag handling: bad config flags fail in one line, before compute."""

import os
import subprocess
import sys

import pytest

from tests import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _demo(*args, timeout=300):
    env = subprocess_env.env()
    return subprocess.run([sys.executable, "-m", "launch.smoke", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args,message", [
    (["--config.model.foo=1"], "error: config key 'model.foo' does not exist (model has: "),
    (["--config=configs/base.py:small", "--config.mesh.rules.embedx=fsdp"],
     "error: config key 'mesh.rules.embedx' does not exist"),
    (["--config.nope.deeper=1"], "error: config key 'nope.deeper' does not exist (the config"),
    (["--config.model.num_layers=four"], "error: flag --config.model.num_layers=four"),
    (["--config=configs/missing.py"], "error: config file configs/missing.py does not exist"),
])
def test_bad_config_flags_fail_in_one_line(args, message):
    result = _demo(*args, timeout=120)
    assert result.returncode == 2
    lines = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr
    assert "Traceback" not in result.stderr
    assert "model:" not in result.stdout  # nothing ran


@pytest.mark.slow
def test_smoke_runs_end_to_end():
    result = _demo("--config.model.num_layers=2", "--new_tokens=4", "--batch=2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "hugging face export round trip: exact" in result.stdout
    assert result.stdout.strip().endswith("smoke: ok")


@pytest.mark.parametrize("env,found", [
    ({}, None),
    ({"SLURM_NTASKS": "1", "SLURM_STEP_ID": "0"}, None),      # one task: one process
    ({"SLURM_NTASKS": "4"}, None),                            # sbatch's shell, not a step
    ({"SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"}, "SLURM"),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, "Open MPI"),
    ({"TPU_WORKER_HOSTNAMES": "w-0"}, None),
    ({"TPU_WORKER_HOSTNAMES": "w-0,w-1"}, "TPU pod"),
    ({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"}, "JAX_COORDINATOR_ADDRESS"),
    ({"RLVR_DISTRIBUTED": "1"}, "RLVR_DISTRIBUTED"),
])
def test_cluster_environment_is_read_from_the_launchers_variables(env, found):
    from launch.distributed import cluster_environment
    assert cluster_environment(env) == found
