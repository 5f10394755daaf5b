"""A real Google Cloud Storage server for the tests: `gcp-storage-emulator` (pure Python,
in memory; tests/gcs_server.py adds the two GCS behaviours TensorStore needs) started as
a process on a free local port, with one bucket.

    from tests.storage_emulator import gcs  # the fixture: yields the server's URL
    def test_x(gcs): ...   # STORAGE_EMULATOR_HOST is set; gs://bucket/ is empty

Clients find it through STORAGE_EMULATOR_HOST (models/paths.py points gcsfs and
TensorStore at it, without credentials); a child process gets the variable with
`subprocess_env.env(STORAGE_EMULATOR_HOST=url)`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "bucket"
# what models/paths.py sets for an emulator (removed again after the tests)
_DERIVED = ("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "TENSORSTORE_GCS_HTTP_URL",
            "GOOGLE_AUTH_TOKEN_FOR_TESTING")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(log_path: str) -> tuple[subprocess.Popen, str]:
    """(process, URL) of a fresh in-memory server holding an empty bucket `BUCKET`;
    its log (every request, and the tracebacks of connections the client closes
    early) goes to `log_path`."""
    port = _free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.gcs_server", "start",
                                 "--host", "127.0.0.1", "--port", str(port), "--in-memory",
                                 "--default-bucket", BUCKET],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"gcp-storage-emulator did not start: see {log_path}") from None
            time.sleep(0.05)


@pytest.fixture(scope="session")
def gcs(tmp_path_factory):
    """The server's URL, with STORAGE_EMULATOR_HOST pointing at it for this process."""
    proc, url = start(str(tmp_path_factory.mktemp("gcs") / "emulator.log"))
    before = {k: os.environ.get(k) for k in ("STORAGE_EMULATOR_HOST", *_DERIVED)}
    os.environ["STORAGE_EMULATOR_HOST"] = url
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
