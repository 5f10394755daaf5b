"""rl.checkpoint.loop / rl.checkpoint.snapshot / rl.checkpoint / rl.checkpoint.preemption in-process: rollback of a NaN
step and of a raising step equals skipping that step's batch; snapshots survive
donation and are double-buffered; checkpoints round-trip bitwise and detect damage;
the logs rewind without duplicates; a second signal abandons the step.

The kill / SIGTERM / resume tests with real processes are tests/launch/test_resume.py.
"""

import io
import json
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from launch.common import load_config_file
from rl.checkpoint import persistent as checkpoint
from rl.checkpoint.preemption import Abandoned, Watch
from rl.checkpoint.snapshot import Snapshots
from rl.train import build, logs
from rl.train.trainer import Trainer
from tests import tensorboard_events
from tests.rl.fault_config import set_keys

CONFIG = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fault_config.py")


def fault_config(**overrides):
    cfg = load_config_file(CONFIG)
    cfg.train.steps = 6
    cfg.train.eval_every = 3
    set_keys(cfg, overrides)
    return cfg


class SkipBatch:
    """The trainer's data iterator with its `index`-th batch (0-based) dropped: the data
    a rolled-back run sees."""

    def __init__(self, it, index):
        self.it, self.index, self.served = it, index, 0

    def __next__(self):
        if self.served == self.index:
            next(self.it)
        self.served += 1
        return next(self.it)

    def get_state(self):
        return {"inner": self.it.get_state(), "served": self.served}

    def set_state(self, state):
        self.it.set_state(state["inner"])
        self.served = state["served"]


def train(cfg, workdir, skip_batch=None):
    run = build.resolve(cfg, str(workdir))
    out = io.StringIO()
    trainer = Trainer(run, build.init_params(run), str(workdir), stream=out)
    if skip_batch is not None:
        trainer.collector.data = SkipBatch(trainer.collector.data, skip_batch)
    summary = trainer.run()
    return trainer, summary, logs.read(os.path.join(workdir, "metrics.jsonl")), out.getvalue()


def assert_same_params(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["nan_at_step", "raise_at_step"])
def test_a_failed_step_rolls_back_and_equals_skipping_its_batch(tmp_path, fault):
    k = 4
    cfg = fault_config(**{"fault.enabled": True, f"fault.{fault}": k})
    trainer, summary, records, out = train(cfg, tmp_path / "faulty")
    events = [r for r in records if "event" in r]
    assert len(events) == 1 and events[0]["event"] == "rollback", records
    assert events[0]["step"] == k and events[0]["restored_step"] == k - 1
    cause = "non-finite learner/loss" if fault == "nan_at_step" else "InjectedFault"
    assert cause in events[0]["cause"] and f"step {k} failed" in out
    steps = [r["step"] for r in logs.metric_records(records)]
    assert steps == list(range(cfg.train.steps + 1))  # each step logged once, in order

    # batches are consumed one per step (no dynamic sampling): step k's is batch k - 1
    reference, ref_summary, ref_records, _ = train(fault_config(), tmp_path / "ref",
                                                   skip_batch=k - 1)
    assert_same_params(trainer.state.params, reference.state.params)
    assert (logs.strip_timing(logs.metric_records(records))
            == logs.strip_timing(ref_records))
    assert summary["after"] == ref_summary["after"]


@pytest.mark.slow
def test_rollback_replays_from_an_older_snapshot(tmp_path):
    """snapshot_every=2 and a failure at step 5: the snapshot is step 4; with every 3
    the snapshot is step 3 and step 4 is replayed identically before step 5's batch is
    skipped; both equal the reference."""
    k = 5
    reference, _, ref_records, _ = train(fault_config(), tmp_path / "ref", skip_batch=k - 1)
    cfg = fault_config(**{"fault.enabled": True, "fault.raise_at_step": k,
                          "checkpoint.snapshot_every": 3})
    trainer, _, records, _ = train(cfg, tmp_path / "faulty")
    events = [r for r in records if "event" in r]
    assert [(e["step"], e["restored_step"]) for e in events] == [(k, 3)]
    assert_same_params(trainer.state.params, reference.state.params)
    assert logs.strip_timing(logs.metric_records(records)) == logs.strip_timing(ref_records)


def _state():
    return {"params": {"w": jnp.arange(12.0).reshape(3, 4), "b": jnp.ones(3, jnp.bfloat16)},
            "count": jnp.array(7, jnp.int32), "rng": jax.random.key(3)}


def test_snapshots_survive_donation_and_restore_the_newest_complete_one():
    state = _state()
    snaps = Snapshots()
    snaps.take(1, state, {"data": {"next_index": 2}})
    bump = jax.jit(lambda t: jax.tree.map(lambda x: x + 1 if x.dtype != jnp.uint32 else x,
                                          {"params": t["params"], "count": t["count"]}),
                   donate_argnums=0)
    donated = bump({"params": state["params"], "count": state["count"]})
    assert state["params"]["w"].is_deleted()
    snaps.take(2, {**donated, "rng": state["rng"]}, {"data": {"next_index": 4}})
    step, restored, host = snaps.restore(_state())
    assert step == 2 and host == {"data": {"next_index": 4}}
    np.testing.assert_array_equal(restored["params"]["w"], np.arange(12.0).reshape(3, 4) + 1)
    assert restored["params"]["b"].dtype == jnp.bfloat16 and int(restored["count"]) == 8
    assert jax.random.key_data(restored["rng"]).tolist() == \
        jax.random.key_data(jax.random.key(3)).tolist()
    # the restored arrays are fresh buffers: donating them leaves the snapshot intact
    bump({"params": restored["params"], "count": restored["count"]})
    _, again, _ = snaps.restore(_state())
    np.testing.assert_array_equal(again["params"]["w"], np.arange(12.0).reshape(3, 4) + 1)


def test_a_snapshot_whose_copy_failed_is_not_the_one_restored():
    snaps = Snapshots()
    snaps.take(1, _state(), {"n": 1})
    jax.block_until_ready(snaps.pending.arrays)
    snaps.take(2, _state(), {"n": 2})

    class Failed:  # a copy that raised on its way to host memory
        arrays = property(lambda self: (_ for _ in ()).throw(RuntimeError("copy failed")))

        def complete(self):
            return False

    snaps.pending = Failed()
    step, _, host = snaps.restore(_state())
    assert step == 1 and host == {"n": 1}


def test_a_snapshot_still_copying_is_not_the_one_restored():
    snaps = Snapshots()
    snaps.take(1, _state(), {})
    jax.block_until_ready(snaps.pending.arrays)
    assert snaps.latest().step == 1  # complete: promoted
    snaps.take(2, _state(), {})
    jax.block_until_ready(snaps.pending.arrays)

    class Copying:  # the pending copy has not arrived
        def complete(self):
            return False

    pending = snaps.pending
    snaps.pending = Copying()
    assert snaps.latest().step == 1
    snaps.pending = pending
    assert snaps.latest().step == 2


def test_checkpoints_round_trip_bitwise_and_detect_damage(tmp_path):
    state = _state()
    ckpts = checkpoint.Checkpoints(str(tmp_path / "ckpt"), config={"a": 1}, keep=5)
    ckpts.save(1, state, {"data": {"next_index": 1}})
    bigger = jax.tree.map(lambda x: x, state)
    bigger["count"] = jnp.array(9, jnp.int32)
    ckpts.save(2, bigger, {"data": {"next_index": 2}})
    ckpts.wait()
    step, restored, host = ckpts.restore_latest(_state())
    assert step == 2 and host == {"data": {"next_index": 2}} and int(restored["count"]) == 9
    for a, b in zip(jax.tree.leaves(checkpoint.storable(restored)),
                    jax.tree.leaves(checkpoint.storable(bigger)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ckpts.close()
    # flip one byte in every array file of step 2: its checksum (or Orbax) rejects it
    for root, _, files in os.walk(tmp_path / "ckpt" / "2"):
        for name in files:
            path = os.path.join(root, name)
            if "meta" in root or name.startswith("_") or name.endswith(".txt"):
                continue
            data = bytearray(open(path, "rb").read())
            if data:
                data[len(data) // 2] ^= 0xFF
                open(path, "wb").write(bytes(data))
    err = io.StringIO()
    ckpts = checkpoint.Checkpoints(str(tmp_path / "ckpt"), keep=5, stream=err)
    step, restored, _ = ckpts.restore_latest(_state())
    assert step == 1 and int(restored["count"]) == 7
    assert f"checkpoint {tmp_path / 'ckpt' / '2'} is damaged" in err.getvalue()
    ckpts.close()


def test_checksums_change_with_any_bit():
    x = {"w": jnp.arange(64, dtype=jnp.float32)}
    base = checkpoint.checksums(x)
    for index in (0, 31, 63):
        flipped = np.asarray(x["w"]).view(np.uint32).copy()
        flipped[index] ^= 1
        assert checkpoint.checksums({"w": jnp.asarray(flipped.view(np.float32))}) != base
    swapped = np.asarray(x["w"]).copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    assert checkpoint.checksums({"w": jnp.asarray(swapped)}) != base


def test_differences_name_each_key_and_allow_the_resumable_ones():
    stored = {"model": {"num_layers": 2}, "rl": {"advantage": {"name": "grpo"}},
              "train": {"steps": 10, "eval_every": 5}, "checkpoint": {"every": 3}}
    current = json.loads(json.dumps(stored))
    current["train"]["steps"], current["train"]["eval_every"] = 20, 2
    current["checkpoint"]["every"] = 7
    assert checkpoint.differences(stored, current) == []
    current["model"]["num_layers"], current["rl"]["advantage"]["name"] = 4, "rloo"
    assert checkpoint.differences(stored, current) == [
        "model.num_layers: 2 -> 4", "rl.advantage.name: 'grpo' -> 'rloo'"]


def test_rewind_keeps_earlier_lines_and_rebuilds_tensorboard(tmp_path):
    log = logs.RunLog(str(tmp_path), 5, stream=io.StringIO())
    log.start_over()
    for step in range(5):
        log.write(step, {"reward/mean": step / 10})
    log.rewind(2)
    log.event(3, "rollback", cause="x")
    for step in range(3, 6):
        log.write(step, {"reward/mean": step})
    log.close()
    records = logs.read(str(tmp_path / "metrics.jsonl"))
    assert [r["step"] for r in logs.metric_records(records)] == [0, 1, 2, 3, 4, 5]
    assert [r["reward/mean"] for r in logs.metric_records(records)] == [0, 0.1, 0.2, 3, 4, 5]
    events = tensorboard_events.scalars(str(tmp_path / "tensorboard" / "train"))["reward/mean"]
    assert [step for step, _ in events] == [0, 1, 2, 3, 4, 5]
    assert [round(value, 6) for _, value in events] == [0, 0.1, 0.2, 3, 4, 5]


def test_a_second_signal_abandons_the_step():
    err = io.StringIO()
    with Watch(abandon_after_s=0, stream=err) as watch:
        os.kill(os.getpid(), signal.SIGTERM)
        assert watch.requested == signal.SIGTERM  # the first only asks
        with pytest.raises(Abandoned):
            os.kill(os.getpid(), signal.SIGTERM)
    assert "received SIGTERM" in err.getvalue()
    assert signal.getsignal(signal.SIGTERM) is not watch._handler  # handlers restored


def test_the_grace_period_abandons_a_step_that_does_not_end():
    import time
    with Watch(abandon_after_s=0.05, stream=io.StringIO()):
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(Abandoned):
            for _ in range(10_000):  # a step that would run far past the grace period
                time.sleep(0.01)
