"""launch.plan, the memory planner's command line: a plan printed against an accelerator,
exit 1 with one line naming the largest term when it does not fit, 2 for a bad name."""

import os
import re
import subprocess
import sys

from rl.train import memory_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _launch(*args, timeout=180, platforms="cpu"):
    env = dict(os.environ, JAX_PLATFORMS=platforms)
    env.pop("XLA_FLAGS", None)
    if not platforms:  # as a user's shell starts it
        env.pop("JAX_PLATFORMS")
    return subprocess.run([sys.executable, "-m", "launch.plan", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _bytes(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"GiB": memory_plan.GiB, "MiB": memory_plan.MiB}[unit]


def test_cli_plans_a_7b_model_on_8_devices():
    result = _launch("--config=configs/base.py:qwen2.5-7b", "--devices=8",
                     "--accelerator=h100-80gb", platforms="")
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    # no JAX_PLATFORMS: where libtpu is installed (make test) and no TPU is, JAX starts on
    # the CPU without libtpu's probe errors (launch.common.skip_absent_tpu)
    assert "INVALID_ARGUMENT" not in result.stderr and "TPU_" not in result.stderr, (
        result.stderr[:2000])
    total = re.search(r"^total +([\d.]+ [GM]iB)", result.stdout, re.M)
    cap = re.search(r"^h100-80gb: ([\d.]+ [GM]iB) per device", result.stdout, re.M)
    assert total and cap and "mesh=8x1x1" in result.stdout, result.stdout
    fits = _bytes(total.group(1)) <= _bytes(cap.group(1))
    assert result.returncode == (0 if fits else 1)
    assert result.stdout.rstrip().endswith(": fits" if fits else ": does NOT fit")
    if not fits:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "largest term is" in errors[0], result.stderr


def test_cli_refuses_an_impossible_plan_in_one_line():
    result = _launch("--config=configs/base.py:llama3.1-8b", "--accelerator=tpu-v5e")
    assert result.returncode == 1, result.stderr[-2000:]
    assert "does NOT fit" in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == result.stderr.strip().splitlines()[-1]
    assert re.search(r"the largest term is activations \([\d.]+ GiB\): set model.remat=full",
                     errors[0]), errors[0]
    sharded = _launch("--config=configs/base.py:llama3.1-8b", "--accelerator=tpu-v5e",
                      "--config.model.remat=full", "--config.train.logits_chunk=16")
    assert sharded.returncode == 1
    assert re.search(r"the largest term is optimizer .*raise mesh.fsdp \(now 1\)",
                     sharded.stderr), sharded.stderr


def test_cli_rejects_an_unknown_accelerator():
    result = _launch("--config=configs/base.py:tiny", "--accelerator=tpu-v9")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: unknown accelerator 'tpu-v9'")
