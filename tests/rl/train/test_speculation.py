"""sampling.speculative in the trainer: the section resolved, refusals before any compute,
and a run whose sampler speculates."""

import numpy as np
import pytest

from configs import base
from rl.train import build, speculation
from sampling import SpecConfig
from tests.rl.fault_config import set_keys, very_small
from tests.rl.train.test_trainer import small_config, train


def _cfg(**overrides):
    cfg = very_small(base.build("tiny"))
    set_keys(cfg, {"sampling.speculative.enable": True, **overrides})
    return cfg


@pytest.mark.parametrize("overrides,match", [
    ({"sampling.speculative.enable": None, "sampling.speculative.draft_len": 3},
     r"options \['draft_len'\] are set but sampling.speculative.enable is off"),
    ({"sampling.speculative.draft_len": 0}, "speculative.draft_len must be an int >= 1"),
    ({"sampling.sampler": "latr"}, "speculative with sampling.sampler=latr"),
    ({"rollout.mode": "async", "rollout.kv_on_update": "keep"},
     "speculative with rollout.kv_on_update=keep"),
])
def test_bad_speculative_runs_fail_before_any_compute(overrides, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        build.resolve(_cfg(**overrides), str(tmp_path))


def test_the_section_becomes_the_runs_spec_config(tmp_path):
    run = build.resolve(_cfg(**{"sampling.speculative.draft_len": 3,
                                "sampling.speculative.max_rows": 2}), str(tmp_path))
    assert run.speculative == SpecConfig(draft_len=3, max_rows=2)
    off = very_small(base.build("tiny"))
    assert build.resolve(off, str(tmp_path)).speculative is None


def test_stats_sum_over_a_steps_calls():
    class Out:
        def __init__(self, **stats):
            self.stats = stats

    got = speculation.stats([Out(**{"spec/calls": 2, "spec/tokens": 30, "spec/row_forwards": 10,
                                    "spec/proposed": 40, "spec/accepted": 20}),
                             Out(**{"spec/calls": 1, "spec/tokens": 10, "spec/row_forwards": 10,
                                    "spec/proposed": 10, "spec/accepted": 0})])
    assert got == {"spec/calls": 3, "spec/tokens_per_forward": 2.0, "spec/acceptance": 0.4}
    assert speculation.stats([Out()]) == {"spec/calls": 0, "spec/tokens_per_forward": 0.0,
                                          "spec/acceptance": 0.0}


@pytest.mark.slow
def test_a_run_samples_speculatively(tmp_path):
    cfg = small_config(**{"sampling.speculative.enable": True, "train.steps": 1,
                          "train.eval_every": 0})
    _, records = train(cfg, tmp_path)
    last = records[-1]
    assert last["spec/calls"] >= 1 and last["spec/tokens_per_forward"] >= 1.0
    assert np.isfinite(last["learner/loss"])
