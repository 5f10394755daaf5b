"""Optional packages: a missing one fails with one line naming its extra and the pip command."""

import sys

import pytest

from models import extras
from models.extras import MissingExtra


def _hide(monkeypatch, package):
    """Makes `package` (and its submodules) unimportable for this test."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, package, None)


def _assert_names(error, extra, package, feature):
    text = str(error)
    assert "\n" not in text
    assert text.startswith(f"{feature} needs {package}, which is not installed")
    assert f"pip install 'rlvr-jax[{extra}]'" in text
    assert f"pip install -e '.[{extra}]'" in text


def test_require_returns_the_module():
    import json

    assert extras.require("json", "x", "y") is json
    assert extras.require("os.path", "x", "y") is sys.modules["os.path"]


def test_require_missing_names_extra_and_pip_command(monkeypatch):
    _hide(monkeypatch, "pyarrow")
    with pytest.raises(MissingExtra) as e:
        extras.require("pyarrow.parquet", "parquet", "data.source=parquet")
    assert str(e.value) == ("data.source=parquet needs pyarrow, which is not installed: "
                            "pip install 'rlvr-jax[parquet]' (or pip install -e '.[parquet]' "
                            "in a clone)")
    assert isinstance(e.value, ImportError)


def test_require_never_installed_package():
    with pytest.raises(MissingExtra, match=r"^feature X needs no_such_package_xyz, which is not "
                       r"installed: pip install 'rlvr-jax\[extra_y\]'"):
        extras.require("no_such_package_xyz.sub", "extra_y", "feature X")


def test_require_broken_install_says_so(monkeypatch, tmp_path):
    """A package that is there but fails to import is not reported as 'not installed'."""
    (tmp_path / "broken_pkg_xyz").mkdir()
    (tmp_path / "broken_pkg_xyz" / "__init__.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingExtra, match=r"needs broken_pkg_xyz, which cannot be imported "
                       r"\(ModuleNotFoundError: No module named 'no_such_dependency_xyz'\): "
                       r"pip install 'rlvr-jax\[b\]'"):
        extras.require("broken_pkg_xyz", "b", "feature")


def test_distribution_names_are_pip_names(monkeypatch):
    _hide(monkeypatch, "tensorflow_datasets")
    with pytest.raises(MissingExtra, match="needs tensorflow-datasets, "):
        extras.require("tensorflow_datasets", "tfds", "data.source=tfds")


def test_available_and_check_import_nothing(monkeypatch):
    assert extras.available("json") and extras.available("os.path")
    assert not extras.available("no_such_package_xyz")
    assert "no_such_package_xyz" not in sys.modules
    _hide(monkeypatch, "pyarrow")
    assert not extras.available("pyarrow") and not extras.available("pyarrow.parquet")
    with pytest.raises(MissingExtra, match=r"^data.source=parquet needs pyarrow, which is not "
                       r"installed: pip install 'rlvr-jax\[parquet\]'"):
        extras.check("pyarrow.parquet", "parquet", "data.source=parquet")
    extras.check("json", "x", "y")


# Every lazy import site of an optional package.

def test_parquet_source(monkeypatch, tmp_path):
    from rl.data import sources

    path = tmp_path / "rows.parquet"
    path.write_bytes(b"PAR1")
    _hide(monkeypatch, "pyarrow")
    with pytest.raises(MissingExtra) as e:
        sources.FileSource(str(path))
    _assert_names(e.value, "parquet", "pyarrow", "data.source=parquet")


@pytest.mark.parametrize("package,pip_name", [("tensorflow_datasets", "tensorflow-datasets"),
                                              ("array_record", "array-record")])
def test_tfds_source(monkeypatch, package, pip_name):
    from rl.data import sources

    _hide(monkeypatch, package)
    with pytest.raises(MissingExtra) as e:
        sources.TfdsSource("some_dataset", split="train")
    _assert_names(e.value, "tfds", pip_name, "data.source=tfds")


def test_tensorboard_log(monkeypatch, tmp_path):
    from rl.train import logs

    _hide(monkeypatch, "tensorboard")
    with pytest.raises(MissingExtra) as e:
        logs.RunLog(str(tmp_path), 1)
    _assert_names(e.value, "tensorboard", "tensorboard", "TensorBoard logging")
    assert not (tmp_path / "metrics.jsonl").exists()  # failed before opening anything
    log = logs.RunLog(str(tmp_path), 1, tensorboard=False, stream=sys.stderr)
    log.write(1, {"reward/mean": 0.5}, console=False)
    log.close()


def test_plot(monkeypatch, tmp_path):
    from rl.train import logs

    _hide(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtra) as e:
        logs.plot(str(tmp_path))
    _assert_names(e.value, "plots", "matplotlib", "the progress plot (rl.train.logs.plot)")


def test_sentencepiece_tokenizer(monkeypatch, tmp_path):
    import models

    (tmp_path / "tokenizer.model").write_bytes(b"not read")
    _hide(monkeypatch, "sentencepiece")
    with pytest.raises(MissingExtra) as e:
        models.load_tokenizer(tmp_path)
    _assert_names(e.value, "sentencepiece", "sentencepiece",
                  "a SentencePiece tokenizer (tokenizer.model)")
