"""notebooks/delta_logp.ipynb executes end to end (nbclient) and leaves its figures in its
outputs. The parameters cell is swapped for a quick version: an 8-step warm start and
2 RL steps in a temporary directory, 4 prompts × 2 samples, two criteria at one budget."""

import base64
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(ROOT, "notebooks", "delta_logp.ipynb")


@pytest.mark.slow
def test_notebook_runs_and_draws(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "the notebook needs exactly one cell tagged 'parameters'"
    cells[0].source = "\n".join([
        cells[0].source,
        f"WORKDIR = {str(tmp_path / 'run')!r}",
        "SFT_STEPS, RL_STEPS, EVAL_SIZE, PROMPTS, SAMPLES = 8, 2, 4, 4, 2",
        "CRITERIA, BUDGETS, GAMMAS = ('delta_logp', 'js'), (0.25,), (0.0, 0.5)",
    ])
    # A kernel of this interpreter (where the project is installed), found first: a
    # "python3" kernelspec elsewhere on the machine may be another Python.
    from ipykernel.kernelspec import install

    install(prefix=str(tmp_path / "jupyter"), kernel_name="rlvr-jax-test")
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               JUPYTER_PATH=str(tmp_path / "jupyter" / "share" / "jupyter"))
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="rlvr-jax-test",
                                     resources={"metadata": {"path": str(tmp_path)}})
    old = dict(os.environ)
    os.environ.update(env)
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4  # distributions, positions, budget sweep, γ sweep
    assert all(base64.b64decode(img)[:8] == b"\x89PNG\r\n\x1a\n" for img in images)
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any('class="tok' in h for h in html)  # the coloured tokens
    for name in ("distributions", "positions", "budget", "gamma", "report"):
        ext = "html" if name == "report" else "png"
        assert os.path.isfile(tmp_path / "run" / "analysis" / f"{name}.{ext}")


def _colab_install_cell():
    """The notebook's Colab install cell, run outside Colab: it only defines its helper."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [c for c in nb.cells if "colab-install" in c.metadata.get("tags", [])]
    namespace: dict = {}
    exec(compile(cell.source, "colab-install", "exec"), namespace)  # noqa: S102 - our notebook
    return namespace


def test_the_colab_cell_installs_from_an_archive_or_a_clone_of_the_checkout(tmp_path):
    """The two ways the cell tells Colab users to bring the project: an uploaded `git
    archive` of their checkout, or a clone of their own copy (here: this repository)."""
    locate = _colab_install_cell()["locate_checkout"]
    archive = tmp_path / "rlvr-jax.zip"
    subprocess.run(["git", "archive", "-o", str(archive), "HEAD"], cwd=ROOT, check=True)
    unpacked = locate(str(archive), "", str(tmp_path / "from_zip"))
    cloned = locate(str(tmp_path / "absent.zip"), ROOT, str(tmp_path / "from_git"))
    for root in (unpacked, cloned):
        assert os.path.isfile(os.path.join(root, "setup.py"))
        assert os.path.isfile(os.path.join(root, "notebooks", "delta_logp.ipynb"))
    assert locate(str(tmp_path / "absent.zip"), "", unpacked) == unpacked  # already there
    with pytest.raises(FileNotFoundError, match="upload absent.zip"):
        locate(str(tmp_path / "absent.zip"), "", str(tmp_path / "nothing"))
