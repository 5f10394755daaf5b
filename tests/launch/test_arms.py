"""launch.sweep --shared_base / launch.arms: a LoRA sweep's arms over one base in one
process give the separate runs' results.

tests/launch/sweep_config.py:lora: three arms (GRPO, Dr.GRPO with another learning rate,
dynamic sampling with two minibatches) over one 2-step warm start, 3 RL steps each.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from rl.train import logs
from tests import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "launch", "sweep_config.py")
RUNS = ("grpo-s7", "dr_grpo-s7", "dynamic-s7")

pytestmark = pytest.mark.slow


def sweep(workdir, *args) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "launch.sweep", f"--config={CONFIG}:lora",
                             f"--workdir={workdir}", *args], cwd=ROOT, env=subprocess_env.env(),
                            capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def records(workdir, name: str) -> list[dict]:
    return logs.metric_records(logs.read(os.path.join(workdir, "runs", name, "metrics.jsonl")))


def test_shared_base_sweep_equals_the_separate_runs(tmp_path):
    sweep(tmp_path / "separate")
    out = sweep(tmp_path / "shared", "--shared_base")
    assert "3 to run in 1 groups over shared bases" in out.stdout
    for name in RUNS:
        alone, shared = records(tmp_path / "separate", name), records(tmp_path / "shared", name)
        assert [r["step"] for r in shared] == [r["step"] for r in alone] == [0, 1, 2, 3]
        for a, s in zip(alone[1:], shared[1:], strict=True):
            # the same samples: every sampled token and reward is the separate run's
            for key in ("generated_tokens", "sampled/rows", "sampled/reward_mean",
                        "dynamic/rounds"):
                assert s[key] == a[key], (name, s["step"], key)
            # the update's numbers: the same tokens, log-probs summed in another batch
            # shape (~5e-6 apart, sampling/test_multi_adapter.py), so within 1e-4
            for key in ("learner/loss", "learner/entropy", "lora/adapter_checksum"):
                np.testing.assert_allclose(s[key], a[key], rtol=1e-4, atol=1e-5,
                                           err_msg=f"{name} step {s['step']} {key}")
            assert s["lora/sampler_checksum"] == s["lora/adapter_checksum"]  # synced
        assert shared[-1]["heldout/accuracy"] == alone[-1]["heldout/accuracy"]
        assert os.path.exists(tmp_path / "shared" / "runs" / name / "DONE")
        assert os.path.isdir(tmp_path / "shared" / "runs" / name / "final" / "adapter")
    # the first sampler call served all three arms; dynamic sampling's extra rounds
    # were served with the others' next calls or alone, never skipped
    first = [records(tmp_path / "shared", name)[1]["arms/batched"] for name in RUNS]
    assert first == [3, 3, 3]
    assert "results.md" in os.listdir(tmp_path / "shared")


def test_runs_that_differ_beyond_the_learner_are_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "launch.arms", f"--sweep={CONFIG}", f"--workdir={tmp_path}",
         "--runs=slow-s7,fast-s7"], cwd=ROOT, env=subprocess_env.env(),
        capture_output=True, text=True, timeout=300, check=False)
    # optim.lr is a learner key: these two may share a base, but not without LoRA
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --shared_base: arms are LoRA adapters over one base: set lora.rank >= 1")
