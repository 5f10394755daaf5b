"""Procedural tasks: determinism, disjoint splits, and solutions the verifiers accept."""

import numpy as np
import pytest

from rl import rewards
from rl.data import tasks
from rl.registry import RegistryError


@pytest.mark.parametrize("name,options", [
    ("countdown", {}), ("countdown", {"num_numbers": 4, "max_number": 50, "max_target": 500}),
    ("arithmetic", {}), ("arithmetic", {"digits": 5, "ops": "*"}),
])
def test_solutions_score_one_and_splits_are_disjoint(name, options):
    task = tasks.make(name, **options)
    train = [task.example(i, "train") for i in range(600)]
    heldout = [task.example(i, "heldout") for i in range(200)]
    for split in (train, heldout):
        scores = rewards.score(task.reward, [e.solution for e in split],
                               [e.reference for e in split])
        np.testing.assert_array_equal(scores, 1.0)
    assert not {e.uid for e in train} & {e.uid for e in heldout}
    assert all(task.in_split(e.uid, "heldout") for e in heldout)
    assert not any(task.in_split(e.uid, "heldout") for e in train)


def test_examples_are_pure_functions_of_seed_split_index():
    a, b = tasks.make("countdown"), tasks.make("countdown")
    assert [a.example(i) for i in range(20)] == [b.example(i) for i in range(20)]
    assert a.example(3, "train") != a.example(3, "heldout")
    other = tasks.make("countdown", seed=1)
    assert [a.example(i).uid for i in range(20)] != [other.example(i).uid for i in range(20)]


def test_heldout_fraction_is_respected():
    task = tasks.make("arithmetic", digits=4, heldout_fraction=0.25)
    uids = {task.example(i, "train").uid for i in range(400)} | {
        task.example(i, "heldout").uid for i in range(400)}
    rate = np.mean([tasks.heldout_bucket(u, 0) < 0.25 for u in uids])
    assert 0.4 < rate < 0.6  # half the examples were drawn from each split
    fresh = [f"arithmetic:{i}+{i}" for i in range(4000)]
    assert abs(np.mean([tasks.heldout_bucket(u, 0) < 0.25 for u in fresh]) - 0.25) < 0.03


def test_countdown_problems_use_the_given_numbers_and_bounds():
    task = tasks.make("countdown", num_numbers=4, max_number=9, max_target=30)
    for i in range(200):
        ex = task.example(i)
        assert len(ex.reference["numbers"]) == 4
        assert all(1 <= n <= 9 for n in ex.reference["numbers"])
        assert 1 <= ex.reference["target"] <= 30
        assert str(ex.reference["target"]) in ex.prompt
        # the solution uses every number exactly once
        assert rewards.score("countdown", [ex.solution], [ex.reference], require_all=True)[0] == 1


def test_templates_and_errors():
    task = tasks.make("arithmetic", template="Q: {a}{op}{b}\nA:", answer_template="{}")
    ex = task.example(0)
    assert ex.prompt.startswith("Q: ") and ex.solution == str(ex.reference)
    with pytest.raises(RegistryError, match="unknown task 'sudoku'"):
        tasks.make("sudoku")
    with pytest.raises(RegistryError, match="'countdown' has no option 'digits'"):
        tasks.make("countdown", digits=3)
    with pytest.raises(ValueError, match="num_numbers must be in"):
        tasks.make("countdown", num_numbers=1)
    with pytest.raises(ValueError, match="ops must be"):
        tasks.make("arithmetic", ops="/")
    with pytest.raises(ValueError, match="unknown split 'test'"):
        task.example(0, "test")
    with pytest.raises(RuntimeError, match="no heldout problem"):
        tasks.make("arithmetic", heldout_fraction=0.0).example(0, "heldout")
