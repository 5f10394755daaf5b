"""Start-up validation (rl.train.build.resolve): every bad config fails in one line before any
compute, and the combinations that used to crash mid-run are either refused up front
or work."""

import io

import numpy as np
import pytest

from configs import base, variants
from launch.common import load_config_file
from rl.train import build, checks
from rl.train.trainer import Trainer
from tests.rl.train.test_trainer import small_config, train

# (overrides, text the one-line error must contain)
BAD = [
    ({"optim.lr": 0.0}, "optim.lr must be > 0"),
    ({"optim.lr": -1e-3}, "optim.lr must be > 0"),
    ({"optim.schedule": "step"}, "unknown optim.schedule 'step'"),
    ({"optim.warmup_steps": -1}, "optim.warmup_steps must be >= 0"),
    ({"optim.weight_decay": -0.1}, "optim.weight_decay must be >= 0"),
    ({"optim.grad_clip": -1.0}, "optim.grad_clip must be >= 0"),
    ({"optim.b2": 1.0}, "optim.b2 must be in [0, 1)"),
    ({"optim.eps": 0.0}, "optim.eps must be > 0"),
    ({"optim.end_lr_fraction": 2.0}, "optim.end_lr_fraction"),
    ({"sft.lr": -1.0}, "sft.lr must be > 0"),
    ({"sft.steps": 0}, "sft.steps must be > 0"),
    ({"sft.batch_size": 0}, "sft.batch_size must be > 0"),
    ({"sft.weight_decay": -1.0}, "sft.weight_decay must be >= 0"),
    ({"train.eval_every": -1}, "train.eval_every must be >= 0"),
    ({"train.export_every": -2}, "train.export_every must be >= 0"),
    ({"checkpoint.keep": 0}, "checkpoint.keep must be > 0"),
    ({"checkpoint.snapshot_every": -1}, "checkpoint.snapshot_every must be >= 0"),
    ({"fault.nan_at_step": 3}, "fault.nan_at_step is set but fault.enabled is False"),
    ({"fault.enabled": True, "fault.times": 0}, "fault.times must be >= 1"),
    ({"checkpoint.every_s": -1.0}, "checkpoint.every_s must be >= 0"),
    ({"fault.enabled": True, "fault.process": 1},
     "fault.process must be -1 (every process) or a process index in [0, 1), got 1"),
    ({"train.warm_start": "rl"}, "train.warm_start must be one of"),
    ({"train.old_logp": "recompute", "sampling.top_p": 0.9},
     "needs rl.off_policy.correction=tis or mis"),
    ({"train.old_logp": "recompute", "sampling.top_k": 5},
     "needs rl.off_policy.correction=tis or mis"),
    ({"train.old_logp": "recompute", "sampling.min_p": 0.1, "rl.off_policy.correction": ""},
     "needs rl.off_policy.correction=tis or mis"),
    ({"train.old_logp": "interpolate", "sampling.top_p": 0.9},
     "train.old_logp=interpolate needs top_k/top_p/min_p off"),
    ({"rl.off_policy.correction": "truncate"}, "rl.off_policy.correction must be"),
    ({"rl.off_policy.level": "row"}, "rl.off_policy.level must be one of"),
    ({"rl.off_policy.cap": -1.0}, "rl.off_policy.cap must be > 0"),
    ({"rl.off_policy.correction": "tis", "rl.off_policy.floor": 3.0},
     "rl.off_policy.floor (3) must be < rl.off_policy.cap (2)"),
    ({"rl.loss.name": "bapo", "train.minibatches": 2, "rl.loss.high_max": 1.1},
     "high_start <= high_max"),
    # a clip, dual clip, NSR band, FIPO weight or GSPO ratio with one on-policy update
    ({"rl.loss.eps_high": 0.28}, "rl.loss.eps_high set with train.epochs × train.minibatches"),
    ({"rl.loss.dual_clip": 10.0}, "rl.loss.dual_clip set with"),
    ({"rl.loss.name": "gspo"}, "rl.loss.name=gspo set with"),
    ({"rl.loss.name": "gspo_token"}, "rl.loss.name=gspo_token set with"),
    ({"rl.loss.name": "nsr"}, "rl.loss.name=nsr set with"),
    ({"rl.loss.name": "cispo"}, "rl.loss.name=cispo set with"),
    ({"rl.loss.name": "bapo"}, "rl.loss.name=bapo set with"),
    ({"rl.reweight.name": "fipo"}, "rl.reweight.name=fipo set with"),
    # the tree decodes at most segment_len × max_depth tokens: never past max_new_tokens
    ({"sampling.sampler": "tree", "rl.advantage.name": "tree", "sampling.tree.segment_len": 16,
      "sampling.tree.max_depth": 4, "sampling.page_size": 16},
     "segment_len × max_depth = 16 × 4 = 64 tokens exceeds sampling.max_new_tokens=8"),
    ({"sampling.sampler": "tree", "rl.advantage.name": "tree", "sampling.tree.max_depth": 3},
     "8 // 3 = 2 is not a positive multiple of sampling.page_size=16"),
    ({"sampling.sampler": "tree", "rl.advantage.name": "tree", "sampling.tree.segment_len": 4,
      "sampling.tree.max_depth": 2}, "sampling.tree: segment_len (4) must be a positive multiple"),
    ({"sampling.sampler": "tree", "rl.advantage.name": "tree", "sampling.tree.segment_len": 4,
      "sampling.tree.max_depth": 2, "sampling.page_size": 4,
      "sampling.tree.first_branching": "a,b"}, "first_branching must be 'k' or 'lo,hi'"),
    # SFT trains on solutions, which only procedural tasks have
    ({"train.warm_start": "sft", "data.source": "jsonl", "data.path": __file__,
      "rl.reward.name": "math"}, "data.source is jsonl but"),
    ({"data.chat_template": True}, "has no chat template"),
    ({"data.system_prompt": "Be brief."}, "data.chat_template is off"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[m for _, m in BAD])
def test_bad_config_fails_in_one_line(overrides, message):
    with pytest.raises(build.ERRORS) as info:
        build.resolve(small_config(**overrides))
    text = build.message(info.value)
    assert message in text, text
    assert "\n" not in text


def test_sft_needs_a_procedural_task(tmp_path):
    rows = tmp_path / "train.jsonl"
    rows.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    cfg = small_config(**{"data.source": "jsonl", "data.path": str(rows),
                          "rl.reward.name": "math"})
    build.resolve(cfg)  # RL on a file is fine
    with pytest.raises(ValueError, match="supervised warm start needs data.source=task"):
        build.resolve(cfg, for_sft=True)
    with pytest.raises(ValueError, match="supervised warm start needs data.source=task"):
        build.resolve(small_config(**{"data.source": "jsonl", "data.path": str(rows),
                                      "rl.reward.name": "math", "train.warm_start": "sft"}))


def test_more_than_one_update_lets_the_clip_settings_through():
    for overrides in ({"rl.loss.eps_high": 0.28, "train.minibatches": 2},
                      {"rl.loss.name": "gspo", "train.epochs": 2},
                      {"rl.loss.name": "bapo", "train.minibatches": 2},
                      {"rl.reweight.name": "fipo", "train.minibatches": 2}):
        build.resolve(small_config(**overrides))


def test_tree_segment_len_defaults_from_max_new_tokens():
    run = build.resolve(small_config(**{
        "sampling.sampler": "tree", "rl.advantage.name": "tree", "sampling.page_size": 4,
        "sampling.tree.max_depth": 2, "sampling.tree.leaves_per_prompt": 4}))
    assert (run.tree.segment_len, run.tree.page_size, run.completion_len) == (4, 4, 8)


@pytest.mark.parametrize("spec", ["configs/demo.py", "configs/demo.py:tree",
                                  *[f"configs/demo.py:{v}" for v in variants.VARIANTS],
                                  *[f"configs/base.py:{v}" for v in variants.VARIANTS],
                                  "configs/demo.py:tree,dapo"])
def test_every_shipped_config_resolves(spec):
    run = build.resolve(load_config_file(spec))
    assert run.completion_len <= run.cfg.sampling.max_new_tokens


def test_variants_keep_their_own_kl_and_schedule_on_the_demo_config():
    demo = load_config_file("configs/demo.py")
    assert demo.rl.kl.coef == 0.0 and demo.train.warm_start == "sft"
    for name in variants.VARIANTS:
        on_demo, on_base = load_config_file(f"configs/demo.py:{name}"), base.get_config(name)
        assert on_demo.rl.kl.to_dict() == on_base.rl.kl.to_dict(), name
        assert on_demo.rl.loss.to_dict() == on_base.rl.loss.to_dict(), name
    # the authors' optimizer steps per rollout batch, scaled to the demo's 16 groups
    schedule = {v: load_config_file(f"configs/demo.py:{v}").train.minibatches
                for v in variants.VARIANTS}
    assert schedule == {"grpo": 1, "dr_grpo": 1, "dapo": 16, "gspo": 4, "rloo": 1,
                        "reinforce_pp": 8, "nsr": 16, "fipo": 16, "logp_reweight": 16,
                        "delta_logp_mask": 16, "divergence_weighted": 1, "mc_grpo": 1,
                        "treepo": 16, "dars": 1, "dars_b": 1, "bots": 1, "april": 1}
    assert load_config_file("configs/demo.py:dapo").rl.loss.dual_clip == 10.0


def test_variant_minibatches_divide_the_batch():
    cfg = base.build("tiny")
    cfg.train.prompts_per_step = 12
    variants.apply(cfg, "dapo")
    assert cfg.train.minibatches == 12
    cfg.train.prompts_per_step = 10
    variants.apply(cfg, "reinforce_pp")
    assert cfg.train.minibatches == 5


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["dapo", "gspo"])
def test_shipped_clipping_variants_clip(tmp_path, variant):
    """With the variant's several minibatches per rollout batch, the later minibatches
    see π_θ != π_old and the clip acts (with one on-policy update it never would).
    The reward is a format check that random text passes about half the time (a
    lowercase letter somewhere), so a random-init policy has advantages to follow."""
    cfg = small_config(variant, **{"train.steps": 2, "train.eval_every": 0,
                                   "train.dynamic_sampling": False, "optim.lr": 1e-2,
                                   "rl.reward.name": "format", "rl.reward.pattern": ".*[a-z].*"})
    assert cfg.train.minibatches == 2  # the variant's schedule, scaled to 2 prompt groups
    _, records = train(cfg, tmp_path)
    clipped = sum(r["clip_frac_low"] + r["clip_frac_high"] for r in records[1:])
    assert clipped > 0, records


@pytest.mark.slow
def test_completion_length_need_not_be_a_multiple_of_the_logits_chunk(tmp_path):
    cfg = small_config(**{"sampling.max_new_tokens": 12, "train.logits_chunk": 8,
                          "train.steps": 1, "train.eval_every": 0})
    _, records = train(cfg, tmp_path)
    assert np.isfinite(records[-1]["learner/loss"])


def _trainer(tmp_path, **overrides):
    run = build.resolve(small_config(**overrides), str(tmp_path))
    out = io.StringIO()
    return Trainer(run, build.init_params(run), str(tmp_path), stream=out), out


def test_all_zero_rewards_warn_once_after_the_first_steps(tmp_path):
    trainer, out = _trainer(tmp_path, **{"train.steps": 20})
    for step in range(1, 15):
        trainer.check_progress(step, {"sampled/all_zero": 1, "batch/rows": 8})
    text = out.getvalue()
    assert text.count("warning:") == 1
    assert "every sampled completion scored 0 over the first 10 steps" in text
    assert "train.warm_start=sft" in text


def test_a_reward_before_the_tenth_step_means_no_warning(tmp_path):
    trainer, out = _trainer(tmp_path, **{"train.steps": 20})
    for step in range(1, 15):
        trainer.check_progress(step, {"sampled/all_zero": int(step != 3), "batch/rows": 8})
    assert out.getvalue() == ""


def test_short_runs_warn_at_their_last_step(tmp_path):
    trainer, out = _trainer(tmp_path, **{"train.steps": 2})
    trainer.check_progress(1, {"sampled/all_zero": 1})
    assert out.getvalue() == ""
    trainer.check_progress(2, {"sampled/all_zero": 1})
    assert "over the first 2 steps" in out.getvalue()


def test_a_collapsed_policy_warns_and_a_random_init_does_not(tmp_path):
    """ln V is a uniform policy's entropy: a random init starts near it (no warning); a
    policy that had structure and then reaches it has collapsed (lr far too high)."""
    trainer, out = _trainer(tmp_path, **{"train.steps": 200})
    uniform = np.log(trainer.run_.model_config.vocab_size)
    for step in range(1, 4):  # random init: near uniform from the start
        trainer.check_progress(step, {"entropy": 0.95 * uniform, "batch/rows": 8})
    assert out.getvalue() == ""
    trainer, out = _trainer(tmp_path / "b", **{"train.steps": 200})
    trainer.check_progress(1, {"entropy": 0.3 * uniform, "batch/rows": 8})
    trainer.check_progress(2, {"entropy": 0.8 * uniform, "batch/rows": 8})
    assert out.getvalue() == ""
    for step in range(3, 60):
        trainer.check_progress(step, {"entropy": 0.99 * uniform, "batch/rows": 8})
    text = out.getvalue()
    assert text.count("warning:") == 2  # the first collapsed step, then the 50th
    assert "has collapsed" in text and "Lower optim.lr (now 0.001)" in text


def test_an_absurd_learning_rate_warns_at_start_up():
    assert base.get_config().optim.lr == 1e-6 and not checks.warnings(base.get_config())
    cfg = small_config(**{"optim.lr": 1e6})
    (warning,) = checks.warnings(cfg)
    assert warning.startswith("optim.lr=1e+06 is far above the rates RL fine-tuning uses")


@pytest.mark.slow
def test_dynamic_sampling_that_keeps_nothing_skips_the_update_and_warns(tmp_path):
    """A random-init policy never answers, so DAPO's filter drops every group."""
    trainer, out = _trainer(tmp_path, **{"train.steps": 1, "train.eval_every": 0,
                                         "train.dynamic_sampling": True,
                                         "train.dynamic_max_rounds": 2})
    params = trainer.state.params
    metrics = trainer.step()
    if metrics["dynamic/kept_groups"]:
        pytest.skip("the random policy answered a prompt in some but not all samples")
    trainer.check_progress(1, metrics)
    assert metrics["batch/rows"] == 0 and metrics["update/skipped"] == 1
    assert "dynamic sampling kept no group" in out.getvalue()
    assert trainer.state.params is params  # no optimizer step, not even momentum


@pytest.mark.parametrize("key,module,extra", [("train.tensorboard", "tensorboard", "tensorboard"),
                                              ("train.plot", "matplotlib", "plots")])
def test_missing_log_extras_fail_at_start_up(monkeypatch, key, module, extra):
    from models import extras

    real = extras.available
    monkeypatch.setattr(extras, "available", lambda name: name != module and real(name))
    with pytest.raises(build.ERRORS) as info:
        build.check_log_extras(small_config())
    text = build.message(info.value)
    assert f"{key}=True needs {module}" in text and f"rlvr-jax[{extra}]" in text
    build.check_log_extras(small_config(**{key: False}))  # off: nothing needed


@pytest.mark.parametrize("dtype,want", [("float32", "sampler"), ("bfloat16", "recompute")])
def test_old_logp_auto_follows_the_model_dtype(dtype, want):
    run = build.resolve(small_config(**{"model.dtype": dtype}))
    assert run.old_logp == want
    explicit = build.resolve(small_config(**{"model.dtype": dtype, "train.old_logp": "sampler"}))
    assert explicit.old_logp == "sampler"


def test_off_policy_correction_lets_filtered_sampling_recompute():
    for correction in ("tis", "mis"):
        run = build.resolve(small_config(**{"train.old_logp": "recompute",
                                            "sampling.top_p": 0.9,
                                            "rl.off_policy.correction": correction}))
        assert run.algorithm.off_policy.kind == correction
    run = build.resolve(small_config(**{"train.old_logp": "interpolate"}))
    assert run.old_logp == "interpolate"
