"""Two processes × 4 CPU devices (JAX's multi-process runtime, CPU collectives over
localhost) run `launch.train` exactly like one process × 8 devices.

Each run is 3 steps of tests/launch/multiprocess_config.py on a data × fsdp × tensor
= 2 × 2 × 2 mesh, so every sharded axis spans both processes: prompts are read per
process and joined, rewards are scored per process and joined, host arrays are
gathered, process 0 alone writes metrics, checkpoints go through Orbax's multi-host
path and the final export is gathered. The two-process run's metrics and final
parameters must equal the one-process run's: both compile the same 8-device
program, and only the order of the cross-process sums (gloo's, XLA's) differs, so
metrics agree to fp32 rounding of O(1) values and parameters to the bound the
config's Adam eps puts on a rounding difference (multiprocess_config.py): 1e-5.
A rerun with one more step resumes from the two processes' Orbax checkpoint.
"""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from safetensors.numpy import load_file

from rl.train import logs
from tests import subprocess_env
from tests.launch import processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "launch", "multiprocess_config.py")
TOLERANCE = 1e-5

pytestmark = pytest.mark.slow


def _env(devices: int) -> dict:
    return subprocess_env.env(devices=devices)


def _command(variant: str, workdir) -> list[str]:
    return processes.train_command(f"{CONFIG}:{variant}", workdir)


def one_process(variant: str, workdir, *args: str, devices: int = 8
                ) -> subprocess.CompletedProcess:
    result = subprocess.run(_command(variant, workdir) + list(args), cwd=ROOT,
                            env=_env(devices),
                            capture_output=True, text=True, timeout=600, check=False)
    processes.check(result)
    return result


def two_processes(variant: str, workdir, *args: str) -> list[subprocess.CompletedProcess]:
    return processes.two_processes(f"{CONFIG}:{variant}", workdir, *args)


def test_two_processes_equal_one(tmp_path, two_process_flat):
    """Flat sampling (the tree sampler on this mesh: tests/sampling/test_sharded.py, in
    one process; its device programs and host gathers are the flat sampler's)."""
    variant = "flat"
    single, multi = tmp_path / "one", tmp_path / "two"
    one_process(variant, single)
    shared, (first, second) = two_process_flat  # shared with the reshard test (conftest.py)
    shutil.copytree(shared, multi)

    # process 0 alone writes the console and the files
    assert "model: tiny" in first.stdout and "heldout_accuracy:" in first.stdout
    assert second.stdout == ""
    assert sorted(os.listdir(multi)) == sorted(os.listdir(single))
    assert sorted(os.listdir(multi / "checkpoints")) == ["2", "3"]

    a = logs.strip_timing(logs.read(single / "metrics.jsonl"))
    b = logs.strip_timing(logs.read(multi / "metrics.jsonl"))
    assert [r["step"] for r in a] == [r["step"] for r in b] == [0, 1, 2, 3]
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for key, value in ra.items():
            assert rb[key] == pytest.approx(value, abs=TOLERANCE, rel=0), (ra["step"], key)
    assert any(r.get("reward/mean") for r in a[1:])  # the updates had something to learn
    assert a[-1]["learner/kl"] > 0  # the reference model took part

    pa = load_file(single / "final" / "model.safetensors")
    pb = load_file(multi / "final" / "model.safetensors")
    assert pa.keys() == pb.keys()
    for key in pa:
        np.testing.assert_allclose(pb[key], pa[key], atol=TOLERANCE, rtol=0, err_msg=key)
    with open(multi / "final" / "config.json") as f:
        assert json.load(f)["num_hidden_layers"] == 1
    # resumed from the multi-host checkpoint of step 3
    first, _ = two_processes(variant, multi, "--config.train.steps=4")
    assert "resumed from checkpoint step 3" in first.stdout, first.stdout
    resumed = logs.strip_timing(logs.read(multi / "metrics.jsonl"))
    assert [r["step"] for r in resumed] == [0, 1, 2, 3, 4] and resumed[:4] == b
    assert sorted(os.listdir(multi / "checkpoints")) == ["2", "3", "4"]


def test_explicit_flags_are_checked_before_compute(tmp_path):
    result = subprocess.run(_command("flat", tmp_path / "run") + ["--num_processes=2"],
                            cwd=ROOT, env=_env(4), capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --coordinator, --process_id missing: a multi-process run needs "
        "--coordinator, --num_processes and --process_id together")


def test_two_processes_run_the_asynchronous_schedule_of_one(tmp_path):
    """rollout.mode=async with the sampler on 4 devices of its own (2 per process) and the
    learner on the other 4: one process runs the sampler in a thread, two run the same
    calls in the trainer's thread (`rl.train.pipeline`'s inline pipeline: every process
    must launch its programs in one order). Same versions, same batches: equal to the
    one-process run to the suite's multi-process tolerance (bit for bit in the runs
    measured), and a rerun with one more step resumes from the two processes' checkpoint
    with the batches made ahead."""
    single, multi = tmp_path / "one", tmp_path / "two"
    one_process("async", single)
    two_processes("async", multi)
    a = logs.strip_timing(logs.read(single / "metrics.jsonl"))
    b = logs.strip_timing(logs.read(multi / "metrics.jsonl"))
    assert [r["step"] for r in b] == [0, 1, 2, 3]
    assert [r["rollout/sampler_version"] for r in b[1:]] == [0, 0, 1]  # one version ahead
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for key, value in ra.items():
            assert rb[key] == pytest.approx(value, abs=TOLERANCE, rel=0), (ra["step"], key)
    pa = load_file(single / "final" / "model.safetensors")
    pb = load_file(multi / "final" / "model.safetensors")
    for key in pa:
        np.testing.assert_allclose(pb[key], pa[key], atol=TOLERANCE, rtol=0, err_msg=key)
    first, _ = two_processes("async", multi, "--config.train.steps=4")
    assert "resumed from checkpoint step 3" in first.stdout, first.stdout
    resumed = logs.strip_timing(logs.read(multi / "metrics.jsonl"))
    assert [r["step"] for r in resumed] == [0, 1, 2, 3, 4] and resumed[:4] == b
    assert resumed[4]["rollout/sampler_version"] == 2
