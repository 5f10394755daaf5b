"""The path layer (models/paths.py) on a local folder and on a real GCS server
(`gcp-storage-emulator`, tests/storage_emulator.py): the same calls, the same results;
object storage's differences (no directories, no appends) are explicit."""

import os

import pytest

from models import paths
from tests.storage_emulator import BUCKET


def _exercise(root: str) -> None:
    """The calls every writer and reader of the project makes, on `root`."""
    run = paths.join(root, "run")
    paths.makedirs(run)
    paths.write_text(paths.join(run, "config.json"), '{"a": 1}', atomic=True)
    paths.write_bytes(paths.join(run, "blob"), b"\x00\x01\xff")
    assert paths.read_text(paths.join(run, "config.json")) == '{"a": 1}'
    assert paths.read_bytes(paths.join(run, "blob")) == b"\x00\x01\xff"
    assert paths.isfile(paths.join(run, "blob")) and not paths.isdir(paths.join(run, "blob"))
    assert paths.isdir(run) and not paths.exists(paths.join(run, "absent"))
    assert sorted(paths.listdir(run)) == ["blob", "config.json"]
    with pytest.raises(FileNotFoundError):
        paths.listdir(paths.join(run, "absent"))

    paths.write_text(paths.join(run, "new.tmp"), "second")
    paths.replace(paths.join(run, "new.tmp"), paths.join(run, "config.json"))
    assert paths.read_text(paths.join(run, "config.json")) == "second"
    assert not paths.exists(paths.join(run, "new.tmp"))

    export = paths.join(run, "final")
    with paths.staged(export) as local:  # a local folder whatever `export` is
        os.makedirs(os.path.join(local, "sub"))
        with open(os.path.join(local, "sub", "x.txt"), "w") as f:
            f.write("x")
        with open(os.path.join(local, "y.bin"), "wb") as f:
            f.write(b"y" * 70000)
    assert paths.read_text(paths.join(export, "sub", "x.txt")) == "x"
    with paths.local_copy(export) as local:
        with open(os.path.join(local, "y.bin"), "rb") as f:
            assert f.read() == b"y" * 70000
        assert sorted(os.listdir(local)) == ["sub", "y.bin"]

    paths.remove(paths.join(run, "blob"))
    assert not paths.exists(paths.join(run, "blob"))
    paths.rmtree(export)
    assert not paths.exists(export)
    paths.rmtree(export)  # nothing there: no error
    assert paths.listdir(run) == ["config.json"]


def test_local_paths(tmp_path):
    _exercise(str(tmp_path))
    assert paths.absolute("a/b") == os.path.abspath("a/b")
    assert paths.join(str(tmp_path), "x") == os.path.join(str(tmp_path), "x")
    with paths.open(os.path.join(tmp_path, "log"), "a") as f:  # appends stay local
        f.write("1\n")
    with paths.open(os.path.join(tmp_path, "log"), "a") as f:
        f.write("2\n")
    assert paths.read_text(os.path.join(tmp_path, "log")) == "1\n2\n"


def test_gcs_paths(gcs):
    root = f"gs://{BUCKET}/paths"
    _exercise(root)
    assert paths.is_remote(root) and not paths.is_remote("/gs/x")
    assert paths.absolute(root + "/") == root and paths.dirname(root) == f"gs://{BUCKET}"
    assert paths.basename(root + "/run/") == "run"
    with pytest.raises(ValueError, match="object storage has no appends"):
        paths.open(paths.join(root, "log"), "a")
    paths.makedirs(paths.join(root, "empty"))  # creates nothing: no object, no folder
    assert not paths.exists(paths.join(root, "empty"))
    with pytest.raises(FileNotFoundError):  # the bucket does not exist
        paths.write_text("gs://no-such-bucket/run/x", "x")
