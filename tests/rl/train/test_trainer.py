"""rl.train.trainer / sft / evaluation / batch on a very small model: the loop runs, logs
what it promises, is deterministic, and every algorithm variant trains."""

import functools
import io
import itertools
import json
import os

import jax
import numpy as np
import pytest

from configs import base, variants
from rl.algorithms import advantages as adv_lib
from rl.algorithms import algorithm as algorithm_lib
from rl.train import batch as batch_lib
from rl.train import build, evaluation, logs, sft
from rl.train.credit import Credit
from rl.train.trainer import Trainer
from tests.rl.fault_config import set_keys, very_small

REQUIRED = ("reward/mean", "reward/std", "frac_reward_zero_std", "accuracy",
            "response_length/mean", "clip_frac_low", "clip_frac_high", "entropy", "grad_norm",
            "perf/tokens_per_s", "time/rollout", "time/reference", "time/update")


def small_config(variant="grpo", **overrides):
    cfg = very_small(base.build("tiny"))
    cfg.train.steps, cfg.train.eval_every = 2, 1
    cfg.eval.batch_prompts = 4
    cfg.sft.steps, cfg.sft.batch_size, cfg.sft.eval_every = 3, 4, 0
    variants.apply(cfg, variant)  # after prompts_per_step: it scales the minibatches
    set_keys(cfg, overrides)
    cfg.lock()
    return cfg


def train(cfg, workdir):
    run = build.resolve(cfg, str(workdir))
    trainer = Trainer(run, build.init_params(run), str(workdir), stream=io.StringIO())
    return trainer.run(), logs.read(os.path.join(workdir, "metrics.jsonl"))


def test_pass_at_k_matches_enumeration():
    for n, c, k in [(4, 0, 1), (4, 1, 2), (5, 2, 3), (6, 6, 2), (6, 3, 6), (7, 1, 1)]:
        outcomes = [1] * c + [0] * (n - c)
        subsets = list(itertools.combinations(outcomes, k))
        expected = np.mean([max(s) for s in subsets])
        assert evaluation.pass_at_k(n, c, k) == pytest.approx(expected)
    with pytest.raises(ValueError):
        evaluation.pass_at_k(3, 4, 1)


def test_assemble_layout():
    seqs = batch_lib.assemble([[7, 8, 9], [5]], [[1, 2], [3, 4, 6], [2], []], group_size=2,
                              groups=3, completion_len=4,
                              sampler_logp=[np.array([-1.0, -2.0]), np.array([-3.0, -4, -5]),
                                            np.array([-6.0]), np.zeros(0)],
                              prompt_multiple=4)
    assert seqs.prompts.shape == (3, 4) and seqs.completion.shape == (6, 4)
    np.testing.assert_array_equal(seqs.prompts[:2], [[7, 8, 9, 0], [5, 0, 0, 0]])
    np.testing.assert_array_equal(seqs.prompt_lens, [3, 1, 1])
    np.testing.assert_array_equal(seqs.completion[1], [3, 4, 6, 0])
    np.testing.assert_array_equal(seqs.mask.sum(1), [2, 3, 1, 0, 0, 0])
    np.testing.assert_array_equal(seqs.valid, [True] * 4 + [False] * 2)
    np.testing.assert_array_equal(seqs.sampler_logp[1], [-3, -4, -5, 0])
    with pytest.raises(ValueError, match="completion_len"):
        batch_lib.assemble([[1]], [[1] * 5], group_size=1, groups=1, completion_len=4)
    with pytest.raises(ValueError, match="2 completions of 2 per group, got 3"):
        batch_lib.assemble([[1]], [[1]] * 3, group_size=2, groups=1, completion_len=4)
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        batch_lib.assemble([[]], [[1]], group_size=1, groups=1, completion_len=4)


@pytest.mark.slow
def test_loop_logs_everything_and_is_deterministic(tmp_path):
    cfg = small_config()
    summary, first = train(cfg, tmp_path / "a")
    _, second = train(cfg, tmp_path / "b")
    assert [r["step"] for r in first] == [0, 1, 2]
    for key in REQUIRED:
        assert all(first[i].get(key) is not None for i in (1, 2)), key
    assert "heldout/accuracy" in first[0] and "heldout/pass@2" in first[2]
    assert summary["before"]["heldout/accuracy"] == first[0]["heldout/accuracy"]
    assert logs.strip_timing(first) == logs.strip_timing(second)
    assert os.listdir(tmp_path / "a" / "tensorboard" / "train")
    assert os.path.exists(tmp_path / "a" / "final" / "model.safetensors")
    assert os.path.exists(tmp_path / "a" / "final" / "tokenizer.json")
    png = logs.plot(str(tmp_path / "a"))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


# what each variant's mechanism logs, and a check that it acted in a 2-step run
# (step 1 is on-policy with π_θ = π_ref, so divergences from the reference show at step 2)
MECHANISM = {
    "grpo": ("kl", lambda v: v[-1] > 0),                     # k3 KL to the reference
    "dr_grpo": ("advantage/abs_mean", lambda v: max(v) > 0),
    "dapo": ("overlong/penalized_frac", lambda v: max(v) > 0),
    "gspo": ("learner/clip_frac_high", None),                # + clip_frac_low, below
    # the k1 KL in the reward: 0 while π_old = π_ref (step 1), logged as it grows (step 2)
    "rloo": ("kl/in_reward", lambda v: v[0] == 0 and v[-1] != 0),
    "reinforce_pp": ("kl/in_reward", lambda v: v[0] == 0 and v[-1] != 0),
    "nsr": ("learner/nsr_band_frac", lambda v: max(v) > 0),
    "fipo": ("learner/fipo_weight_changed_frac", lambda v: max(v) > 0),
    "logp_reweight": ("reweight/weight_mean", lambda v: min(v) > 1.0),  # 1 + c(1 - p) > 1
    "delta_logp_mask": ("reweight/zeroed_frac", lambda v: v[-1] > 0),
    "divergence_weighted": ("reweight/js_mean", lambda v: v[-1] > 0),
    "mc_grpo": ("batch/rows", lambda v: min(v) == 2 * 5),    # G + 1 = 5 samples per prompt
    "treepo": ("tree/shared_token_frac", lambda v: max(v) > 0),  # prefixes decoded once
    "dars": ("dars/extra_rollouts", lambda v: max(v) > 0),
    "dars_b": ("dars/extra_rollouts", lambda v: max(v) > 0),
    "bots": ("bots/evidence", lambda v: max(v) > 2.0),       # Beta(1, 1): α + β = 2
    # step 1 samples 2x the groups and keeps the surplus; step 2 trains on carried ones
    "april": ("april/staleness_mean", lambda v: v[0] == 0 and v[-1] > 0),
}
VARIANT_OVERRIDES = {
    # each variant's own settings scaled to the very small run
    "treepo": {"sampling.page_size": 2, "sampling.tree.segment_len": 2},
    "dars": {"data.selector.n_max": 8}, "dars_b": {"data.selector.n_max": 8},
    "delta_logp_mask": {"rl.reweight.start_step": 1},
    "nsr": {"rl.loss.delta_high": 5.0, "rl.loss.delta_low": 0.7, "optim.lr": 3e-2},
    "gspo": {"optim.lr": 3e-2},
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(variants.VARIANTS))
def test_every_variant_trains_two_steps_and_its_mechanism_acts(tmp_path, variant):
    # a format check random text passes about half the time: rewards differ within
    # groups, so every variant (DAPO's filter included) has a batch to learn from
    cfg = small_config(variant, **{"train.steps": 2, "train.eval_every": 0,
                                   "train.old_logp": "recompute",
                                   "rl.off_policy.correction": "tis",
                                   "rl.reward.name": "format",
                                   "rl.reward.pattern": ".*[a-z].*"},
                       **VARIANT_OVERRIDES.get(variant, {}))
    _, records = train(cfg, tmp_path)
    steps = [r for r in records if "learner/loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for step in steps:
        assert step["batch/rows"] > 0
        assert np.isfinite(step["learner/loss"]) and step["advantage/abs_mean"] > 0
    key, acted = MECHANISM[variant]
    values = [r[key] for r in steps]
    if variant == "gspo":  # its tiny clip range clips most sequences once π_θ moves
        assert max(values) + max(r["learner/clip_frac_low"] for r in steps) > 0
    else:
        assert acted(values), (key, values)
    if cfg.rl.kl.in_reward:  # the loss has no KL term: the reward's is the one logged
        assert [r["kl"] for r in steps] == [r["kl/in_reward"] for r in steps]


@pytest.mark.slow
def test_april_resumes_partial_responses_with_their_log_probs(tmp_path):
    # stop tokens on a third of the vocabulary give the untrained model long-tailed
    # lengths; 2-token segments let the sampler stop once 2 of the 4 groups are done
    import dataclasses

    cfg = small_config("april", **{"train.steps": 3, "train.eval_every": 0,
                                   "rl.reward.name": "format", "rl.reward.pattern": ".*",
                                   "sampling.page_size": 2, "sampling.segment_len": 2})
    run = build.resolve(cfg, str(tmp_path))
    stops = tuple(range(run.model_config.vocab_size // 3))
    run = dataclasses.replace(run, sampling_params=dataclasses.replace(
        run.sampling_params, stop_token_ids=stops))
    trainer = Trainer(run, build.init_params(run), str(tmp_path), stream=io.StringIO())
    records = [trainer.step(step) for step in (1, 2, 3)]
    assert records[0]["april/carry_partial_rows"] > 0          # unfinished rows kept ...
    assert max(r["april/carried_token_frac"] for r in records[1:]) > 0  # ... and trained on
    for r in records:
        assert r["batch/rows"] == cfg.train.prompts_per_step * cfg.sampling.n
        assert np.isfinite(r["learner/loss"])


@pytest.mark.slow
def test_april_and_bots_state_survive_a_checkpoint_round_trip(tmp_path):
    """Through a real Orbax checkpoint: APRIL's carry, and BOTS's posteriors over a pool of
    a million tasks, stored as arrays (the checkpoint's JSON stays small)."""
    from rl.checkpoint import persistent
    from rl.data import selectors
    from rl.train import april
    for variant, extra in (("april", {}), ("bots", {"data.train_size": 1_000_000})):
        cfg = small_config(variant, **{"train.steps": 1, "train.eval_every": 0,
                                       "rl.reward.name": "format",
                                       "rl.reward.pattern": ".*[a-z].*", **extra})
        workdir = str(tmp_path / variant)
        run = build.resolve(cfg, workdir)
        trainer = Trainer(run, build.init_params(run), workdir, stream=io.StringIO())
        trainer.step(1)
        ckpts = persistent.Checkpoints(os.path.join(workdir, "checkpoints"), config=cfg,
                                       asynchronous=False)
        ckpts.save(1, trainer.get_state(), trainer.host_state(), wait=True)
        fresh = Trainer(run, build.init_params(run), workdir, stream=io.StringIO())
        state, host = ckpts.restore(1, fresh.get_state())
        ckpts.close()
        fresh.set_state(state)
        fresh.set_host_state(host)
        a, b = trainer.collector, fresh.collector
        if variant == "april":
            assert a.carry.groups  # the surplus of 2x over-provisioning
            assert april.state_to_json(b.carry) == april.state_to_json(a.carry)
            assert b.waiting == a.waiting
            continue
        assert a.selector_state["alpha"].shape == (1_000_000,)
        for key in ("alpha", "beta"):
            np.testing.assert_array_equal(b.selector_state[key], a.selector_state[key])
        assert b.selector_state["stats"] == a.selector_state["stats"]
        assert a.selector_state["stats"]["bots/evidence"] > 2.0
        meta = os.path.join(workdir, "checkpoints", "1", "meta")
        json_bytes = sum(os.path.getsize(os.path.join(meta, f)) for f in os.listdir(meta))
        assert json_bytes < 100_000  # 2 × 1e6 floats as JSON would be ~40 MB
        rng = functools.partial(selectors.step_rng, cfg.seed, 2)
        np.testing.assert_array_equal(a.selector.select(a.selector_state, rng(), 8),
                                      b.selector.select(b.selector_state, rng(), 8))


@pytest.mark.slow
def test_dynamic_sampling_drops_alike_groups_and_refills_on_accuracy(tmp_path):
    # correctness is the format check (a letter a-h: a minority of the random 8-token
    # completions of the untrained model): some groups are all wrong and must be
    # replaced by new prompts, up to the batch size
    cfg = small_config("dapo", **{"train.steps": 2, "train.eval_every": 0,
                                  "rl.reward.name": "format", "rl.overlong.buffer": 0,
                                  "rl.reward.pattern": ".*[a-h].*"})
    _, records = train(cfg, tmp_path)
    steps = [r for r in records if "learner/loss" in r]
    assert max(r["dynamic/rounds"] for r in steps) > 1          # it sampled more prompts
    for r in steps:  # and kept only groups with right and wrong samples, up to the batch
        assert r["dynamic/kept_groups"] == cfg.train.prompts_per_step
        assert 0 < r["accuracy"] < 1
        assert r["frac_reward_zero_std"] > 0                     # what it dropped


# a tree of 4 leaves per prompt: 2 first branches, each split in 2; leaves <= 8 tokens
TREE = {"sampling.sampler": "tree", "sampling.tree.segment_len": 4, "sampling.tree.max_depth": 2,
        "sampling.tree.leaves_per_prompt": 4, "sampling.tree.first_branching": "2",
        "sampling.page_size": 4, "rl.advantage.name": "tree"}


@pytest.mark.slow
def test_tree_sampler_with_tree_advantage_and_dynamic_sampling(tmp_path):
    cfg = small_config(**TREE, **{"train.steps": 1, "train.dynamic_sampling": True,
                                  "train.dynamic_max_rounds": 2, "train.eval_every": 0})
    _, records = train(cfg, tmp_path)
    step = records[-1]
    assert step["sampled/response_length_max"] <= 8  # segment_len × max_depth
    assert 1 <= step["dynamic/rounds"] <= 2
    # a random policy almost never answers: every group is filtered and the update
    # is skipped; otherwise it is a finite step
    if step["dynamic/kept_groups"] == 0:
        assert step["frac_reward_zero_std"] == 1.0 and step["batch/rows"] == 0
        assert step["update/skipped"] == 1
    else:
        assert np.isfinite(step["learner/loss"])


@pytest.mark.slow
def test_tree_sampler_with_tree_advantage_and_kl_in_reward(tmp_path):
    cfg = small_config(**TREE, **{
        "rl.kl.coef": 0.05, "rl.kl.kind": "k1", "rl.kl.in_reward": True, "train.steps": 2,
        "train.eval_every": 0,
        "train.logits_chunk": 3})  # C = 8 is no multiple of 3: padded logits blocks
    _, records = train(cfg, tmp_path)
    assert [r["step"] for r in records if "learner/loss" in r] == [1, 2]
    for step in records[-2:]:
        assert step["batch/rows"] > 0
        assert np.isfinite(step["learner/loss"]) and np.isfinite(step["advantage/abs_mean"])


def tree_kl_kernel(coef, rows=8, completion_len=5):
    """The step's advantage kernel (rl.train.credit), jitted as the trainer does, for a
    tree run with the k1 KL penalty in the reward."""
    rl = base.rl_section()
    rl.advantage.name, rl.reward.name = "tree", "countdown"
    rl.kl.kind, rl.kl.coef, rl.kl.in_reward = "k1", coef, True
    return jax.jit(Credit(algorithm_lib.from_config(rl), None, rows, completion_len).kernel)


def test_advantage_kernel_tree_with_kl_in_reward():
    rng = np.random.default_rng(0)
    rows, c, coef = 8, 5, 0.1
    rewards = rng.integers(0, 2, rows).astype(np.float32)
    gids = np.array([0, 0, 0, 0, 1, 1, -1, -1], np.int32)
    valid = gids >= 0
    paths = np.array([[0, 0], [0, 1], [1, -1], [1, -1], [0, -1], [1, -1], [-1, -1],
                      [-1, -1]], np.int32)
    mask = (np.arange(c)[None] < np.array([5, 3, 1, 4, 2, 5, 0, 0])[:, None]) & valid[:, None]
    old_logp = -rng.random((rows, c)).astype(np.float32)
    ref_logp = -rng.random((rows, c)).astype(np.float32)
    adv, grad_mask, weight, kl_mean = tree_kl_kernel(coef=coef)(
        rewards, gids, valid, mask, old_logp, ref_logp, paths, np.int32(1), None,
        np.ones(rows, bool))
    np.testing.assert_array_equal(weight, 1.0)  # no reweighter
    # reference: unwhitened tree advantage + return-to-go of -coef·(old - ref), whitened
    raw = np.asarray(adv_lib.compute("tree", rewards, gids, valid=valid, paths=paths,
                                     whiten=False))
    penalty = np.where(mask, -coef * (old_logp - ref_logp), 0.0)
    want = np.zeros((rows, c))
    for i, t in zip(*np.nonzero(mask)):
        want[i, t] = raw[i] + penalty[i, t:].sum()
    sel = want[mask]
    want[mask] = (sel - sel.mean()) / (sel.std() + 1e-6)
    assert adv.shape == grad_mask.shape == (rows, c)
    np.testing.assert_array_equal(grad_mask, mask)
    np.testing.assert_allclose(adv, want, atol=1e-5)
    # the logged KL: the k1 estimate (old - ref) averaged over the valid rows' tokens
    np.testing.assert_allclose(kl_mean, (old_logp - ref_logp)[mask].mean(), rtol=1e-5)


@pytest.mark.slow
def test_sft_lowers_the_loss_and_writes_logs(tmp_path):
    cfg = small_config(**{"sft.steps": 12, "sft.lr": 3e-3, "sft.batch_size": 8})
    run = build.resolve(cfg, str(tmp_path))
    _, summary = sft.train(run, build.init_params(run), str(tmp_path),
                           stream=io.StringIO())
    records = logs.read(str(tmp_path / "sft_metrics.jsonl"))
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 12 and losses[-1] < losses[0]
    assert "heldout/accuracy" in summary["after"]


@pytest.mark.parametrize("overrides,message", [
    ({"rl.reward.name": "sudoku"}, "unknown verifier 'sudoku'"),
    ({"data.source": "jsonl", "data.path": "/nonexistent/train.jsonl",
      "rl.reward.name": "math"}, "/nonexistent/train.jsonl"),
    ({"data.task.name": "chess"}, "unknown task 'chess'"),
    ({"train.old_logp": "cache"}, "train.old_logp"),
    ({"sampling.top_p": 0.9}, "old_logp=sampler"),
    ({"train.minibatches": 3}, "does not divide"),
    ({"eval.k": "1,8"}, "eval.k"),
    ({"sampling.tree.max_depth": 2}, "sampler is flat"),
])
def test_bad_configs_fail_in_resolve(overrides, message):
    with pytest.raises(build.ERRORS) as info:
        build.resolve(small_config(**overrides))
    text = build.message(info.value)
    assert message in text and "\n" not in text


def test_metrics_file_is_one_object_per_step(tmp_path):
    log = logs.RunLog(str(tmp_path), 2, tensorboard=False, stream=io.StringIO())
    log.write(1, {"a": np.float32(0.5), "b": float("nan"), "time/step": 1.0})
    log.write(2, {"a": 1})
    log.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [
        {"step": 1, "a": 0.5, "b": None, "time/step": 1.0}, {"step": 2, "a": 1}]
    assert logs.strip_timing(logs.read(str(tmp_path / "metrics.jsonl")))[0] == {
        "step": 1, "a": 0.5, "b": None}


def test_composite_reward_logs_each_verifier_and_uses_the_correct_one(tmp_path):
    # random text: the format check passes about half the time, arithmetic rarely
    cfg = small_config(**{"train.steps": 1, "train.eval_every": 0,
                          "rl.reward.name": "format:1.0,arithmetic:0.5",
                          "rl.reward.correct": "format", "rl.reward.pattern": ".*[a-z].*",
                          "rl.reward.workers": 2})
    _, records = train(cfg, tmp_path)
    step = records[-1]
    assert step["reward/timeouts"] == 0 and step["reward/crashes"] == 0
    assert 0 < step["reward/format"] < 1
    # every sampled group is kept (no dynamic sampling): the kept rows' mean total is
    # the weighted sum of the per-verifier means; accuracy is the format check's
    expected = step["reward/format"] + 0.5 * step["reward/arithmetic"]
    assert step["reward/mean"] == pytest.approx(expected, rel=1e-6)
    assert step["accuracy"] == pytest.approx(step["reward/format"], rel=1e-6)


def test_an_offloaded_reference_changes_nothing_but_where_it_lives(tmp_path):
    # a digit anywhere: rewards vary within a group, so step 1 moves the policy
    kl = {"rl.kl.coef": 0.05, "train.eval_every": 0, "rl.reward.name": "format",
          "rl.reward.pattern": ".*[0-9].*"}
    _, straight = train(small_config(**kl), tmp_path / "device")
    cfg = small_config(**kl, **{"rl.reference.offload": True})
    run = build.resolve(cfg, str(tmp_path / "host"))
    trainer = Trainer(run, build.init_params(run), str(tmp_path / "host"), stream=io.StringIO())
    kinds = {x.sharding.memory_kind for x in jax.tree.leaves(trainer.ref_params)}
    assert kinds == {"pinned_host"}
    assert {x.sharding.memory_kind for x in jax.tree.leaves(trainer.reference())} == {"device"}
    trainer.run()
    offloaded = logs.read(str(tmp_path / "host" / "metrics.jsonl"))
    assert logs.strip_timing(offloaded) == logs.strip_timing(straight)
    assert offloaded[-1]["learner/kl"] > 0


def test_a_run_log_of_another_process_writes_nothing(tmp_path):
    log = logs.RunLog(str(tmp_path), 3, tensorboard=False, stream=io.StringIO(), primary=False)
    log.start_over()
    log.write(1, {"a": 1.0})
    log.event(1, "rollback", cause="x")
    log.write(2, {"a": 2.0})
    log.rewind(1)
    assert log.records() == [{"step": 1, "a": 1.0}, {"step": 1, "event": "rollback", "cause": "x"}]
    assert log.record(1) == {"a": 1.0}
    log.close()
    assert os.listdir(tmp_path) == []
