"""A workdir on object storage, with real processes and a real local GCS server
(`gcp-storage-emulator`, tests/storage_emulator.py; the processes find it through
STORAGE_EMULATOR_HOST): `launch.train --workdir=gs://bucket/run` killed (SIGKILL) and
rerun resumes from the bucket and ends exactly where an uninterrupted local run ends
(metrics, TensorBoard, final parameters bit for bit); `launch.export` and
`launch.evaluate` read and write the bucket; a workdir that cannot be written, and
what needs a local folder (sft.shared_dir, launch.sweep's workdir), fail before any
compute with one `error:` line.

Same run as tests/launch/test_resume.py (tests/rl/fault_config.py on 2 CPU devices),
whose uninterrupted run is reused when both run in one process.
"""

import json
import os
import subprocess
import sys

import pytest
from safetensors.numpy import load_file

from models import paths
from tests import subprocess_env
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


@pytest.mark.parametrize("module,args,message", [
    ("launch.train", [f"--config={CONFIG}", f"--workdir=gs://{BUCKET}/shared",
                      f"--config.sft.shared_dir=gs://{BUCKET}/warm_starts"],
     f"sft.shared_dir=gs://{BUCKET}/warm_starts is on object storage, which has no file locks"),
    ("launch.sweep", [f"--config={SWEEP}", f"--workdir=gs://{BUCKET}/sweep"],
     f"--workdir gs://{BUCKET}/sweep: a sweep's workdir must be a local (or shared-disk) "
     "folder"),
])
def test_what_needs_a_local_folder_says_so_before_compute(gcs, module, args, message):
    """Shared warm starts need file locks, a sweep's runs need pipes to their logs."""
    result = launch(gcs, module, *args)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {message}"), result.stderr
    assert "model:" not in result.stdout
