"""Starting `python -m launch.train` as 2 processes × 4 CPU devices (JAX's multi-process
runtime over localhost) for the multi-process tests.

    first, second = two_processes(CONFIG + ":flat", workdir, "--config.train.steps=4")

Each process's stdout and stderr go to files beside the workdir (pipes could fill and
block a process that the test is not reading yet).
"""

import os
import socket
import subprocess
import sys
import time

from tests import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def train_command(config: str, workdir) -> list[str]:
    return [sys.executable, "-m", "launch.train", f"--config={config}", f"--workdir={workdir}"]


def check(result) -> None:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def two_processes(config: str, workdir, *args: str, stop_others: bool = True,
                  timeout: float = 600) -> list[subprocess.CompletedProcess]:
    """Both processes' results, in process order. With `stop_others` a process that fails
    stops the other at once (it would wait in its next collective for the one that died)
    and the results must be successes; without it each process ends by itself (or is
    killed at `timeout`: exit status -9) and nothing is checked."""
    port = free_port()
    logs_dir = workdir.parent / f"{workdir.name}-logs-{port}"
    logs_dir.mkdir()
    files = [(open(logs_dir / f"{i}.out", "w+"), open(logs_dir / f"{i}.err", "w+"))
             for i in range(2)]
    procs = [subprocess.Popen(
        train_command(config, workdir) + [*args, f"--coordinator=localhost:{port}",
                                          "--num_processes=2", f"--process_id={i}"],
        cwd=ROOT, env=subprocess_env.env(devices=4), stdout=out, stderr=err, text=True)
        for i, (out, err) in enumerate(files)]
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        failed = stop_others and any(p.poll() not in (None, 0) for p in procs)
        if failed or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            break
        time.sleep(0.5)
    results = []
    for proc, (out, err) in zip(procs, files, strict=True):
        proc.wait()
        out.seek(0)
        err.seek(0)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out.read(),
                                                   err.read()))
        out.close()
        err.close()
    if stop_others:  # the process that failed first, not the one stopped because of it (-9)
        for result in sorted(results, key=lambda r: r.returncode == -9):
            check(result)
    return results
