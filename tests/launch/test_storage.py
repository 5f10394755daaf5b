"""A run whose disk fills up stops with one line naming the cause (exit 1), not pages of
Orbax tracebacks; storage causes are found in any exception's chain."""

import errno
import os
import re
import shutil
import subprocess
import sys

import pytest

from rl.checkpoint import persistent
from tests import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "rl", "fault_config.py")


def _small_tmpfs_available(tmp_path) -> bool:
    """Whether this machine lets an unprivileged user namespace mount a tmpfs (the kernel
    and container allow it on the developers' machines)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                            f"mount -t tmpfs -o size=64k tmpfs {tmp_path}"],
                           capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


@pytest.mark.slow
def test_a_full_disk_stops_the_run_in_one_line(tmp_path):
    """The workdir on a 1.5 MiB tmpfs: a checkpoint of this model (about 1 MB of params
    and AdamW state) fits once at most, next to the logs and tokenizer."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if not _small_tmpfs_available(mount):
        pytest.skip("no unprivileged user namespaces here to mount a small tmpfs")
    run = (f"mount -t tmpfs -o size=1536k tmpfs {mount} && exec {sys.executable} -m "
           f"launch.train --config={CONFIG} --workdir={mount}/run --config.train.steps=3 "
           "--config.checkpoint.every=1 --config.checkpoint.keep=3 --config.train.plot=False")
    env = subprocess_env.env()
    result = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                             run], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600, check=False)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and len(result.stderr.splitlines()) <= 3, result.stderr
    assert re.match(rf"error: cannot write checkpoint step \d+ in {mount}/run/checkpoints: it "
                    r"needs about [\d.]+ MiB and the disk has [\d.]+ MiB free", errors[0])
    assert "make room and rerun to resume" in errors[0]


def test_storage_causes_are_found_in_the_chain():
    full = OSError(errno.ENOSPC, "No space left on device")
    assert persistent.storage_problem(full) == "no space left on device"
    try:  # a library error raised while handling the OS error
        try:
            raise full
        except OSError as e:
            raise RuntimeError("commit failed") from e
    except RuntimeError as e:
        assert persistent.storage_problem(e) == "no space left on device"
    # TensorStore's text (an OCDBT write, as Orbax raises it)
    tensorstore = ValueError('RESOURCE_EXHAUSTED: Error writing "params/0" in OCDBT database: '
                             "Failed to write 64992 bytes to file 5: No space left on device "
                             "[os_error_code='28']")
    assert persistent.storage_problem(tensorstore) == "no space left on device"
    assert persistent.storage_problem(ValueError("shapes differ")) is None


def test_one_line_keeps_the_first_line_and_whole_words():
    long = "word " * 100 + "\nsecond line"
    text = persistent.one_line(ValueError(long), limit=50)
    assert text.startswith("ValueError: word word") and text.endswith(" …")
    assert "second" not in text and "wor …" not in text and len(text) < 70
    assert persistent.one_line(KeyError()) == "KeyError"
