"""A checkpoint written by 2 processes on a 2 × 2 × 2 mesh restores onto other meshes
in one process (1 × 8, 8 × 1, one device), and the run continues from it.

The checkpoint stores global arrays, not one layout: a resumed run asks Orbax for each
array in the sharding of its own mesh (rl/checkpoint/persistent.py restores into
the template's shardings), and the mesh is not among the config keys a resume must
match (`persistent.RESUMABLE`). The saved run is tests/launch/multiprocess_config.py
(3 steps, checkpoints at 2 and 3) run by 2 processes × 4 CPU devices; its final
export holds the step-3 parameters as the two writers gathered them.

- The restored parameters equal the saved ones bit for bit on each mesh, and are
  placed in that mesh's shardings.
- `launch.train --config.train.steps=4` on each mesh says it resumed from step 3
  with no damaged-checkpoint warning: its restore compared every restored array
  (parameters, optimizer state, PRNG streams) with the checksums the 2 writers
  stored. It keeps the saved metrics of steps 0-3 and adds step 4, and the three
  meshes agree on step 4's metrics and parameters to the bound of
  tests/launch/test_multiprocess.py (TOLERANCE): they compile different programs
  whose sums differ only in order.
"""

import os
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from models import hf_io, sharding
from rl.checkpoint import persistent
from rl.train import logs
from tests.launch.test_multiprocess import TOLERANCE, one_process

pytestmark = pytest.mark.slow

# name: (devices of the process, data, fsdp); tensor = 1
MESHES = {"1x8": (8, 1, 8), "8x1": (8, 8, 1), "one device": (1, 1, 1)}


@pytest.fixture(scope="module")
def saved(two_process_flat):
    """The workdir of the 2-process run (tests/launch/conftest.py): checkpoints 2 and 3 and
    the step-3 export."""
    workdir, _ = two_process_flat
    assert sorted(os.listdir(workdir / "checkpoints")) == ["2", "3"]
    return workdir


def test_the_saved_parameters_restore_onto_each_mesh(saved):
    config, exported = hf_io.load_pretrained(saved / "final")
    for name, (devices, data, fsdp) in MESHES.items():
        mesh = sharding.make_mesh((data, fsdp, 1), devices=jax.devices()[:devices])
        shardings = sharding.param_shardings(config, mesh, sharding.make_rules())
        template = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                                exported, shardings)
        step, params = persistent.restore_params(str(saved / "checkpoints"), template, step=3)
        assert step == 3
        for (path, x), s, want in zip(jax.tree_util.tree_leaves_with_path(params),
                                      jax.tree.leaves(shardings), jax.tree.leaves(exported),
                                      strict=True):
            where = f"{name} {jax.tree_util.keystr(path)}"
            assert x.sharding == s, where
            np.testing.assert_array_equal(np.asarray(x), np.asarray(want), err_msg=where)


def test_the_run_continues_on_each_mesh(saved, tmp_path):
    before = logs.strip_timing(logs.read(saved / "metrics.jsonl"))
    step4, final = {}, {}
    for name, (devices, data, fsdp) in MESHES.items():
        workdir = tmp_path / name.replace(" ", "_")
        shutil.copytree(saved, workdir)
        result = one_process("flat", workdir, "--config.train.steps=4",
                             f"--config.mesh.data={data}", f"--config.mesh.fsdp={fsdp}",
                             "--config.mesh.tensor=1", devices=devices)
        assert "resumed from checkpoint step 3" in result.stdout, (name, result.stdout)
        assert "damaged" not in result.stdout + result.stderr, (name, result.stderr[-2000:])
        rows = logs.strip_timing(logs.read(workdir / "metrics.jsonl"))
        assert [r["step"] for r in rows] == [0, 1, 2, 3, 4] and rows[:4] == before, name
        assert sorted(os.listdir(workdir / "checkpoints")) == ["2", "3", "4"], name
        step4[name], final[name] = rows[4], load_file(workdir / "final" / "model.safetensors")
    first = next(iter(MESHES))
    for name in MESHES:
        assert step4[name].keys() == step4[first].keys()
        for key, value in step4[first].items():
            assert step4[name][key] == pytest.approx(value, abs=TOLERANCE, rel=0), (name, key)
        for key, value in final[first].items():
            np.testing.assert_allclose(final[name][key], value, atol=TOLERANCE, rtol=0,
                                       err_msg=f"{name} {key}")
