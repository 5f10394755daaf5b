"""LATR's device rules (`sampling.latr_rules`) against plain-Python references."""

import jax.numpy as jnp
import numpy as np
import pytest

from sampling import latr_rules
from tests.sampling.latr_reference import edit_distance


@pytest.mark.parametrize("r", [1, 3, 20])
def test_levenshtein_matches_the_dynamic_programme(r):
    rng = np.random.default_rng(r)
    a = rng.integers(0, 3, (64, r))  # a small alphabet: many matches, every edit kind
    b = np.where(rng.random((64, r)) < 0.5, a, rng.integers(0, 3, (64, r)))
    got = np.asarray(latr_rules.levenshtein(jnp.asarray(a), jnp.asarray(b)))
    want = [edit_distance(x.tolist(), y.tolist()) for x, y in zip(a, b, strict=True)]
    np.testing.assert_array_equal(got, want)


def _match_reference(candidate, free, group, order):
    parent = list(range(len(group)))
    suppressed = 0
    for g in set(group[group >= 0].tolist()):
        slots = [s for s in range(len(group)) if group[s] == g and free[s]]
        cands = sorted((c for c in range(len(group)) if group[c] == g and candidate[c]),
                       key=lambda c: order[c])
        for slot, c in zip(slots, cands):
            parent[slot] = c
        suppressed += max(0, len(cands) - len(slots))
    return np.array(parent), suppressed


@pytest.mark.parametrize("seed", range(4))
def test_match_fills_each_groups_free_slots_oldest_candidate_first(seed):
    rng = np.random.default_rng(seed)
    s = 24
    group = np.where(rng.random(s) < 0.1, -1, rng.integers(0, 3, s))
    free = (rng.random(s) < 0.4) & (group >= 0)
    candidate = ~free & (rng.random(s) < 0.5) & (group >= 0)
    order = rng.permutation(s)
    parent, born, suppressed = latr_rules.match(*map(jnp.asarray,
                                                     (candidate, free, group, order)))
    want, want_suppressed = _match_reference(candidate, free, group, order)
    np.testing.assert_array_equal(np.asarray(parent), want)
    np.testing.assert_array_equal(np.asarray(born), want != np.arange(s))
    assert int(suppressed) == want_suppressed


def test_descendants_follow_parent_links_of_alive_rows():
    parent = jnp.array([-1, 0, 1, 2, 0, -1, 5, 3])
    alive = jnp.array([True, True, True, True, True, True, True, False])
    kill = jnp.zeros(8, bool).at[1].set(True)
    got = np.asarray(latr_rules.descendants(kill, alive, parent))
    np.testing.assert_array_equal(got, [0, 1, 1, 1, 0, 0, 0, 0])  # 7 is not alive


def test_prune_compares_a_branch_with_its_parent_at_the_lookahead_points():
    # history ring of 8 steps; at t = 8 a branch born at 4 has 4 tokens (steps 4..7)
    base = [5, 5, 5, 5, 1, 2, 3, 4]
    history = jnp.array([base,                       # 0: root
                         base[:4] + [9, 2, 3, 4],    # 1: child of 0, distance 1/4: pruned
                         base[:4] + [9, 8, 7, 6],    # 2: child of 0, distance 4/4: kept
                         base[:4] + [9, 2, 3, 0],    # 3: child of 0, stop token 0: skipped
                         base[:4] + [9, 2, 3, 4],    # 4: born at 5 (3 tokens): not due
                         base[:4] + [9, 2, 3, -1]])  # 5: stopped before step 7: skipped
    parent = jnp.array([-1, 0, 0, 0, 0, 0])
    birth = jnp.array([0, 4, 4, 4, 5, 4])
    args = (history, 8, jnp.ones(6, bool), parent, birth, jnp.array([0]))
    got = latr_rules.prune(*args, jnp.zeros(16, bool), (4,), 0.4)
    np.testing.assert_array_equal(np.asarray(got), [0, 1, 0, 0, 0, 0])
    # the parent's token at the branch point (step 4) is 1: exempt, nothing is pruned
    got = latr_rules.prune(*args, jnp.zeros(16, bool).at[1].set(True), (4,), 0.4)
    np.testing.assert_array_equal(np.asarray(got), [0, 0, 0, 0, 0, 0])
    # a lookahead point the branch is not at checks nothing; one it is at does
    got = latr_rules.prune(*args, jnp.zeros(16, bool), (2, 5), 0.4)
    np.testing.assert_array_equal(np.asarray(got), [0, 0, 0, 0, 0, 0])
    got = latr_rules.prune(*args, jnp.zeros(16, bool), (3,), 0.4)
    np.testing.assert_array_equal(np.asarray(got), [0, 0, 0, 0, 1, 0])  # steps 5..7 equal


def test_full_counts_finished_groups_as_full_and_waits_for_young_rows():
    group = jnp.array([0, 0, 0, 1, 1, 1])
    tree = jnp.ones(6, bool)
    parent = jnp.array([-1, 0, -2, -1, 3, 3])
    alive = jnp.array([True, True, False, True, True, False])
    birth = jnp.array([0, 2, 0, 0, 3, 0])
    args = (alive, jnp.zeros(6, bool), tree, group, parent, birth)
    assert bool(latr_rules.full(*args, 20, 3, 4, 10))       # 2 + 2 rows >= 4, all settled
    assert not bool(latr_rules.full(*args, 20, 3, 5, 10))   # 4 < 5
    assert not bool(latr_rules.full(*args, 13, 3, 4, 10))   # row 4 born at 3: 3 + 10 >= 13
    finished = jnp.array([True, True, False, False, False, False])
    args = (alive, finished, tree, group, parent, birth)
    assert bool(latr_rules.full(*args, 20, 3, 5, 10))       # group 0 finished: 3 + 2 rows
