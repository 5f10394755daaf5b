"""launch.sweep: runs a sweep file's runs, emits launch commands.

Each run is 2 steps of tests/launch/sweep_config.py (the suite's very small model) in its
own `launch.train` process. A sweep killed and rerun (only its unfinished run again, the
same results): tests/launch/test_object_storage.py, in a bucket.
"""

import json
import os
import shlex
import subprocess
import sys

import pytest

import configs
from rl import sweeps
from rl.train import logs
from tests import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "launch", "sweep_config.py")

pytestmark = pytest.mark.slow


def _env() -> dict:
    return subprocess_env.env()


def sweep(workdir, *args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launch.sweep", f"--config={CONFIG}",
                           f"--workdir={workdir}", *args], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)


def ok(result):
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def test_dry_run_prints_one_runnable_command_per_run(tmp_path):
    result = ok(sweep(tmp_path / "sweep", "--dry_run"))
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("python -m launch.train ") for line in lines)
    # for another machine: its own `python`, the paths as given on the command line
    assert not any(sys.executable in line or os.getcwd() + "/.venv" in line for line in lines)
    assert "--config.optim.lr=0.003" in lines[1] and "--config.seed=7" in lines[1]
    shared = f"--config.sft.shared_dir={tmp_path / 'sweep' / 'warm_starts'}"
    assert all(shared in line and "--config.checkpoint.keep=1" in line for line in lines)
    assert not (tmp_path / "sweep").exists()  # nothing ran, nothing was written
    run = subprocess.run([sys.executable, *shlex.split(lines[1])[1:]], cwd=ROOT, env=_env(),
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "heldout_accuracy:" in run.stdout
    records = logs.metric_records(logs.read(tmp_path / "sweep" / "runs" / "fast-s7" /
                                            "metrics.jsonl"))
    assert [r["step"] for r in records] == [0, 1, 2]


@pytest.mark.parametrize("runs,message", [
    ([], "non-empty list"),
    ([{"name": "a"}, {"name": "a"}], "two runs are named 'a'"),
    ([{"name": "a b"}], "may only hold letters"),
    ([{"optim.lr": 1.0}], "string 'name'"),
])
def test_malformed_sweeps_are_named(runs, message):
    with pytest.raises(sweeps.SweepError, match=message):
        sweeps.check(runs)


def test_an_unknown_override_fails_in_one_line_before_any_run(tmp_path):
    bad = tmp_path / "bad_sweep.py"
    bad.write_text(open(CONFIG).read().replace('"optim.lr": 3e-3', '"optim.lrr": 3e-3'))
    result = subprocess.run([sys.executable, "-m", "launch.sweep", f"--config={bad}",
                             f"--workdir={tmp_path / 'w'}"], cwd=ROOT, env=_env(),
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: run 'fast-s7': config key 'optim.lrr' does not exist (optim has: b1, b2, "
        "end_lr_fraction, eps, grad_clip, lr, schedule, warmup_steps, weight_decay)")
    assert not (tmp_path / "w").exists()


def test_run_numbers_from_metrics():
    records = [{"step": 0, "heldout/accuracy": 0.1},
               {"step": 1, "reward/mean": 0.5, "generated_tokens": 100, "sampled/rows": 8,
                "time/step": 2.0},
               {"step": 1, "event": "rollback"},
               {"step": 2, "reward/mean": 0.7, "generated_tokens": 100, "sampled/rows": 8,
                "tree/shared_token_frac": 0.25, "time/step": 1.0, "time/eval": 0.5,
                "heldout/accuracy": 0.6}]
    got = sweeps.run_numbers(records, target=0.5)
    assert got == {"steps": 2, "heldout_start": 0.1, "heldout_final": 0.6,
                   "heldout_gain": pytest.approx(0.5), "heldout_best": 0.6,
                   "reward_last10": pytest.approx(0.6), "steps_to_target": 2,
                   "tokens_to_target": 175.0, "step_to_target_s": 3.5, "rollout_tokens": 175.0,
                   "rollouts": 16, "step_s": 3.5}
    assert sweeps.run_numbers(records, target=0.9)["steps_to_target"] is None
    # LATR's shared prefixes count once too
    latr = [{**r, "latr/shared_token_frac": r.pop("tree/shared_token_frac")}
            if "tree/shared_token_frac" in r else r for r in map(dict, records)]
    assert sweeps.run_numbers(latr, target=0.5)["rollout_tokens"] == 175.0
    # METRICS: the mean over the RL steps that logged the key; None when none did
    got = sweeps.run_numbers(records, target=0.5, metrics=("reward/mean", "learner/nope"))
    assert got["reward/mean"] == pytest.approx(0.6) and got["learner/nope"] is None


def test_metrics_table_and_panels(tmp_path):
    runs = configs.with_seeds([{"name": "a"}, {"name": "b"}], seeds=[0, 1])
    for i, run in enumerate(runs):
        directory = tmp_path / "runs" / run["name"]
        directory.mkdir(parents=True)
        lines = [{"step": 0, "heldout/accuracy": 0.1},
                 {"step": 1, "reward/mean": 0.5, "learner/entropy": 1.0 + i},
                 {"step": 2, "reward/mean": 0.5, "learner/entropy": 2.0 + i,
                  "heldout/accuracy": 0.3}]
        (directory / "metrics.jsonl").write_text("".join(
            json.dumps(r) + "\n" for r in lines))
        (directory / "DONE").write_text("")
    written = sweeps.summarize(str(tmp_path), runs, target=0.5,
                               metrics=("learner/entropy", "learner/typo"))
    results = (tmp_path / "results.md").read_text()
    # run means 1.5, 2.5 (a) and 3.5, 4.5 (b): group means 2.0 and 4.0, sample std √0.5
    assert "| a | 2 | 2.0000 ± 0.7071 | – |" in results
    assert "| b | 2 | 4.0000 ± 0.7071 | – |" in results
    assert results.rstrip().endswith("No run logged: learner/typo.")
    assert "learner/entropy" in (tmp_path / "results.csv").read_text().splitlines()[0]
    assert str(tmp_path / "curves.png") in written


@pytest.mark.parametrize("metrics", ['"learner/entropy"', "(1,)", '("",)'])
def test_bad_metrics_are_named(tmp_path, metrics):
    bad = tmp_path / "bad_sweep.py"
    bad.write_text(open(CONFIG).read().replace(
        'METRICS = ("learner/entropy", "frac_reward_zero_std")', f"METRICS = {metrics}"))
    with pytest.raises(sweeps.SweepError, match="METRICS must be a tuple of metric names"):
        sweeps.load(str(bad))
