"""Budget calibration and the cross-sampling / extrapolation sweeps on tiny models."""

import jax
import numpy as np
import pytest

import models
from rl.analysis import pairs, study, sweeps
from sampling import SamplingParams

CONFIG = models.get_preset("tiny").replace(num_layers=1)
BASE = pairs.Policy("base", CONFIG, models.init(CONFIG, jax.random.key(0)), "")
RL = pairs.Policy("rl", CONFIG, models.init(CONFIG, jax.random.key(1)), "")
PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [8, 9]]
REFS = [None] * 3
# "correct" = the completion's first token id is even: a verifier both models hit often
JUDGE = sweeps.Judge(decode=lambda ids: str(ids[0] if ids else 1),
                     verify=lambda texts, refs: np.array([int(t) % 2 == 0 for t in texts],
                                                         np.float32))
COMMON = dict(n=4, sampling_params=SamplingParams(max_new_tokens=8), rng=jax.random.key(5),
              ks=(1, 4), page_size=4)


def test_calibrate():
    scores = np.array([0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert sweeps.calibrate(scores, 0.0) == float("inf")
    assert sweeps.calibrate(scores, 1.0) == float("-inf")
    assert sweeps.calibrate(np.array([]), 0.5) == float("inf")
    for budget in (0.125, 0.25, 0.5):  # no ties at these cuts: exactly the budget fires
        assert np.mean(scores >= sweeps.calibrate(scores, budget)) == budget
    # between two scores the cut rounds up (the "higher" quantile): at most the budget ...
    assert np.mean(scores >= sweeps.calibrate(scores, 0.7)) == 0.625
    # ... except that a cut inside a tie keeps the whole tie
    assert np.mean(scores >= sweeps.calibrate(scores, 0.8)) == 1.0


def test_budget_and_gamma_sweeps_hit_their_extremes():
    pure = {r["policy"]: r for r in sweeps.pure_rows(BASE, RL, PROMPTS, REFS, JUDGE, **COMMON)}
    assert pure["base"]["accuracy"] != pure["rl"]["accuracy"]  # the checks below can tell
    rows = sweeps.budget_sweep(BASE, RL, PROMPTS, REFS, JUDGE, criteria=("random", "js"),
                               budgets=(0.25, 1.0), direction="forward", **COMMON)
    by = {(r["criterion"], r["budget"]): r for r in rows}
    for criterion in ("random", "js"):
        full = by[(criterion, 1.0)]  # threshold -inf, same key: the RL model's own samples
        assert full["realised_fraction"] == 1.0
        assert (full["accuracy"], full["pass@4"]) == (pure["rl"]["accuracy"],
                                                      pure["rl"]["pass@4"])
    # random at 0.25: each of the 96 positions fires with probability 1/4
    assert 0.1 < by[("random", 0.25)]["realised_fraction"] < 0.4
    gamma = sweeps.gamma_sweep(BASE, RL, PROMPTS, REFS, JUDGE, gammas=(0.0,), where="all",
                               **COMMON)
    assert gamma[0]["accuracy"] == pure["rl"]["accuracy"] and gamma[0]["realised_fraction"] == 1


def test_summary_json_is_strict():
    doc = study.finite({"a": [1.0, float("-inf")], "b": {"c": float("nan"), "d": "x"}})
    assert doc == {"a": [1.0, None], "b": {"c": None, "d": "x"}}


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": -1.0}, "temperature"), ({"top_p": 0.0}, "top_p"),
    ({"gammas": (float("inf"),)}, "gamma"), ({"tau": float("nan")}, "tau"),
    ({"budgets": (0.0,)}, "budgets"), ({"criteria": ("magnitude",)}, "unknown criteria"),
    ({"ks": (5,)}, "every k"), ({"max_new_tokens": 0}, "max_new_tokens"),
])
def test_settings_are_checked_up_front(kwargs, message):
    with pytest.raises(ValueError, match=message):
        study.Settings(**kwargs)
