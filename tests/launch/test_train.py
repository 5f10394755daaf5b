"""launch.train / launch.sft / launch.evaluate: bad input fails in one line, before compute."""

import os
import signal
import subprocess
import sys

import pytest

from tests import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _launch(module, *args, timeout=120):
    env = subprocess_env.env()
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("module", ["launch.train", "launch.sft"])
@pytest.mark.parametrize("args,message", [
    (["--config.train.stepz=3"], "error: config key 'train.stepz' does not exist (train has: "),
    (["--config.rl.reward.name=sudoku"], "error: unknown verifier 'sudoku'"),
    (["--config.data.source=jsonl", "--config.data.path=/nonexistent/prompts.jsonl",
      "--config.rl.reward.name=math"], "error: data file /nonexistent/prompts.jsonl does not exist"),
    (["--config=configs/demo.py:grpo,sarsa"],
     ("error: cannot load config configs/demo.py:grpo,sarsa: config argument 'sarsa' "
      "is neither")),
    (["--config=configs"], "error: config file configs is a directory (expected a .py file)"),
    # the flat sampler's rule, checked before the warm start (it used to die after it)
    (["--config.sampling.segment_len=12"],
     "error: sampling.segment_len (12) must be a positive multiple of sampling.page_size (16)"),
    # a verifier that cannot read the task's references
    (["--config.rl.reward.name=math"],
     "error: rl.reward.name=math cannot score the references of data.task.name=countdown: "
     "math reference must be a non-empty str"),
])
def test_bad_input_fails_in_one_line_before_compute(tmp_path, module, args, message):
    result = _launch(module, f"--workdir={tmp_path / 'run'}", *args)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr
    assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "run" / "metrics.jsonl")
    assert not os.path.exists(tmp_path / "run" / "sft_metrics.jsonl")


@pytest.mark.parametrize("module,args,message", [
    ("launch.train", ["--config.optim.lr=0"], "error: optim.lr must be > 0, got 0"),
    ("launch.train", ["--config.optim.schedule=step"], "error: unknown optim.schedule 'step'"),
    ("launch.sft", ["--config.sft.lr=-1"], "error: sft.lr must be > 0, got -1"),
    ("launch.sft", ["--config.data.source=jsonl", f"--config.data.path={__file__}",
                    "--config.rl.reward.name=math"], "error: data.source is jsonl but"),
])
def test_bad_values_fail_in_one_line_before_compute(tmp_path, module, args, message):
    result = _launch(module, f"--workdir={tmp_path / 'run'}", *args)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def test_a_workdir_that_is_a_file_or_cannot_be_written_fails_in_one_line(tmp_path):
    path = tmp_path / "file"
    path.write_text("")
    for workdir, message in ((path, f"error: --workdir {path} exists and is not a directory"),
                             (path / "run", f"error: cannot write in --workdir {path / 'run'}: "
                                            "Not a directory")):
        result = _launch("launch.train", f"--workdir={workdir}")
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [message], result.stderr


@pytest.mark.parametrize("module", ["launch.train", "launch.sft", "launch.evaluate",
                                    "launch.demo"])
def test_help_lists_the_flags(module):
    result = _launch(module, "--help")  # absl's --help exits with status 1
    assert "--config:" in result.stdout and "configs/base.py" in result.stdout
    if module != "launch.evaluate":
        assert "--workdir:" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_a_signal_checkpoints_the_warm_start_and_a_rerun_resumes_it(tmp_path, sig, code):
    """The demo config, signalled from outside during its supervised warm start: the
    step ends, a checkpoint is written, exit status 0 (SIGTERM) / 130 (Ctrl-C)."""
    env = subprocess_env.env()
    logs_off = ["--config.train.tensorboard=False", "--config.train.plot=False"]
    small_eval = ["--config.eval.size=4", "--config.eval.n=2", "--config.eval.k=1,2",
                  "--config.train.eval_every=0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.train", f"--workdir={tmp_path}", *logs_off, *small_eval],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # signal once the warm start is inside its steps
            if line.startswith("sft "):
                break
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == code, err[-2000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    name = signal.Signals(sig).name
    assert last.startswith(f"stopped on {name} with a checkpoint of step "), last
    step = int(last.split(" of step ")[1].split()[0])
    assert os.path.isdir(tmp_path / "sft_checkpoints" / str(step))
    if sig == signal.SIGTERM:  # resume: one more warm-start step, then one RL step
        again = _launch("launch.train", f"--workdir={tmp_path}", *logs_off, *small_eval,
                        f"--config.sft.steps={step + 1}", "--config.train.steps=1",
                        timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"resumed from checkpoint step {step} " in again.stdout


def test_evaluate_rejects_a_directory_without_a_model(tmp_path):
    result = _launch("launch.evaluate", f"--checkpoint={tmp_path}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: checkpoint {tmp_path}")


@pytest.mark.slow
def test_sft_then_train_then_evaluate_end_to_end(tmp_path):
    small = ["--config.model.num_layers=1", "--config.model.hidden_size=64",
             "--config.model.mlp_dim=128", "--config.eval.size=4", "--config.eval.n=2",
             "--config.eval.k=1,2", "--config.data.heldout_size=4"]
    sft = _launch("launch.sft", f"--workdir={tmp_path / 'sft'}", "--config.sft.steps=2",
                  "--config.sft.batch_size=8", *small, timeout=600)
    assert sft.returncode == 0, sft.stderr[-3000:]
    assert sft.stdout.strip().splitlines()[-1].startswith("heldout_accuracy: before=")
    train = _launch("launch.train", f"--workdir={tmp_path / 'rl'}", "--config.train.steps=2",
                    "--config.train.prompts_per_step=1", "--config.train.eval_every=0",
                    f"--config.model.hf_path={tmp_path / 'sft' / 'sft'}", *small, timeout=600)
    assert train.returncode == 0, train.stderr[-3000:]
    assert train.stdout.strip().splitlines()[-1].startswith("heldout_accuracy: before=")
    assert os.path.exists(tmp_path / "rl" / "progress.png")
    ev = _launch("launch.evaluate", f"--checkpoint={tmp_path / 'rl'}", "--config.eval.size=4",
                 "--config.eval.n=2", "--config.eval.k=1,2", "--config.data.heldout_size=4",
                 f"--output={tmp_path / 'eval.json'}", timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert "heldout/pass@2:" in ev.stdout and os.path.exists(tmp_path / "eval.json")


def test_a_run_that_cannot_fit_prints_its_plan_and_is_refused_before_compute(tmp_path):
    """An 8B model in fp32 on one CPU device: the plan is printed, then one line names the
    largest term and the setting that shrinks it (exit 2, no parameters built)."""
    result = _launch("launch.train", "--config=configs/base.py:llama3.1-8b",
                     f"--workdir={tmp_path / 'run'}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "does NOT fit" in result.stdout and "activations" in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the step needs ") and "the largest term is activations" in last
    assert "model.remat=full" in last and "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "run" / "config.json")
