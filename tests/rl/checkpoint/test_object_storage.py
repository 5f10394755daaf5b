"""The persistent tier in a bucket of a real local GCS server (tests/storage_emulator.py):
Orbax's asynchronous saves and its commit-marker protocol (object storage has no
rename), a bit-exact restore, and a step killed mid-write: not listed, named in a
warning, deleted, and written again."""

import io

import jax
import jax.numpy as jnp
import numpy as np

from models import paths
from rl.checkpoint import persistent
from tests.storage_emulator import BUCKET


def test_checkpoints_in_a_bucket(gcs):
    directory = f"gs://{BUCKET}/checkpoints"
    state = {"params": {"w": jnp.arange(8.0) / 3}, "opt": {"mu": jnp.ones((2, 3), jnp.bfloat16),
                                                          "count": jnp.int32(5)}}
    host = {"position": 7, "alpha": np.linspace(0, 1, 5)}
    ckpts = persistent.Checkpoints(directory, config={"a": 1}, keep=2, asynchronous=True)
    for step in (1, 2, 3):
        ckpts.save(step, state, host)
    ckpts.close()
    assert ckpts.steps() == [2, 3]  # keep=2 deleted step 1
    assert paths.exists(f"{directory}/3/{persistent.COMMIT_MARKER}")

    # a step whose writer died: its files, no commit marker
    paths.write_text(f"{directory}/4/params/partial", "x")
    warnings = io.StringIO()
    ckpts = persistent.Checkpoints(directory, config={"a": 1}, keep=2, stream=warnings)
    # not listed; Orbax deletes it in the background (its CheckpointManager cleans up
    # unfinished steps in a thread it awaits before the next save), so whether it is
    # already gone here is a race: checked after that save below
    assert ckpts.steps() == [2, 3]
    step, restored, restored_host = ckpts.restore_latest(state)
    assert f"checkpoint {directory}/4 is incomplete" in warnings.getvalue()
    assert step == 3 and restored_host["position"] == 7
    np.testing.assert_array_equal(restored_host["alpha"], host["alpha"])
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ckpts.save(4, state, host, wait=True)
    ckpts.close()
    assert not paths.exists(f"{directory}/4/params/partial")  # deleted, then written again
    assert persistent.stored_steps(directory) == [3, 4]
    assert persistent.check_resume(directory, {"a": 1})["step"] == 4
