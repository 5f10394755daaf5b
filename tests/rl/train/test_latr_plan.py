"""sampling.sampler=latr in the trainer: the section resolved, the mix schedule, refusals,
and a run whose steps grow LATR trees and then sample flat."""

import numpy as np
import pytest

from configs import base
from rl.train import build, latr_plan
from tests.rl.fault_config import set_keys, very_small
from tests.rl.train.test_trainer import small_config, train


def test_the_schedule_holds_each_ratio_until_the_next_step():
    schedule = latr_plan.parse_schedule(latr_plan.DEFAULT_SCHEDULE)
    assert schedule == ((0, 1.0), (10, 0.75), (20, 0.5), (80, 0.25), (200, 0.0))
    plan = latr_plan.LatrPlan(None, schedule, None)
    widths = [plan.width(step, 8) for step in (0, 9, 10, 19, 20, 79, 80, 199, 200, 10_000)]
    assert widths == [8, 8, 6, 6, 4, 4, 2, 2, 0, 0]


@pytest.mark.parametrize("text,match", [("1:1", "increase from 0"), ("0:1,0:0.5", "increase"),
                                        ("0:1.5", r"in \[0, 1\]"), ("0-1", "step:ratio")])
def test_bad_schedules_are_refused(text, match):
    with pytest.raises(ValueError, match=match):
        latr_plan.parse_schedule(text)


def _cfg(**overrides):
    cfg = very_small(base.build("tiny"))
    set_keys(cfg, {"sampling.sampler": "latr", **overrides})
    return cfg


@pytest.mark.parametrize("overrides,match", [
    ({"sampling.latr.lookahead": "2,x"}, "lookahead must be comma-separated ints"),
    ({"sampling.latr.abs_threshold": 2.0}, "sampling.latr: latr abs_threshold"),
    ({"rollout.april": True}, "latr with rollout.april"),
    ({"rollout.mode": "one_step_off"}, "latr with rollout.mode=one_step_off"),
    ({"sampling.sampler": "flat", "sampling.latr.max_steps": 4},
     "sampling.latr options are set but sampling.sampler is flat"),
])
def test_bad_latr_runs_fail_before_any_compute(overrides, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        build.resolve(_cfg(**overrides), str(tmp_path))


def test_the_plan_takes_the_sections_values_and_the_math_tokens(tmp_path):
    run = build.resolve(_cfg(**{"sampling.latr.lookahead": "2,3",
                                "sampling.latr.mix_schedule": "0:0.5,3:0"}), str(tmp_path))
    plan = run.latr
    assert plan.config.lookahead == (2, 3) and plan.config.abs_threshold == 0.25
    assert plan.at(0, 4).width == 2 and plan.at(3, 4) is None
    digit = run.tokenizer.encode("7")[0]
    assert plan.exempt.shape == (run.model_config.vocab_size,) and plan.exempt[digit]


@pytest.mark.slow
def test_a_run_grows_trees_then_samples_flat(tmp_path):
    cfg = small_config(**{"sampling.sampler": "latr", "sampling.latr.lookahead": "2,3",
                          "sampling.latr.abs_threshold": 0.0, "sampling.latr.rel_threshold": 1.0,
                          "sampling.latr.mix_schedule": "0:1,1:0", "train.steps": 2,
                          "train.eval_every": 0})
    _, records = train(cfg, tmp_path)
    first, second = records[-2], records[-1]
    # thresholds 0 and 1: every running row may branch, so the groups fill at once
    assert first["latr/born"] == 2 * 3 and first["latr/shared_token_frac"] > 0
    assert second["latr/born"] == 0 and second["latr/end_step"] == -1.0  # ratio 0: flat
    assert np.isfinite(first["learner/loss"]) and np.isfinite(second["learner/loss"])
