"""Faults in a two-process run (2 processes × 4 CPU devices, tests/launch/multiprocess_config.py,
3 steps on a 2 × 2 × 2 mesh) are decided by both processes together
(rl.checkpoint.agreement):

* an exception in process 1 alone at step 2 rolls both back; SIGTERM to process 1 alone
  makes both save the same step and exit 0; the rerun resumes and ends bit for bit like
  the uninterrupted run with the same exception, which equals a run that skipped that
  batch (one process × 8 devices, to the two layouts' rounding bound) and the run where
  both processes raised (the kill chain below); `checkpoint.every_s` saves the same
  steps in both;
* SIGKILL of process 1 leaves process 0 exiting with one `error:` line and status 1 by
  itself (not stopped by the test, not aborted by JAX's shutdown timeouts); then SIGKILL
  of both. Each kill comes while an asynchronous checkpoint write is in flight
  (`fault.kill_after_step`); each restart of both skips that checkpoint and resumes from
  the one before, and the run ends bit for bit like the uninterrupted one.

Every run carries `fault.raise_at_step=2`, so the uninterrupted reference is one run.
"""

import os

import numpy as np
import pytest
from safetensors.numpy import load_file

from launch.common import load_config_file
from rl.train import logs
from tests.launch import processes
from tests.rl.checkpoint.test_fault_tolerance import train

CONFIG = os.path.join(processes.ROOT, "tests", "launch", "multiprocess_config.py") + ":flat"
RAISE = ("--config.fault.enabled=True", "--config.fault.raise_at_step=2",
         "--config.checkpoint.snapshot_every=1")  # the rollback restores step 1
EVERY_STEP = "--config.checkpoint.every_s=1e-6"  # a save after each step, by the clock

pytestmark = pytest.mark.slow

_REFERENCE: dict[str, str] = {}


@pytest.fixture
def reference(tmp_path_factory):
    """The uninterrupted run with the exception in process 1 at step 2 (once per session)."""
    if "run" not in _REFERENCE:
        workdir = tmp_path_factory.mktemp("reference") / "run"
        processes.two_processes(CONFIG, workdir, *RAISE, "--config.fault.process=1")
        _REFERENCE["run"] = str(workdir)
    return _REFERENCE["run"]


def assert_same_run(expected, actual):
    """The same metrics (timing and events aside) and final parameters bit for bit."""
    ours = logs.metric_records(logs.read(os.path.join(actual, "metrics.jsonl")))
    theirs = logs.metric_records(logs.read(os.path.join(expected, "metrics.jsonl")))
    assert [r["step"] for r in ours] == [0, 1, 2, 3]
    assert logs.strip_timing(ours) == logs.strip_timing(theirs)
    a = load_file(os.path.join(expected, "final", "model.safetensors"))
    b = load_file(os.path.join(actual, "final", "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_failure_in_one_process_equals_a_run_that_skipped_its_batch(tmp_path, reference):
    """The reference (process 1 alone raised at step 2) against one process × 8 devices
    whose data iterator drops step 2's batch (the second): the same 8-device program on
    different data, so equal to the bound of tests/launch/test_multiprocess.py (1e-5:
    only the order of the cross-process sums differs)."""
    cfg = load_config_file(CONFIG)
    _, _, records, _ = train(cfg, tmp_path / "skipped", skip_batch=1)
    theirs = logs.strip_timing(logs.metric_records(records))
    ours = logs.strip_timing(logs.metric_records(
        logs.read(os.path.join(reference, "metrics.jsonl"))))
    assert [r["step"] for r in ours] == [r["step"] for r in theirs] == [0, 1, 2, 3]
    for a, b in zip(theirs, ours, strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            assert b[key] == pytest.approx(value, abs=1e-5, rel=0), (a["step"], key)
    a = load_file(tmp_path / "skipped" / "final" / "model.safetensors")
    b = load_file(os.path.join(reference, "final", "model.safetensors"))
    for key in a:
        np.testing.assert_allclose(b[key], a[key], atol=1e-5, rtol=0, err_msg=key)


def rollbacks(workdir):
    return [(e["step"], e["restored_step"], e["cause"])
            for e in logs.read(os.path.join(workdir, "metrics.jsonl")) if "event" in e]


def last_line(result) -> str:
    return result.stderr.strip().splitlines()[-1]


def test_one_process_fails_then_is_preempted_and_both_act_together(tmp_path, reference):
    # the reference: process 1 alone raised at step 2; both rolled back to step 1
    cause = "InjectedFault: injected fault at step 2 (fault.raise_at_step) (process 1)"
    assert rollbacks(reference) == [(2, 1, cause)]
    workdir = tmp_path / "run"
    # process 1 alone: SIGTERM and the exception at step 2's first attempt
    stopped = processes.two_processes(CONFIG, workdir, *RAISE, "--config.fault.process=1",
                                      "--config.fault.term_at_step=2", EVERY_STEP)
    path = f"{workdir}/checkpoints/2"
    for result in stopped:  # both: the step that was retried, saved, exit 0
        assert "Traceback" not in result.stderr
        assert f"step 2 failed ({cause}): rolled back to step 1" in result.stderr
        assert last_line(result) == (f"stopped on SIGTERM with a checkpoint of step 2 in "
                                     f"{path}; rerun the same command to resume")
    assert "received SIGTERM" in stopped[1].stderr and "received" not in stopped[0].stderr
    assert sorted(os.listdir(workdir / "checkpoints")) == ["1", "2"]  # every_s: each step

    first, _ = processes.two_processes(CONFIG, workdir, *RAISE, "--config.fault.process=1")
    assert f"resumed from checkpoint step 2 ({path})" in first.stdout
    assert rollbacks(workdir) == [(2, 1, cause)]
    assert_same_run(reference, str(workdir))


def incomplete(result, workdir, step) -> bool:
    """Whether the run skipped `step` as a checkpoint whose write was cut short."""
    return any(line.startswith(f"warning: checkpoint {workdir}/checkpoints/{step}")
               and "is incomplete (the process stopped while writing it)" in line
               for line in result.stderr.splitlines())


def test_sigkill_of_one_then_both_processes_and_restarts_resume(tmp_path, reference):
    workdir = tmp_path / "run"
    # process 1 killed once step 2's asynchronous write began (before that, at step 2's
    # first attempt, it raised: both rolled back); saves after each step (every_s)
    killed = processes.two_processes(CONFIG, workdir, *RAISE, "--config.fault.process=1",
                                     "--config.fault.kill_after_step=2", EVERY_STEP,
                                     stop_others=False, timeout=300)
    assert [r.returncode for r in killed] == [1, -9], killed[0].stderr[-3000:]
    line = last_line(killed[0])
    assert line.startswith("error: process 0 of 2 stopped: a collective failed ("), line
    assert line.endswith(
        "another process of the run died, hung or was stopped, and nothing can be saved "
        f"without it. Restart every process with the same command to resume from the "
        f"newest complete checkpoint in {workdir}/checkpoints"), line
    assert "Traceback" not in killed[0].stderr and "Fatal" not in killed[0].stderr

    # both resume from step 1 (step 2's write was cut short), raise at step 2 (rolled back
    # together) and are killed once step 3's write began
    both = processes.two_processes(CONFIG, workdir, *RAISE, "--config.fault.kill_after_step=3",
                                   EVERY_STEP, stop_others=False, timeout=300)
    assert [r.returncode for r in both] == [-9, -9], both[0].stderr[-3000:]
    assert incomplete(both[0], workdir, 2), both[0].stderr[-3000:]
    assert "resumed from checkpoint step 1" in both[0].stdout
    assert rollbacks(workdir)[-1] == (
        2, 1, "InjectedFault: injected fault at step 2 (fault.raise_at_step) (process 0 "
        "and 1 more)")

    first, _ = processes.two_processes(CONFIG, workdir, *RAISE)
    assert incomplete(first, workdir, 3), first.stderr[-3000:]
    assert "resumed from checkpoint step 2" in first.stdout
    # raised in both processes or in process 1 alone: the same run
    assert_same_run(reference, str(workdir))
