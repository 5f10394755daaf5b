"""Asynchronous rollouts (`rollout.mode`): η = 0 is the synchronous run bit for bit, the
sampler's versions follow the schedule, every token knows its version, and a token the
learner's own version sampled has a behaviour weight of exactly 1 in float32."""

import io
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import configs.demo
import sampling
from models.multihost import to_host
from rl.train import april, build, logs
from rl.train.batch import assemble
from rl.train.collect import Collector
from rl.train.groups import Groups
from rl.train.trainer import Trainer
from tests.rl.train.test_trainer import small_config, train

pytestmark = pytest.mark.slow


def metrics_and_params(cfg, workdir):
    _, records = train(cfg, workdir)
    return (logs.strip_timing(logs.metric_records(records)),
            load_file(os.path.join(workdir, "final", "model.safetensors")))


def demo_config(tmp_path, **overrides):
    """The demo (`configs/demo.py`) on a short schedule, its warm start shared."""
    cfg = configs.demo.get_config()
    cfg.train.steps, cfg.train.eval_every, cfg.train.log_every = 3, 3, 1
    cfg.sft.steps, cfg.sft.eval_every = 8, 0
    cfg.sft.shared_dir = str(tmp_path / "sft")
    cfg.eval.size, cfg.data.heldout_size, cfg.eval.batch_prompts = 16, 16, 16
    cfg.train.plot = cfg.train.tensorboard = False
    for key, value in overrides.items():
        section, name = key.split(".")
        cfg[section][name] = value
    cfg.lock()
    return cfg


def test_async_with_no_staleness_is_the_synchronous_demo_bit_for_bit(tmp_path):
    sync, sync_params = metrics_and_params(demo_config(tmp_path), tmp_path / "sync")
    eta0, eta0_params = metrics_and_params(
        demo_config(tmp_path, **{"rollout.mode": "async", "rollout.max_staleness": 0}),
        tmp_path / "async")
    assert [r["step"] for r in eta0] == [0, 1, 2, 3]
    for a, b in zip(sync, eta0, strict=True):
        # the asynchronous run adds its own metrics (versions, staleness, the behaviour
        # weight); every metric of the synchronous run is the same value
        assert {k: b[k] for k in a} == a, a["step"]
    assert all(r["staleness/max"] == 0 and r["learner/is_weight_max"] == 1.0
               for r in eta0[1:])
    assert sync_params.keys() == eta0_params.keys()
    for key in sync_params:
        np.testing.assert_array_equal(sync_params[key], eta0_params[key], err_msg=key)


@pytest.mark.parametrize("mode,lag", [("one_step_off", 1), ("async", 2)])
def test_each_batch_comes_from_the_version_the_schedule_names(tmp_path, mode, lag):
    cfg = small_config("grpo", **{"train.steps": 5, "train.eval_every": 5,
                                  "rollout.mode": mode, "rollout.max_staleness": lag,
                                  "sampling.page_size": 4, "sampling.segment_len": 4})
    records, _ = metrics_and_params(cfg, tmp_path / mode)
    steps = records[1:]
    assert [r["rollout/sampler_version"] for r in steps] == [max(0, n - 1 - lag)
                                                              for n in range(1, 6)]
    for n, r in enumerate(steps, 1):
        # the learner trains step n at version n - 1; a call's fresh tokens are `lag`
        # behind it (fewer at the start), carried ones more
        assert r["staleness/frac_0"] == (1.0 if n == 1 else 0.0)
        assert r["staleness/max"] >= min(n - 1, lag)
        assert r["learner/is_weight_mean"] > 0  # the correction (tis) is on


def test_a_token_of_the_learners_own_version_has_a_behaviour_weight_of_exactly_1(tmp_path):
    """float32: a batch of rows sampled by version 0 (stale) and rows sampled by version 1
    (the learner's): the proximal log-probs of `train.old_logp=auto` (recompute_stale) are
    the sampler's own for the fresh tokens, so their π_prox/π_behav is exactly 1, and a
    forward pass of version 1 for the stale ones, whose weights are not 1."""
    cfg = small_config("grpo", **{"rollout.mode": "one_step_off"})
    run = build.resolve(cfg, str(tmp_path))
    assert run.old_logp == "recompute_stale" and run.model_config.dtype == "float32"
    trainer = Trainer(run, build.init_params(run), str(tmp_path), stream=io.StringIO())
    old = trainer.state.params
    new = jax.tree.map(lambda x: x + 0.05 * jnp.sign(x), old)  # version 1: another policy
    trainer.state = trainer.state.__class__(new, trainer.state.opt_state,
                                            trainer.state.step, trainer.state.rng)
    trainer.version = 1
    prompts = [run.encode_prompt(run.train_source[i].prompt) for i in range(2)]
    sp = run.sampling_params
    rows = [sampling.generate(run.model_config, p, prompts, 2, sp, jax.random.key(v))
            for v, p in enumerate((old, new))]
    # group i: row i of each version's rollouts (prompt i // 2), stale then fresh
    order = [(r, i) for i in range(4) for r in (0, 1)]
    completions = [rows[r].completion(i) for r, i in order]
    logp = [rows[r].logprobs[i, :rows[r].lengths[i]] for r, i in order]
    versions = [np.full(len(c), r, np.int32) for c, (r, _) in zip(completions, order)]
    seqs = assemble([prompts[i // 2] for i in range(4)], completions, group_size=2, groups=4,
                    completion_len=sp.max_new_tokens, sampler_logp=logp, versions=versions)
    sequences = trainer.learner.place_arrays(seqs.learner_inputs())
    proximal = trainer.fresh_from_sampler(seqs, to_host(trainer.proximal(seqs, sequences)))
    weight = np.exp(proximal - seqs.sampler_logp)
    fresh = seqs.mask & (seqs.versions == 1)
    stale = seqs.mask & (seqs.versions == 0)
    assert fresh.any() and stale.any()
    np.testing.assert_array_equal(weight[fresh], 1.0)
    assert np.abs(weight[stale] - 1.0).max() > 1e-3  # version 1 differs: a real weight


def test_no_new_prompts_while_a_carried_sample_is_older_than_the_cap(tmp_path, monkeypatch):
    cfg = small_config("grpo", **{"rollout.mode": "async", "rollout.max_staleness": 2,
                                  "sampling.page_size": 4, "sampling.segment_len": 4})
    run = build.resolve(cfg, str(tmp_path))
    collector = Collector(run, None, run.selector)
    row = april.Row(*(np.zeros(3, dtype) for dtype in (np.int32, np.float32, np.float32,
                                                       np.int32)), april.PARTIAL)
    collector.carry = april.Carry(8, [april.Group([1, 2], None, [row], born=3)])
    admitted = []
    monkeypatch.setattr(collector, "_collect_carry",
                        lambda rng, version, fresh: (admitted.append(fresh) or
                                                     (Groups(), {}, None, rng)))
    collector.collect_async(None, 5, 2)  # began 2 versions before the call's: admits
    collector.collect_async(None, 6, 2)  # 3 before: continues the carried ones only
    # the carried group counts among the groups in flight (2 × prompts_per_step)
    assert admitted == [2 * cfg.train.prompts_per_step - 1, 0]


def test_kept_pages_carry_unfinished_samples_across_versions(tmp_path):
    """rollout.kv_on_update=keep: a call that stops after its first segment (the sampler
    stopped as if its batch were full) carries its unfinished samples with their pages;
    the next call continues them from those pages under its own, newer, version, and a
    checkpoint of the sampler's state holds them."""
    cfg = small_config("grpo", **{"train.steps": 3, "train.eval_every": 3,
                                  "rollout.mode": "async", "rollout.max_staleness": 1,
                                  "rollout.kv_on_update": "keep",
                                  "sampling.page_size": 4, "sampling.segment_len": 4})
    run = build.resolve(cfg, str(tmp_path))
    trainer = Trainer(run, build.init_params(run), str(tmp_path), stream=io.StringIO())
    sample, resumed = trainer.collector.sample, []

    def stop_every_other_call(prompts, n, rng, **flat):
        resumed.append(len(flat.get("resume", {})))
        if len(resumed) % 2:
            flat["stop_when"] = lambda done: True
        return sample(prompts, n, rng, **flat)

    trainer.collector.sample = stop_every_other_call
    records = [trainer.step(step) for step in (1, 2, 3)]
    host = trainer.host_state()["rollout"]
    trainer.overlap.stop()
    assert resumed[0] == 0 and resumed[1] > 0  # call 2 continued call 1's rows from pages
    carried = [r for r in records if r["april/carried_groups"]]
    assert carried and all(r["staleness/max"] >= 1 for r in carried)
    kept = [row for g in host["state"]["april"]["groups"] for row in g["rows"] if "kv" in row]
    assert all(row["finish"] == "partial" and isinstance(row["kv"]["k"], np.ndarray)
               for row in kept)
