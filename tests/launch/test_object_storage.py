"""A workdir on object storage, with real processes and a real local GCS server
(`gcp-storage-emulator`, tests/storage_emulator.py; the processes find it through
STORAGE_EMULATOR_HOST): `launch.train --workdir=gs://bucket/run` killed (SIGKILL) and
rerun resumes from the bucket and ends exactly where an uninterrupted local run ends
(metrics, TensorBoard, final parameters bit for bit); `launch.export` and
`launch.evaluate` read and write the bucket; a workdir that cannot be written fails
before any compute with one `error:` line. `launch.sweep --workdir=gs://...` (its
runs, shared warm start and summary in the bucket) killed and rerun resumes from the
bucket and writes the local sweep's results.

Same run as tests/launch/test_resume.py (tests/rl/fault_config.py on 2 CPU devices),
whose uninterrupted run is reused when both run in one process.
"""

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time

import jax
import pytest
from safetensors.numpy import load_file

import models
from launch.common import load_config_file
from models import paths
from rl import sweeps
from rl.checkpoint import persistent
from rl.train import build
from tests import subprocess_env
from tests.launch.test_analyze import SMALL, check_outputs, write_model
from tests.launch.test_resume import (  # noqa: F401 - `straight` is a fixture
    CONFIG,
    FAULTS,
    ROOT,
    assert_same_run,
    ok,
    straight,
)
from tests.storage_emulator import BUCKET

SWEEP = os.path.join(ROOT, "tests", "launch", "sweep_config.py")

pytestmark = pytest.mark.slow


def launch(gcs, module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT,
                          env=subprocess_env.env(devices=2, STORAGE_EMULATOR_HOST=gcs),
                          capture_output=True, text=True, timeout=600, check=False)


def evaluate(gcs, checkpoint, output):
    ok(launch(gcs, "launch.evaluate", f"--config={CONFIG}", f"--checkpoint={checkpoint}",
              f"--output={output}"))
    return json.loads(paths.read_text(output))


def test_train_killed_resumes_from_the_bucket_exactly_then_export_and_evaluate(
        gcs, straight, tmp_path):  # noqa: F811 - the fixture imported above
    run = f"gs://{BUCKET}/run"
    # synchronous writes before the kill (as tests/launch/test_resume.py: the steps take
    # milliseconds, an asynchronous write may still be in flight); the resumed run
    # writes asynchronously, the default
    killed = launch(gcs, "launch.train", f"--config={CONFIG}", f"--workdir={run}", FAULTS,
                    "--config.fault.kill_at_step=8", "--config.checkpoint.asynchronous=False")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert paths.isdir(f"{run}/checkpoints/6") and not paths.exists(f"{run}/checkpoints/9")
    resumed = ok(launch(gcs, "launch.train", f"--config={CONFIG}", f"--workdir={run}"))
    assert f"resumed from checkpoint step 6 ({run}/checkpoints/6)" in resumed.stdout
    assert f"wrote {run}/metrics.jsonl, {run}/final, {run}/tensorboard" in resumed.stdout
    assert not os.path.exists(os.path.join(ROOT, "gs:"))  # nothing went to a local "gs:"
    with paths.local_copy(run) as local:
        assert sorted(os.listdir(local)) == ["checkpoints", "config.json", "final",
                                             "metrics.jsonl", "tensorboard", "tokenizer"]
        assert_same_run(straight(), local)

    out = f"gs://{BUCKET}/exported"  # the Orbax checkpoint, read from the bucket
    exported = ok(launch(gcs, "launch.export", f"--workdir={run}", f"--out={out}"))
    assert f"wrote {out} (step 12 of {run}/checkpoints)" in exported.stdout
    with paths.local_copy(out) as local:
        ours = load_file(os.path.join(local, "model.safetensors"))
    theirs = load_file(os.path.join(straight(), "final", "model.safetensors"))
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert (ours[key] == theirs[key]).all(), key

    # the exported directory, downloaded by launch.evaluate, evaluates as the local one
    remote = evaluate(gcs, out, f"gs://{BUCKET}/eval.json")
    local = evaluate(gcs, os.path.join(straight(), "final"), str(tmp_path / "eval.json"))
    assert remote == local and "pass@1" in json.dumps(remote)


def test_a_workdir_that_cannot_be_written_fails_before_compute(gcs):
    result = launch(gcs, "launch.train", f"--config={CONFIG}", "--workdir=gs://no-such-bucket/run")
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors and errors[0].startswith(
        "error: cannot write in --workdir gs://no-such-bucket/run: FileNotFoundError"), errors
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "model:" not in result.stdout  # nothing was built


def sweep(gcs, workdir, *args, env=None):
    return subprocess.run([sys.executable, "-m", "launch.sweep", f"--config={SWEEP}:sft",
                           f"--workdir={workdir}", *args], cwd=ROOT,
                          env=env or subprocess_env.env(STORAGE_EMULATOR_HOST=gcs),
                          capture_output=True, text=True, timeout=600, check=False)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def test_a_sweep_in_a_bucket_killed_resumes_from_it_and_ends_as_the_local_sweep(gcs, tmp_path):
    """tests/launch/sweep_config.py:sft (2 runs × 2 steps, one shared 2-step warm start)
    locally (its outputs: results.md, results.csv, curves.png), then into gs://: killed
    (SIGKILL, the sweep and its run) once the second run has a committed checkpoint in
    the bucket, rerun: only the unfinished run again, and the same results. (The suite's
    one killed sweep: a local kill differs only in the path layer, which
    tests/rl/checkpoint/test_object_storage.py and test_resume.py cover.)"""
    local = tmp_path / "local"
    assert "2 runs, 0 finished (skipped), 2 to run" in ok(sweep(gcs, local)).stdout
    results = (local / "results.md").read_text()
    assert "| slow | 1 |" in results and "| fast | 1 |" in results
    assert "| group | runs | learner/entropy | frac_reward_zero_std |" in results
    rows = (local / "results.csv").read_text().splitlines()
    assert rows[0].startswith("name,group,steps,heldout_start") and len(rows) == 3
    assert (local / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    remote = f"gs://{BUCKET}/sweep"
    # the killed sweep's default staging folder (a temporary one) and the warm start's
    # lock go to TMPDIR: here, under tmp_path
    (tmp_path / "tmp").mkdir()
    env = subprocess_env.env(STORAGE_EMULATOR_HOST=gcs, TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.Popen([sys.executable, "-m", "launch.sweep", f"--config={SWEEP}:sft",
                             f"--workdir={remote}"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = f"{remote}/runs/fast-s7/checkpoints/1/{persistent.COMMIT_MARKER}"
    deadline = time.monotonic() + 600
    while not paths.exists(marker) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in [*_children(proc.pid), proc.pid]:
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    assert paths.exists(f"{remote}/runs/slow-s7/DONE")
    assert not paths.exists(f"{remote}/runs/fast-s7/DONE")
    finished = paths.read_text(f"{remote}/runs/slow-s7/metrics.jsonl")

    out = ok(sweep(gcs, remote, f"--staging={tmp_path / 'staging'}")).stdout
    assert "2 runs, 1 finished (skipped), 1 to run" in out and "slow-s7" not in out
    assert paths.read_text(f"{remote}/runs/slow-s7/metrics.jsonl") == finished  # untouched
    assert f"uploaded to {remote}/runs/<name>/train.log" in out
    log = paths.read_text(f"{remote}/runs/fast-s7/train.log")
    assert log == (tmp_path / "staging" / "runs" / "fast-s7" / "train.log").read_text()
    # resumed from its checkpoint in the bucket (or, had it reached its end before the
    # kill, found finished): either way the run is not started over
    assert "resumed from checkpoint step" in log or "is finished" in log, log[-3000:]
    # the warm start was trained once, in the bucket (by the first run; the second
    # loads it, as it does locally), its checkpoints deleted once exported
    assert "reused" not in paths.read_text(f"{remote}/runs/slow-s7/train.log")
    assert f"(reused {local}/warm_starts/" in (local / "runs" / "fast-s7" / "train.log").read_text()
    homes = paths.listdir(f"{remote}/warm_starts")
    assert len(homes) == 1
    assert sorted(paths.listdir(f"{remote}/warm_starts/{homes[0]}")) == [
        "sft", "sft_metrics.jsonl"]

    assert paths.read_text(f"{remote}/results.md") == (local / "results.md").read_text()
    deterministic = ["name", "group", "steps", *sweeps.DETERMINISTIC]
    ours = list(csv.DictReader(io.StringIO(paths.read_text(f"{remote}/results.csv"))))
    theirs = list(csv.DictReader((local / "results.csv").open()))
    assert [{k: r[k] for k in deterministic} for r in ours] == [
        {k: r[k] for k in deterministic} for r in theirs]
    assert all(float(r["wall_s"]) > 0 for r in ours)  # measured, in the bucket's wall.json
    assert paths.read_bytes(f"{remote}/curves.png")[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Sweep wall time:" in paths.read_text(f"{remote}/timing.md")
    assert not os.path.exists(os.path.join(ROOT, "gs:"))  # nothing went to a local "gs:"


def test_an_analysis_reads_models_from_the_bucket_and_writes_into_it_as_locally(gcs, tmp_path):
    """launch.analyze (tests/launch/test_analyze.py's smallest: 3 prompts × 2 samples × 8
    tokens, no sweeps) of two Hugging Face directories in the bucket, its outputs into
    the bucket, against the same analysis of the same directories on local disk."""
    here = tmp_path / BUCKET  # local names ending like the URIs': the reports name both
    base, rl = write_model(here / "base", "qwen2", 0), write_model(here / "rl", "qwen2", 1)
    for name in ("base", "rl"):
        paths.upload(str(here / name), f"gs://{BUCKET}/{name}")
    args = [f"--config={CONFIG}", *SMALL, "--nosweeps"]
    ok(launch(gcs, "launch.analyze", f"--workdir={tmp_path / 'out'}", f"--base={base}",
              f"--rl={rl}", *args))
    out = f"gs://{BUCKET}/analysis"
    result = ok(launch(gcs, "launch.analyze", f"--workdir={out}", f"--base=gs://{BUCKET}/base",
                       f"--rl=gs://{BUCKET}/rl", *args))
    assert f"{out}/tokens.parquet" in result.stdout and f"{out}/report.html" in result.stdout
    theirs = str(tmp_path / "out")
    with paths.local_copy(out) as ours:
        assert sorted(os.listdir(ours)) == sorted(os.listdir(theirs))
        summary = check_outputs(ours, sweeps=False)
        assert summary["models"] == {"base": f"{BUCKET}/base", "rl": f"{BUCKET}/rl"}
        with open(os.path.join(theirs, "summary.json")) as f:
            assert summary == json.load(f)
        import pyarrow.parquet as pq
        assert pq.read_table(os.path.join(ours, "tokens.parquet")).equals(
            pq.read_table(os.path.join(theirs, "tokens.parquet")))
        for name in ("report.html", "distributions.png"):
            with open(os.path.join(ours, name), "rb") as a, \
                    open(os.path.join(theirs, name), "rb") as b:
                assert a.read() == b.read(), name

    missing = launch(gcs, "launch.analyze", f"--workdir={out}2", f"--base=gs://{BUCKET}/base",
                     f"--rl=gs://{BUCKET}/nothing", *args)
    assert missing.returncode == 2, missing.stderr[-3000:]
    assert missing.stderr.strip().splitlines() == [
        f"error: the rl model 'gs://{BUCKET}/nothing' is not a directory"]
    assert not paths.exists(f"{out}2")


def test_a_model_in_a_bucket_is_read_through_the_local_cache(gcs, tmp_path, monkeypatch):
    """model.hf_path=gs://...: the run's tokenizer and initial weights come from one
    download into $RLVR_CACHE (in process: build.resolve and build.init_params)."""
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    local = write_model(tmp_path / "model", "qwen2", 0)
    uri = f"gs://{BUCKET}/model"
    paths.upload(local, uri)
    cfg = load_config_file(CONFIG)
    with cfg.unlocked():
        cfg.model.hf_path = uri
    run = build.resolve(cfg, None)
    got = jax.device_get(build.init_params(run))
    _, want = models.load_pretrained(local, run.model_config.weight_dtype)
    assert jax.tree.all(jax.tree.map(lambda a, b: (a == b).all(), got, jax.device_get(want)))
    copy = paths.cached(uri)
    assert sorted(os.listdir(copy)) == sorted(os.listdir(local))
    assert run.tokenizer_dir == copy  # read from the copy, exported from it
    objects = tmp_path / "cache" / "objects"
    before = os.stat(os.path.join(copy, "model.safetensors")).st_mtime_ns
    assert paths.cached(uri) == copy and len(os.listdir(objects)) == 1  # reused
    assert os.stat(os.path.join(copy, "model.safetensors")).st_mtime_ns == before
    paths.write_text(f"{uri}/notes.txt", "changed")  # the bucket changed: a new copy
    assert paths.cached(uri) != copy and len(os.listdir(objects)) == 2
    with pytest.raises(FileNotFoundError, match=f"no files under gs://{BUCKET}/nothing"):
        paths.cached(f"gs://{BUCKET}/nothing")
    # a download that fails half way (injected after its first object) raises, and leaves
    # neither a copy nor a partial folder for a later call to take as the model
    real = paths.download

    def failing(path, local):
        fs, bare = paths._fs(path)
        first = sorted(fs.find(bare))[0]
        fs.get_file(first, os.path.join(local, os.path.basename(first)))
        raise OSError("connection reset")

    monkeypatch.setattr(paths, "download", failing)
    paths.write_text(f"{uri}/notes.txt", "changed again")
    with pytest.raises(OSError, match="connection reset"):
        paths.cached(uri)
    assert len(os.listdir(objects)) == 2
    monkeypatch.setattr(paths, "download", real)
    assert sorted(os.listdir(paths.cached(uri))) == sorted(os.listdir(local) + ["notes.txt"])
