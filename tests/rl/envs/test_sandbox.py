"""The Python sandbox (`rl.envs.sandbox`): each kind of bad tool code ends as a result
the policy can read, the trainer's process carries on, and nothing escapes the scratch
directory. Every case runs in a real confined child (Landlock, seccomp, rlimits)."""

import os
import uuid

import pytest

from rl.envs.sandbox import Limits, Result, Sandbox, SandboxError

pytestmark = pytest.mark.slow  # the wall-limit case waits its 8 s

# A CPU-bound case must hit its 1 s CPU limit before the 8 s wall limit: it needs an
# eighth of a core, which holds on a loaded 2-core machine running the suite's 2 workers.
LIMITS = Limits(wall_s=8.0, cpu_s=1, memory_mb=256, output_bytes=2048, file_mb=1)
OUTSIDE = f"/tmp/rlvr-sandbox-escape-{uuid.uuid4().hex}"

# name: (code, status, text the observation ends with or contains)
CASES = {
    "prints": ("print(6 * 7)", "ok", "42\n"),
    "infinite loop": ("while True:\n    pass", "cpu_limit", "1 s of CPU time"),
    "sleeps past the wall limit": ("import time\ntime.sleep(60)", "timeout",
                                   "8 s of wall time"),
    "closes its output and sleeps": ("import os, time\nos.close(1)\nos.close(2)\n"
                                     "time.sleep(60)", "timeout", "8 s of wall time"),
    "fork bomb": ("import os\nwhile True:\n    os.fork()", "error",
                  "PermissionError: [Errno 1] Operation not permitted"),
    # C's fork, below Python: the kernel refuses (seccomp), fork returns -1
    "fork from C": ("import ctypes\nprint(ctypes.CDLL(None).fork())", "ok", "-1\n"),
    "subprocess": ("import subprocess\nsubprocess.run(['true'])", "error",
                   "PermissionError: [Errno 1] Operation not permitted"),
    "10 GB allocation": ("x = bytearray(10 * 2**30)", "error", "MemoryError"),
    "socket": ("import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)",
               "error", "PermissionError: [Errno 1] Operation not permitted"),
    "reads /etc/passwd": ("print(open('/etc/passwd').read())", "error",
                          "Permission denied: '/etc/passwd'"),
    "lists the project": (f"import os\nprint(os.listdir({os.getcwd()!r}))", "error",
                          "Permission denied"),
    "writes outside scratch": (f"open({OUTSIDE!r}, 'w').write('x')", "error",
                               "Permission denied"),
    "changes a file's mode": ("import os\nos.chmod('/tmp', 0o700)", "error",
                              "Operation not permitted: '/tmp'"),
    "kills its parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
                         "error", "PermissionError: [Errno 1] Operation not permitted"),
    "kills every process": ("import os, signal\nos.kill(-1, signal.SIGKILL)", "error",
                            "PermissionError: [Errno 1] Operation not permitted"),
    "raises its CPU limit": ("import resource\nresource.setrlimit(resource.RLIMIT_CPU, "
                             "(100, 100))", "error", "not allowed to raise maximum limit"),
    "crashes the interpreter": ("import ctypes\nctypes.string_at(0)", "crash", "SIGSEGV"),
    "aborts": ("import os\nos.abort()", "crash", "SIGABRT"),
    "floods stdout": ("while True:\n    print('x' * 100)", "output_limit",
                      "stopped after 2048 bytes of output"),
    "floods stderr": ("import sys\nwhile True:\n    sys.stderr.write('y' * 100)",
                      "output_limit", "stopped after 2048 bytes of output"),
    "writes a big file": ("open('big', 'wb').write(b'0' * (2 << 20))", "error",
                          "OSError: [Errno 27] File too large"),  # Python ignores SIGXFSZ
    "uses its scratch directory": ("open('f.txt', 'w').write('hi')\nprint(open('f.txt').read())",
                                   "ok", "hi\n"),
    "starts a thread": ("import threading\nt = threading.Thread(target=print, args=('t',))\n"
                        "t.start()\nt.join()", "ok", "t\n"),
    "imports the standard library": ("import json, math, fractions, decimal, re\n"
                                     "print(json.dumps(math.comb(10, 3)))", "ok", "120\n"),
    "raises": ("print('before')\nraise ValueError('bad input')", "error",
               "before\nValueError: bad input"),
    "exits with a status": ("import sys\nsys.exit(3)", "error", "SystemExit: exit status 3"),
    "fakes a confinement failure": ("import sys\nsys.stderr.write('sandbox: no\\n')\n"
                                    "sys.exit(71)", "error", "exit status 71"),
}


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    return Sandbox(LIMITS, scratch_root=str(tmp_path_factory.mktemp("scratch")))


@pytest.fixture(scope="module")
def results(box):
    return dict(zip(CASES, box.run_many([code for code, _, _ in CASES.values()]), strict=True))


@pytest.mark.parametrize("name", list(CASES))
def test_bad_code_gives_the_policy_an_error_and_the_trainer_carries_on(box, results, name):
    _, status, text = CASES[name]
    result = results[name]
    assert result.status == status, (name, result)
    observation = result.observation()
    assert observation.endswith(text) if status == "ok" else text in observation, (
        name, observation)
    assert len(result.stdout.encode()) <= LIMITS.output_bytes
    assert box.run("print(1)").stdout == "1\n"  # this process, and the sandbox, go on


def test_nothing_is_left_outside_or_in_scratch(box, results):
    assert not os.path.exists(OUTSIDE)
    assert os.listdir(box.scratch_root) == []  # every run's scratch directory is removed


def test_the_same_code_prints_the_same_text(box):
    code = "print(hash('abc'), sorted({'x', 'y', 'z'}), list({'b': 1, 'a': 2}))"
    first, second = box.run(code), box.run(code)
    assert first.status == "ok" and first.stdout == second.stdout


def test_run_many_keeps_the_order(box):
    results = box.run_many([f"print({i})" for i in range(5)], parallel=3)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(5)]
    assert box.run_many([]) == []


def test_the_observation_joins_output_and_error():
    assert Result("error", "out", "ValueError: x", 0.1).observation() == "out\nValueError: x"
    assert Result("ok", "out\n", "", 0.1).observation() == "out\n"


@pytest.mark.parametrize("field,value,message", [
    ("wall_s", 0, "sandbox limit wall_s must be > 0, got 0"),
    ("memory_mb", 32, "sandbox limit memory_mb must be >= 64"),
    ("open_files", 4, "sandbox limit open_files must be >= 16, got 4"),
])
def test_bad_limits_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        Limits(**{field: value})


def test_a_missing_scratch_root_is_refused(tmp_path):
    with pytest.raises(SandboxError, match="is not a directory"):
        Sandbox(LIMITS, scratch_root=str(tmp_path / "missing"))
