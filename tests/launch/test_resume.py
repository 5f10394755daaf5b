"""Fault tolerance with real processes: `launch.train` killed (SIGKILL), preempted
(SIGTERM) or stopped by repeated failures, then rerun, ends exactly where an
uninterrupted run ends: every logged metric but the wall-clock ones (held-out
evaluations included) and the final parameters bit for bit. Damaged checkpoints
are skipped with a warning, a config that changes the model or algorithm is
refused, a finished run says so, and launch.export / launch.evaluate read the
Orbax checkpoints.

Each process runs tests/rl/fault_config.py (12 steps of a 0.07M-parameter
model, a checkpoint every 3 steps) on 2 CPU devices, so restores are sharded.
"""

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from rl.train import logs
from tests import subprocess_env, tensorboard_events

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "rl", "fault_config.py")
FAULTS = "--config.fault.enabled=True"

pytestmark = pytest.mark.slow


def launch(module, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT,
                          env=subprocess_env.env(devices=2),
                          capture_output=True, text=True, timeout=timeout, check=False)


# the tools variant's warm start, shared by its runs (so a fault hits the RL steps)
WARM_STARTS = tempfile.mkdtemp(prefix="warm_starts")


def train(workdir, *args, variant=""):
    config = f"{CONFIG}:{variant}" if variant else CONFIG
    if variant == "tools":
        args = (f"--config.sft.shared_dir={WARM_STARTS}", *args)
    return launch("launch.train", f"--config={config}", f"--workdir={workdir}", *args)


def ok(result):
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


_STRAIGHT: dict[str, str] = {}


@pytest.fixture
def straight(tmp_path_factory):
    """The uninterrupted run of a variant (one per test process)."""
    def get(variant=""):
        if variant not in _STRAIGHT:
            workdir = str(tmp_path_factory.mktemp(f"straight{variant}") / "run")
            ok(train(workdir, variant=variant))
            _STRAIGHT[variant] = workdir
        return _STRAIGHT[variant]
    return get


def params(workdir):
    from safetensors.numpy import load_file
    return load_file(os.path.join(workdir, "final", "model.safetensors"))


def assert_same_run(expected, actual):
    """Equal metrics (time/ and perf/ aside; events such as rollbacks aside), equal
    final parameters bit for bit, and TensorBoard files with each step once, in order."""
    ours = logs.metric_records(logs.read(os.path.join(actual, "metrics.jsonl")))
    theirs = logs.metric_records(logs.read(os.path.join(expected, "metrics.jsonl")))
    assert [r["step"] for r in ours] == list(range(13))
    assert any("heldout/accuracy" in r for r in ours[1:])
    assert logs.strip_timing(ours) == logs.strip_timing(theirs)
    a, b = params(expected), params(actual)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    scalars = tensorboard_events.scalars(os.path.join(actual, "tensorboard", "train"))
    reference = tensorboard_events.scalars(os.path.join(expected, "tensorboard", "train"))
    for tag, points in scalars.items():
        steps = [s for s, _ in points]
        assert steps == sorted(set(steps)), (tag, steps)  # no duplicate, none out of order
        if not tag.startswith(logs.TIMING_PREFIXES):
            assert points == reference[tag], tag


@pytest.mark.parametrize("variant", ["", "dynamic", "async", "tools"])
def test_sigkill_at_a_random_step_then_resume_is_exact(tmp_path, straight, variant):
    expected = straight(variant)
    k = random.Random(f"kill{variant}").randint(4, 12)  # after the first checkpoint (3)
    workdir = str(tmp_path / "run")
    # synchronous writes: an asynchronous one may still be in flight at the kill (the
    # steps here take milliseconds), and then no checkpoint would be there to resume
    killed = train(workdir, FAULTS, f"--config.fault.kill_at_step={k}",
                   "--config.checkpoint.asynchronous=False", variant=variant)
    assert killed.returncode == -9, killed.stderr[-3000:]
    newest = (k - 1) // 3 * 3
    assert os.path.isdir(os.path.join(workdir, "checkpoints", str(newest)))
    resumed = ok(train(workdir, variant=variant))
    assert f"resumed from checkpoint step {newest} " in resumed.stdout
    assert_same_run(expected, workdir)
    records = logs.metric_records(logs.read(os.path.join(workdir, "metrics.jsonl")))[1:]
    if variant == "dynamic":  # the refilled batches are part of what was resumed
        assert max(r["dynamic/rounds"] for r in records) > 1
    if variant == "tools":  # 2-turn episodes, SeeUPO's 2 updates, the fission buffer
        assert max(r["episode/turns"] for r in records) > 1
        assert max(r["seeupo/turn_updates"] for r in records) == 2
        assert sum(r.get("fission/updated", 0) for r in records) > 0
    if variant == "async":  # batches made ahead, from older versions, were resumed
        assert [r["rollout/sampler_version"] for r in records] == [max(0, n - 3)
                                                                   for n in range(1, 13)]


def test_sigterm_checkpoints_the_current_step_exits_0_and_resumes(tmp_path, straight):
    workdir = str(tmp_path / "run")
    stopped = train(workdir, FAULTS, "--config.fault.term_at_step=7")
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"stopped on SIGTERM with a checkpoint of step 7 in {workdir}/checkpoints/7; rerun "
        "the same command to resume")
    resumed = ok(train(workdir))
    assert f"resumed from checkpoint step 7 ({workdir}/checkpoints/7)" in resumed.stdout
    assert_same_run(straight(), workdir)


def test_repeated_failures_stop_with_a_usable_checkpoint(tmp_path, straight):
    workdir = str(tmp_path / "run")
    failed = train(workdir, FAULTS, "--config.fault.raise_at_step=5", "--config.fault.times=3")
    assert failed.returncode == 1, failed.stderr[-3000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("error: step 5 failed 3 times in a row (checkpoint.max_rollbacks=3; "
                           "last: InjectedFault: injected fault at step 5"), last
    assert f"saved as {workdir}/checkpoints/4" in last
    events = [r for r in logs.read(os.path.join(workdir, "metrics.jsonl")) if "event" in r]
    assert [(e["event"], e["step"]) for e in events] == [("rollback", 5)] * 2
    # the saved state is step 4's, before the failing batch: without the fault the
    # rerun takes that batch again and ends like the uninterrupted run
    resumed = ok(train(workdir))
    assert "resumed from checkpoint step 4" in resumed.stdout
    assert_same_run(straight(), workdir)


def _damage(step_dir):
    """Flips a byte in the middle of every file of a checkpoint step."""
    for root, _, files in os.walk(step_dir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                data = bytearray(f.read())
            if data:
                data[len(data) // 2] ^= 0xFF
                with open(path, "wb") as f:
                    f.write(bytes(data))


def test_a_damaged_newest_checkpoint_is_skipped_and_all_damaged_is_an_error(tmp_path, straight):
    workdir = str(tmp_path / "run")
    sync = "--config.checkpoint.asynchronous=False"  # steps 3, 6, 9 all on disk at the kill
    assert train(workdir, FAULTS, "--config.fault.kill_at_step=11", sync).returncode == -9
    ckpts = os.path.join(workdir, "checkpoints")
    assert sorted(int(n) for n in os.listdir(ckpts) if n.isdigit()) == [3, 6, 9]
    _damage(os.path.join(ckpts, "9"))
    resumed = ok(train(workdir))
    (warning,) = [line for line in resumed.stderr.splitlines() if "is damaged" in line]
    # the cause on one line: the library error's first line, cut at a word boundary ("…")
    found = re.fullmatch(rf"warning: checkpoint {ckpts}/9 is damaged \((\w+): (.+)\); trying "
                         r"step 6", warning)
    assert found, warning
    reason = found.group(2)
    assert len(reason) <= 165 and (reason.endswith(" …") or len(reason) < 160), reason
    assert "resumed from checkpoint step 6" in resumed.stdout
    assert_same_run(straight(), workdir)

    other = str(tmp_path / "other")
    assert train(other, FAULTS, "--config.fault.kill_at_step=8", sync).returncode == -9
    before = logs.read(os.path.join(other, "metrics.jsonl"))
    for step in ("3", "6"):
        _damage(os.path.join(other, "checkpoints", step))
    failed = train(other)
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert failed.stderr.strip().splitlines()[-1].startswith(
        f"error: no usable checkpoint in {other}/checkpoints: step(s) 3, 6 are damaged")
    assert logs.read(os.path.join(other, "metrics.jsonl")) == before  # nothing started over


def test_resuming_with_another_model_or_algorithm_names_the_keys(straight):
    result = train(straight(), "--config.model.num_layers=2", "--config.rl.advantage.name=rloo")
    assert result.returncode == 2, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: cannot resume from {straight()}/checkpoints (step 12): "
                           "the config differs in ")
    assert "model.num_layers: 1 -> 2" in line and "rl.advantage.name: 'grpo' -> 'rloo'" in line


def test_a_finished_run_says_so_and_more_steps_continue_it(tmp_path, straight):
    workdir = str(tmp_path / "run")
    shutil.copytree(straight(), workdir)
    again = ok(train(workdir))
    assert f"{workdir} is finished: its newest checkpoint is step 12" in again.stdout
    assert again.stdout.strip().splitlines()[-1].startswith("heldout_accuracy: before=")
    longer = ok(train(workdir, "--config.train.steps=14"))
    assert "resumed from checkpoint step 12" in longer.stdout
    records = logs.metric_records(logs.read(os.path.join(workdir, "metrics.jsonl")))
    assert [r["step"] for r in records] == list(range(15))
    for tag, points in tensorboard_events.scalars(
            os.path.join(workdir, "tensorboard", "train")).items():
        steps = [s for s, _ in points]
        assert steps == sorted(set(steps)), tag
    fresh = ok(train(workdir, "--fresh"))
    assert "--fresh: deleted checkpoints, metrics.jsonl, tensorboard, final" in fresh.stdout
    assert "resumed" not in fresh.stdout
    assert_same_run(straight(), workdir)


def test_export_and_evaluate_read_the_orbax_checkpoints(tmp_path, straight):
    out = str(tmp_path / "hf")
    result = ok(launch("launch.export", f"--workdir={straight()}", "--step=12", f"--out={out}"))
    assert result.stdout.strip() == f"wrote {out} (step 12 of {straight()}/checkpoints)"
    from safetensors.numpy import load_file
    exported, final = load_file(os.path.join(out, "model.safetensors")), params(straight())
    for key in final:
        np.testing.assert_array_equal(exported[key], final[key])
    evaluated = ok(launch("launch.evaluate", f"--checkpoint={straight()}", "--step=9",
                          "--config.eval.size=6", "--config.eval.n=2", "--config.eval.k=1,2"))
    assert f"checkpoint: step 9 of {straight()}/checkpoints" in evaluated.stdout
    assert "heldout/pass@2:" in evaluated.stdout
    missing = launch("launch.export", f"--workdir={tmp_path}", f"--out={out}")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path} has no Orbax")
