"""sampling.speculative in the trainer: the section resolved, refusals before any compute,
and a run whose sampler speculates."""

import jax
import numpy as np
import pytest

import models
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
    ({"sampling.speculative.drafter": "model"}, "drafter=model takes sampling.speculative"),
    ({"sampling.speculative.draft_model": "layers:2"}, "draft_model takes drafter=model"),
    ({"sampling.speculative.enable": None, "sampling.speculative.draft_model": "layers:2"},
     r"options \['draft_model'\] are set but"),
    ({"sampling.speculative.drafter": "model", "sampling.speculative.draft_model": "layers:1"},
     r"draft_model=layers:1: N must be an int in \[1, 0\] \(the policy has 1 layers\)"),
    ({"sampling.speculative.drafter": "model", "sampling.speculative.draft_model": "layers:x"},
     "N must be an int"),
    ({"sampling.speculative.drafter": "model", "sampling.speculative.draft_model": "layers:1",
      "lora.rank": 4}, "drafter=model with lora.rank >= 1 is not supported"),
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


def test_layers_n_drafts_with_the_policys_first_layers(tmp_path):
    run = build.resolve(_cfg(**{"sampling.speculative.drafter": "model", "model.num_layers": 2,
                                "sampling.speculative.draft_model": "layers:1"}), str(tmp_path))
    assert run.speculative == SpecConfig(drafter="model")
    params = build.init_params(run)
    config, drafted = run.draft_model(params)
    assert config == run.model_config.replace(num_layers=1)
    assert jax.tree.leaves(drafted["layers"])[0].shape[0] == 1
    np.testing.assert_array_equal(drafted["layers"]["down"][0],
                                  params["layers"]["down"][0])
    assert drafted["embed"] is params["embed"]


def test_a_checkpoint_drafter_is_loaded_and_checked(tmp_path):
    tiny = models.get_preset("tiny")
    models.save_pretrained(str(tmp_path / "draft"), tiny, models.init(tiny, jax.random.key(3)))
    cfg = _cfg(**{"sampling.speculative.drafter": "model",
                  "sampling.speculative.draft_model": str(tmp_path / "draft")})
    run = build.resolve(cfg, str(tmp_path / "run"))
    config, params = run.draft_model(None)
    assert config.num_layers == tiny.num_layers and config.vocab_size == tiny.vocab_size
    assert params["embed"].shape == (tiny.vocab_size, tiny.hidden_size)
    other = tiny.replace(vocab_size=256)
    models.save_pretrained(str(tmp_path / "other"), other, models.init(other, jax.random.key(3)))
    cfg.sampling.speculative.draft_model = str(tmp_path / "other")
    with pytest.raises(ValueError, match="draft_model=.*other: the draft model's vocab_size"):
        build.resolve(cfg, str(tmp_path / "run2"))


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
@pytest.mark.parametrize("drafter", [{}, {"sampling.speculative.drafter": "model",
                                          "sampling.speculative.draft_model": "layers:1",
                                          "model.num_layers": 2}])
def test_a_run_samples_speculatively(drafter, tmp_path):
    cfg = small_config(**{"sampling.speculative.enable": True, "train.steps": 1,
                          "train.eval_every": 0, **drafter})
    _, records = train(cfg, tmp_path)
    last = records[-1]
    assert last["spec/calls"] >= 1 and last["spec/tokens_per_forward"] >= 1.0
    assert np.isfinite(last["learner/loss"])
