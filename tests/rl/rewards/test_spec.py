"""Composable rewards: weighted verifiers, option routing, correctness, checks before scoring."""

import numpy as np
import pytest

from rl import rewards
from rl.registry import RegistryError
from rl.rewards import RewardInputError, RewardSpec, pool
from rl.rewards.spec import parse_terms
from tests.rl.rewards import pool_verifiers  # noqa: F401 - registers "keyed"

COMPLETIONS = ["<think>a</think><answer>\\boxed{4}</answer>", "\\boxed{4}",
               "<answer>5</answer>", "nothing"]
REFERENCES = ["4"] * 4


def test_parse_terms():
    assert parse_terms("math") == (("math", 1.0),)
    assert parse_terms(" math:1.0 , format:0.1") == (("math", 1.0), ("format", 0.1))
    assert parse_terms("format:-0.5") == (("format", -0.5),)


@pytest.mark.parametrize("text, error, match", [
    ("", ValueError, "empty"),
    ("mth", RegistryError, "unknown verifier 'mth'"),
    ("math:x", ValueError, "is not a number"),
    ("math:inf", ValueError, "finite"),
    ("math,math:2", ValueError, "twice"),
])
def test_bad_terms(text, error, match):
    with pytest.raises(error, match=match):
        parse_terms(text)


@pytest.mark.parametrize("workers", [0, 2])
def test_weighted_sum_per_verifier_parts_and_correctness(workers):
    spec = RewardSpec.build("math:1.0,format:0.1", correct="math", workers=workers)
    out = spec.score(COMPLETIONS, REFERENCES)
    # independent reference: each verifier alone, then the weighted sum by hand
    math = rewards.score("math", COMPLETIONS, REFERENCES)
    fmt = rewards.score("format", COMPLETIONS, None)
    np.testing.assert_array_equal(math, [1, 1, 0, 0])
    np.testing.assert_array_equal(fmt, [1, 0, 1, 0])
    np.testing.assert_array_equal(out.parts["math"], math)
    np.testing.assert_array_equal(out.parts["format"], fmt)
    np.testing.assert_allclose(out.total, 1.0 * math + np.float32(0.1) * fmt, rtol=0, atol=0)
    assert out.total.dtype == np.float32
    np.testing.assert_array_equal(out.correct, [True, True, False, False])
    assert out.metrics() == {"reward/math": 0.5, "reward/format": 0.5, "reward/timeouts": 0,
                             "reward/crashes": 0}


def test_correct_names_the_verifier():
    out = RewardSpec.build("math:1.0,format:0.1", correct="format").score(COMPLETIONS,
                                                                           REFERENCES)
    np.testing.assert_array_equal(out.correct, [True, False, True, False])
    with pytest.raises(ValueError, match="rl.reward.correct"):
        RewardSpec.build("math:1.0,format:0.1")
    with pytest.raises(ValueError, match="not one of the verifiers"):
        RewardSpec.build("math", correct="format")
    assert RewardSpec.build("math").correct == "math"


def test_options_are_routed_to_the_verifier_that_has_them():
    spec = RewardSpec.build("math:1,format:0.5", {"pattern": ".*4.*", "search": "all"},
                            correct="math")
    assert spec.options == {"math": {"search": "all"}, "format": {"pattern": ".*4.*"}}
    out = spec.score(["<think>\\boxed{4}"], ["4"])
    np.testing.assert_array_equal(out.total, [1.5])  # search=all reads inside <think>


@pytest.mark.parametrize("terms, options, error, match", [
    ("math", {"require_all": True}, RegistryError, "not an option of math"),
    ("countdown:1,arithmetic:1", {"format_score": 0.1}, RegistryError, "both"),
    ("math", {"fallback": "yes"}, RewardInputError, "fallback"),
    ("format", {"pattern": "("}, RewardInputError, "not a valid regex"),
    ("countdown", {"format_score": float("nan")}, RewardInputError, "finite"),
])
def test_bad_options_fail_when_built(terms, options, error, match):
    with pytest.raises(error, match=match):
        RewardSpec.build(terms, options, correct=terms.split(":")[0])


@pytest.mark.parametrize("kwargs, match", [
    ({"workers": -1}, "workers"), ({"workers": 1.5}, "workers"), ({"timeout_s": 0}, "timeout"),
    ({"timeout_s": float("inf")}, "timeout"),
])
def test_bad_pool_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RewardSpec.build("math", **kwargs)


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_reference_raises_before_scoring(workers):
    spec = RewardSpec.build("countdown", workers=workers)
    with pytest.raises(RewardInputError, match="countdown reference"):
        spec.submit(["1"], [{"target": 1}])
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        spec.submit(["1", "2"], [{"target": 1, "numbers": [1]}])


def test_score_takes_one_verifier():
    with pytest.raises(ValueError, match="RewardSpec"):
        rewards.score("math:1,format:1", ["x"], ["1"])


def test_equal_escalations_are_scored_once(monkeypatch):
    sent = []
    add = pool.Pending.add
    monkeypatch.setattr(pool.Pending, "add", lambda self, items: (sent.extend(items),
                                                                  add(self, items)))
    references = ["pid", "one", "pid", "pid", "one", "pid"]
    out = RewardSpec.build("keyed", workers=2).score([f"c{i}" for i in range(6)], references)
    assert sorted(item[2] for item in sent) == ["one", "pid"]  # two items reach the pool
    pid = out.parts["keyed"][0]
    assert pid > 1  # a worker's process id, shared by every completion with that key
    np.testing.assert_array_equal(out.parts["keyed"], [pid, 1, pid, pid, 1, pid])


def test_a_shared_timeout_counts_for_every_completion_it_zeroes():
    references = ["sleep:30", "fine", "sleep:30", "sleep:30"]
    out = RewardSpec.build("keyed", workers=1, timeout_s=0.5).score(["a"] * 4, references)
    np.testing.assert_array_equal(out.parts["keyed"], [0, 1, 0, 0])
    assert (out.timeouts, out.crashes) == (3, 0)
