"""RL with LoRA (`lora.rank` >= 1) on the suite's very small run: only the adapters
train, the base never moves and is the reference, the sampler's copy is checked against
the learner's adapters every update (a missed sync stops the run), and a quantized base
trains factored."""

import io
import os

import jax
import numpy as np
import pytest

import models
from configs import base
from models import peft_io
from rl.checkpoint import persistent as checkpoint
from rl.checkpoint.loop import RunStopped
from rl.train import adapters, asynchronous, build, logs
from rl.train.trainer import Trainer
from tests.rl.fault_config import set_keys, very_small

# rewards that vary within a group from the first step, so every update moves the policy
MOVING = {"rl.reward.name": "format", "rl.reward.pattern": ".*[0-9].*", "lora.rank": 4,
          "train.steps": 3, "train.eval_every": 0, "optim.lr": 1e-2,
          "checkpoint.snapshot_every": 1}


def config(**overrides):
    cfg = very_small(base.build("tiny"))
    set_keys(cfg, MOVING | overrides)
    cfg.lock()
    return cfg


def trainer_for(cfg, workdir) -> Trainer:
    run = build.resolve(cfg, str(workdir))
    return Trainer(run, build.init_params(run), str(workdir), stream=io.StringIO())


def test_only_the_adapters_train_and_the_reference_is_the_base(tmp_path):
    # a plain base (merged sampler copy); the NF4 base trains in the resume test below
    trainer = trainer_for(config(**{"rl.kl.coef": 0.1}), tmp_path)
    assert trainer.frozen.settings.sampler == "merge"
    assert trainer.ref_params is trainer.frozen.base  # adapter off: no second copy
    base_sum = checkpoint.checksums(trainer.frozen.base)
    first = jax.tree.map(np.asarray, trainer.state.params)
    assert set(first["layers"]) == {"q", "k", "v", "o", "gate", "up", "down"}
    trainer.run()
    rows = logs.read(os.path.join(tmp_path, "metrics.jsonl"))
    after = jax.tree.map(np.asarray, trainer.state.params)
    assert checkpoint.checksums(trainer.frozen.base) == base_sum
    assert any(np.abs(a - b).max() > 0 for a, b in zip(jax.tree.leaves(after),
                                                        jax.tree.leaves(first)))
    # the optimizer holds the adapters' moments only
    assert {x.shape for x in jax.tree.leaves(trainer.state.opt_state) if x.ndim} <= {
        x.shape for x in jax.tree.leaves(after)}
    steps = [r for r in rows if "lora/adapter_checksum" in r]
    assert len(steps) == 3
    assert all(r["lora/adapter_checksum"] == r["lora/sampler_checksum"] for r in steps)
    assert len({r["lora/adapter_checksum"] for r in steps[1:]}) == 2  # it moves
    assert steps[-1]["learner/kl"] > 0  # the adapted policy left the base
    # DIR/final is the merged model; DIR/final/adapter the adapters alone (PEFT)
    _, exported = peft_io.load_adapter(tmp_path / "final" / "adapter",
                                       trainer.run_.model_config)
    for x, y in zip(jax.tree.leaves(exported), jax.tree.leaves(after)):
        np.testing.assert_array_equal(np.asarray(x), y)
    _, merged = models.load_pretrained(tmp_path / "final")
    want = jax.tree.map(np.asarray, trainer.frozen.merged(trainer.state.params))
    for x, y in zip(jax.tree.leaves(merged), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(x), y)


def test_a_sampler_left_on_an_old_adapter_stops_the_run(tmp_path, monkeypatch):
    cfg = config(**{"checkpoint.max_rollbacks": 2})
    stale = {}
    real = adapters.Frozen.for_sampler

    def never_synced(self, adapters_):  # the first copy forever: a sync that never runs
        if "copy" not in stale:
            stale["copy"] = real(self, adapters_)
        return stale["copy"]

    monkeypatch.setattr(adapters.Frozen, "for_sampler", never_synced)
    with pytest.raises(RunStopped, match="weights were not synced"):
        trainer_for(cfg, tmp_path).run()
    rows = logs.read(os.path.join(tmp_path, "metrics.jsonl"))
    assert [r["step"] for r in rows if "lora/adapter_checksum" in r] == [1]


@pytest.mark.parametrize("overrides,message", [
    ({"lora.quantize": "fp8"}, "lora.quantize must be one of"),
    ({"lora.quantize": "nf4", "lora.block": 48}, "lora.block=48: quantization block 48"),
    ({"lora.targets": "q,lm_head"}, "unknown ['lm_head']"),
    ({"lora.rank": -1}, "lora.rank must be >= 0"),
    ({"rl.kl.coef": 0.1, "rl.reference.offload": True}, "rl.reference.offload with lora"),
])
def test_bad_lora_settings_fail_in_resolve(overrides, message):
    with pytest.raises(build.ERRORS) as info:
        build.resolve(config(**overrides))
    text = build.message(info.value)
    assert message in text and "\n" not in text


@pytest.mark.parametrize("split", [False, True])
def test_the_asynchronous_sampler_gets_each_versions_adapters(tmp_path, monkeypatch, split):
    # one_step_off: each batch is sampled with the version before; with split devices the
    # sampler keeps its own copy of the base on its 4 devices and each version ships the
    # adapters alone. Then a sync that ships the first adapters forever stops the run.
    cfg = config(**{"rollout.mode": "one_step_off", "train.steps": 3,
                    "mesh.rollout_devices": 4 if split else 0})
    trainer = trainer_for(cfg, tmp_path / "ok")
    assert trainer.overlap.shared_devices != split
    if split:
        placed = {d for x in jax.tree.leaves(trainer.overlap.base) for d in x.devices()}
        assert placed == set(trainer.run_.rollout_act.mesh.devices.flat)
    trainer.run()
    rows = [r for r in logs.read(os.path.join(tmp_path / "ok", "metrics.jsonl"))
            if "lora/adapter_checksum" in r]
    assert [r["rollout/sampler_version"] for r in rows] == [0, 0, 1]
    assert all(r["lora/adapter_checksum"] == r["lora/sampler_checksum"] for r in rows)
    if split:
        return
    real = asynchronous.Overlap._put
    first = {}

    def stale(self, version, params):  # publishes the right checksum, ships version 0
        first.setdefault("params", params)
        real(self, version, params)
        self.weights.publish(version, first["params"])

    monkeypatch.setattr(asynchronous.Overlap, "_put", stale)
    with pytest.raises(RunStopped, match="weights were not synced"):
        trainer_for(config(**{"rollout.mode": "one_step_off",
                              "checkpoint.max_rollbacks": 2}), tmp_path / "stale").run()


def test_a_resumed_lora_run_is_the_straight_run_bit_for_bit(tmp_path):
    # 2 steps, then a rerun with 3 resumes from the step-2 checkpoint (adapters, their
    # moments, the keys; the NF4 base rebuilt from the config and its checksum checked)
    nf4 = {"lora.quantize": "nf4", "lora.block": 32, "rl.kl.coef": 0.1}
    straight = trainer_for(config(**nf4), tmp_path / "straight")
    assert straight.frozen.settings.sampler == "factored"
    base_sum = checkpoint.checksums(straight.frozen.base)
    straight.run()
    assert checkpoint.checksums(straight.frozen.base) == base_sum
    rows = logs.read(os.path.join(tmp_path / "straight", "metrics.jsonl"))
    assert rows[-1]["learner/kl"] > 0  # the adapters moved the policy off the NF4 base
    trainer_for(config(**nf4, **{"train.steps": 2}), tmp_path / "resumed").run()
    resumed = trainer_for(config(**nf4), tmp_path / "resumed")
    summary = resumed.run()
    assert summary["resumed_from"] == 2
    for x, y in zip(jax.tree.leaves(resumed.get_state()), jax.tree.leaves(straight.get_state())):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
