"""The batch API: lookup, option checks, shapes, dtype, error isolation."""

import pathlib
import re

import numpy as np
import pytest

import rl.rewards
from rl import rewards
from rl.registry import Registry, RegistryError
from rl.rewards import common
from rl.rewards.common import RewardInputError

BATCHES = {
    "countdown": (["<answer>2*3*4</answer>", "2*3", "", "<answer>1/0</answer>"],
                  [{"target": 24, "numbers": [2, 3, 4]}] * 4, [1, 0, 0, 0]),
    "arithmetic": (["42", "<answer>1/2</answer>", "none", "x = -3"],
                   [42, "0.5", 1, -3], [1, 1, 0, 1]),
    "math": ([r"\boxed{\frac{1}{2}}", "The answer is 3.", r"\boxed{", "nothing"],
             ["0.5", "3", "1", "1"], [1, 1, 0, 0]),
    "format": (["<answer>1</answer>", "<think>a</think><answer>b</answer>", "x", ""],
               [None] * 4, [1, 1, 0, 0]),
}


def test_names_and_get():
    assert set(rewards.names()) >= {"countdown", "arithmetic", "math", "format"}
    assert rewards.names() == sorted(rewards.names())
    for name in rewards.names():
        assert callable(rewards.get(name))


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_score_returns_float32_vector(name):
    completions, references, expected = BATCHES[name]
    got = rewards.score(name, completions, references)
    assert isinstance(got, np.ndarray)
    assert got.dtype == np.float32 and got.shape == (len(completions),)
    np.testing.assert_array_equal(got, np.asarray(expected, np.float32))


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_empty_batch(name):
    got = rewards.score(name, [], [])
    assert got.dtype == np.float32 and got.shape == (0,)


def test_accepts_tuples_and_generators():
    got = rewards.score("arithmetic", (c for c in ("1", "2")), ("1", "3"))
    np.testing.assert_array_equal(got, [1, 0])


def test_unknown_verifier_lists_names():
    with pytest.raises(RegistryError) as info:
        rewards.score("countdwn", ["1"], [None])
    message = str(info.value)
    assert "countdwn" in message
    for name in ("arithmetic", "countdown", "format", "math"):
        assert name in message
    with pytest.raises(RegistryError):
        rewards.get("nope")


def test_unknown_option_is_named():
    with pytest.raises(RegistryError, match="requre_all"):
        rewards.score("countdown", ["1"], [{"target": 1, "numbers": [1]}], requre_all=True)
    with pytest.raises(RegistryError, match="reference"):
        rewards.score("format", ["1"], [None], reference="x")


def test_length_mismatch():
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        rewards.score("arithmetic", ["1", "2"], [1])


def test_non_string_completion_scores_zero():
    got = rewards.score("arithmetic", [None, 42, b"42", "42"], [42] * 4)
    np.testing.assert_array_equal(got, [0, 0, 0, 1])


def test_exception_in_a_verifier_scores_zero(monkeypatch):
    def flaky(completion, reference, *, boom=False):
        if completion == "raise":
            raise RuntimeError("boom")
        if completion == "recurse":
            raise RecursionError
        if completion == "nan":
            return float("nan")
        return 1.0

    registry = Registry("verifier")  # a private registry: the real one stays untouched
    registry.register("flaky")(flaky)
    monkeypatch.setattr(common, "VERIFIERS", registry)
    got = rewards.score("flaky", ["ok", "raise", "recurse", "nan", "ok"], [None] * 5)
    np.testing.assert_array_equal(got, [1, 0, 0, 0, 1])


def test_bad_reference_is_not_swallowed():
    with pytest.raises(RewardInputError):
        rewards.score("arithmetic", ["1", "2"], [1, "not a number"])
    assert issubclass(RewardInputError, ValueError)


def test_no_eval_or_exec_in_rewards_package():
    package = pathlib.Path(rl.rewards.__file__).parent
    pattern = re.compile(r"\b(eval|exec|parse_expr|sympify)\s*\(")
    for path in package.glob("*.py"):
        assert not pattern.search(path.read_text()), path


def test_files_stay_small():
    package = pathlib.Path(rl.rewards.__file__).parent
    for path in package.glob("*.py"):
        assert len(path.read_text().splitlines()) < 400, path
