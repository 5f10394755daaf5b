"""APRIL bookkeeping (rl.train.april) on synthetic rollouts: over-provisioning, the stop
rule, split/resume/join round trips, staleness, the checkpoint state, errors; and a
multi-step loop against a fake segment-wise sampler."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from rl.train import april

MAX_NEW = 12


def fake_rollouts(rows, width=MAX_NEW):
    """Rollouts-like arrays from [(tokens, logprobs, finish)]."""
    out = SimpleNamespace(tokens=np.zeros((len(rows), width), np.int32),
                          logprobs=np.zeros((len(rows), width), np.float32),
                          lengths=np.array([len(t) for t, _, _ in rows], np.int32),
                          finish_reason=np.array([f for _, _, f in rows]))
    for r, (tokens, logp, _) in enumerate(rows):
        out.tokens[r, :len(tokens)] = tokens
        out.logprobs[r, :len(tokens)] = logp
    out.raw_logprobs = out.logprobs * 2
    return out


def test_over_provision():
    assert april.over_provision(8, 2.0) == 16
    assert april.over_provision(10, 1.1) == 11  # not 12 from 11.000000000000002
    assert april.over_provision(3, 1.5) == 5
    assert april.over_provision(4, 1) == 4
    assert april.over_provision(np.int64(4), np.float32(1.25)) == 5
    for ratio in (0.5, float("nan"), float("inf"), True, "2"):
        with pytest.raises(ValueError, match="rollout.over_provision must be a finite number >= 1"):
            april.over_provision(4, ratio)
    for target in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="target_groups must be an int >= 1"):
            april.over_provision(target, 2.0)


def test_stop_rule_counts_whole_groups():
    stop = april.stop_rule(2, 3)  # rows prompt-major, 3 per group
    assert not stop(np.array([1, 1, 0, 1, 1, 1, 0, 0, 0], bool))   # one group complete
    assert stop(np.array([1, 1, 1, 1, 1, 1, 0, 0, 0], bool))       # two
    assert not stop(np.array([1, 1, 0, 1, 0, 1, 1, 0, 1], bool))   # none: rows, not groups
    # carried groups: 1 finished before the call; group 0 resumes 1 row, group 2 resumes 2;
    # fresh groups 3 and 4 have 2 rows each
    carry = april.Carry(MAX_NEW, [_group([(3, "partial"), (5, "stop")]), _group([(4, "stop")]),
                                  _group([(2, "partial"), (6, "partial")])])
    ids = april.row_groups(carry, 2, 2)
    np.testing.assert_array_equal(ids, [0, 2, 2, 3, 3, 4, 4])
    stop = april.stop_rule(3, ids, finished=carry.num_finished)
    assert carry.num_finished == 1
    assert not stop(np.array([1, 1, 0, 0, 1, 0, 0], bool))  # 1 + group 0
    assert stop(np.array([1, 0, 0, 1, 1, 0, 0], bool))      # 1 + groups 0, 3
    assert stop(np.array([0, 1, 1, 0, 0, 1, 1], bool))      # 1 + groups 2, 4
    with pytest.raises(ValueError, match="row_groups has 7 rows, done has 3"):
        stop(np.ones(3, bool))


def _group(rows, born=0, prompt=(7, 8), version=None):
    """A group whose row i has rows[i] = (length, finish); tokens i*100 + position."""
    version = born if version is None else version
    return april.Group(list(prompt), "ref", [
        april.Row(np.arange(k, dtype=np.int32) + 100 * i, -np.arange(k, dtype=np.float32) / 8,
                  -np.arange(k, dtype=np.float32) / 4, np.full(k, version, np.int32), f)
        for i, (k, f) in enumerate(rows)], born)


def test_split_resume_join_reconstruct_the_full_completions():
    rng = np.random.default_rng(0)
    n, prompts = 3, [[1, 2], [3], [4, 5, 6]]
    # the complete samples: (tokens, logprobs under the policy of the step that draws them)
    full = [[(rng.integers(0, 99, k), k, f) for k, f in ((5, "stop"), (12, "length"), (9, "stop"))]
            for _ in prompts]
    cut = 4  # step 0 stops after 4 tokens: longer rows are partial
    step0 = fake_rollouts([(t[:min(k, cut)], -np.arange(min(k, cut)) / 10.0,
                            f if k <= cut else "partial") for g in full for t, k, f in g])
    finished, unfinished = april.split_finished(step0, prompts, ["a", "b", "c"], n, 0)
    assert finished == [] and len(unfinished) == 3
    assert unfinished[1].reference == "b" and unfinished[1].prompt == [3]
    carry = april.Carry(MAX_NEW, unfinished)
    resumes, budgets = april.resume_requests(carry)
    assert len(resumes) == 9 and budgets.dtype == np.int64
    # all rows are partial except none (every k > 4): each resumes prompt + its 4 tokens
    for (g, j), prompt, budget in zip([(g, j) for g in range(3) for j in range(3)], resumes,
                                      budgets, strict=True):
        assert prompt == prompts[g] + full[g][j][0][:cut].tolist()
        assert budget == MAX_NEW - cut
    # step 1 continues every row to its end, under another policy (log-probs - 1)
    more = fake_rollouts([(t[cut:k], -np.arange(cut, k) / 10.0 - 1, f)
                          for g in full for t, k, f in g] + [([1], [0.0], "stop")])  # + fresh
    ready, carry = april.join(april.Carry(MAX_NEW, unfinished), more, 1)
    assert carry.groups == [] and len(ready) == 3
    assert unfinished[0].rows[0].finish == "partial"  # the inputs are not modified
    for g, group in enumerate(ready):
        assert group.finished and group.born == 0 and group.prompt == prompts[g]
        for j, row in enumerate(group.rows):
            tokens, k, f = full[g][j]
            np.testing.assert_array_equal(row.tokens, tokens[:k])
            want = np.where(np.arange(k) < cut, -np.arange(k) / 10.0, -np.arange(k) / 10.0 - 1)
            np.testing.assert_array_equal(row.logprobs, want.astype(np.float32))
            np.testing.assert_array_equal(row.raw_logprobs, 2 * want.astype(np.float32))
            np.testing.assert_array_equal(row.versions, np.where(np.arange(k) < cut, 0, 1))
            assert row.finish == f
    stats = april.staleness(ready, 1)
    total = sum(k for g in full for _, k, _ in g)
    assert stats == {"april/staleness_mean": pytest.approx(9 * cut / total),
                     "april/staleness_max": 1, "april/carried_token_frac": pytest.approx(
                         9 * cut / total), "april/carried_groups": 3}
    assert april.staleness(ready, 3)["april/staleness_max"] == 3
    assert april.staleness([], 3)["april/staleness_mean"] == 0.0
    with pytest.raises(ValueError, match="newer than current_version 0"):
        april.staleness(ready, 0)


def test_join_keeps_unfinished_groups_and_none_resumes_nothing():
    carry = april.Carry(MAX_NEW, [_group([(3, "stop"), (4, "partial")], born=0),
                                  _group([(2, "stop")], born=1),
                                  _group([(4, "partial"), (4, "partial")], born=1)])
    ready, rest = april.join(carry, None, 2)
    assert [g.born for g in ready] == [1] and [g.born for g in rest.groups] == [0, 1]
    more = fake_rollouts([([9, 9], [-1.0, -1.0], "partial"), ([5], [-0.5], "stop"),
                          ([6], [-0.5], "length")])
    ready, rest = april.join(carry, more, 2)
    assert [g.born for g in ready] == [1, 1] and [g.born for g in rest.groups] == [0]
    partial = rest.groups[0].rows[1]
    np.testing.assert_array_equal(partial.tokens, [100, 101, 102, 103, 9, 9])
    np.testing.assert_array_equal(partial.versions, [0, 0, 0, 0, 2, 2])
    assert partial.finish == "partial"
    assert [row.finish for row in ready[1].rows] == ["stop", "length"]


def test_select_takes_the_oldest_finished_and_keeps_the_surplus():
    old = _group([(3, "stop")], born=0, prompt=[1])
    mid = _group([(3, "stop")], born=1, prompt=[2])
    new = [_group([(3, "stop")], born=2, prompt=[p]) for p in (3, 4)]
    waiting = [_group([(3, "partial")], born=b, prompt=[p]) for b, p in ((2, 5), (0, 6))]
    taken, carry = april.select([old, mid] + new, waiting, 3, MAX_NEW)
    assert [g.prompt for g in taken] == [[1], [2], [3]]
    assert [g.prompt for g in carry.groups] == [[6], [4], [5]]  # by born, stable
    assert carry.num_finished == 1 and carry.max_new_tokens == MAX_NEW
    taken, carry = april.select([old], [], 3, MAX_NEW)  # fewer than target: all of them
    assert taken == [old] and carry.groups == []
    with pytest.raises(ValueError, match="select needs finished groups in ready"):
        april.select(waiting, [], 1, MAX_NEW)


def test_to_rollouts_and_versions():
    groups = [_group([(3, "stop"), (12, "length")], born=0, version=0),
              _group([(1, "stop"), (2, "stop")], born=1)]
    ro, versions = april.to_rollouts(groups, MAX_NEW)
    np.testing.assert_array_equal(ro.prompt_index, [0, 0, 1, 1])
    np.testing.assert_array_equal(ro.lengths, [3, 12, 1, 2])
    assert ro.completion(1) == list(range(100, 112))
    assert list(ro.finish_reason) == ["stop", "length", "stop", "stop"]
    np.testing.assert_array_equal(versions[0], [0, 0, 0] + [-1] * 9)
    np.testing.assert_array_equal(versions[3], [1, 1] + [-1] * 10)
    np.testing.assert_array_equal(ro.logprobs[1], groups[0].rows[1].logprobs)
    assert np.all(ro.logprobs[0, 3:] == 0) and ro.tokens.dtype == np.int32
    with pytest.raises(ValueError, match="a row has 12 tokens, more than width 8"):
        april.to_rollouts(groups, 8)


def test_state_json_round_trip_is_exact():
    rng = np.random.default_rng(1)
    g = _group([(5, "partial"), (7, "stop")], born=3)
    g.rows[0].logprobs = rng.normal(size=5).astype(np.float32)  # not short decimals
    g.reference = {"target": 24, "numbers": [1, 2, 3]}
    carry = april.Carry(MAX_NEW, [g, _group([(2, "length")], born=4)])
    back = april.state_from_json(json.loads(json.dumps(april.state_to_json(carry))))
    assert back.max_new_tokens == MAX_NEW and len(back.groups) == 2
    for a, b in zip(carry.groups, back.groups, strict=True):
        assert (a.prompt, a.reference, a.born) == (b.prompt, b.reference, b.born)
        for x, y in zip(a.rows, b.rows, strict=True):
            assert x.finish == y.finish
            for f in ("tokens", "logprobs", "raw_logprobs", "versions"):
                np.testing.assert_array_equal(getattr(x, f), getattr(y, f))
                assert getattr(x, f).dtype == getattr(y, f).dtype
    assert april.state_from_json(april.state_to_json(april.Carry(4))).groups == []
    with pytest.raises(ValueError, match="not an APRIL carry state"):
        april.state_from_json({"groups": []})


def test_resume_with_no_budget_left_is_an_error():
    with pytest.raises(ValueError, match="a carried partial row has 12 tokens: none left"):
        april.resume_requests(april.Carry(MAX_NEW, [_group([(12, "partial")])]))


# -- a multi-step loop against a fake segment-wise sampler ---------------------------------

def truth(pid, j):
    """The complete sample (tokens, finish) of row j of prompt `pid`: first token j;
    a long tail of lengths (a quarter run past 6 tokens, some past MAX_NEW)."""
    rng = np.random.default_rng(1000 * pid + j)
    k = int(rng.integers(1, 7) if rng.random() < 0.75 else rng.integers(7, 2 * MAX_NEW))
    tokens = [j] + rng.integers(10, 99, k - 1).tolist()
    return (tokens, "stop") if k <= MAX_NEW else (tokens[:MAX_NEW], "length")


def fake_generate(prompts, budgets, stop_when, version, seg=4):
    """Rows of n=1 requests; a prompt is [pid] + the row's tokens so far (the first
    token names the row). Decodes `seg` tokens per segment and asks `stop_when`."""
    seen, rows = {}, []
    for p in prompts:
        pid, done = p[0], p[1:]
        j = done[0] if done else seen.setdefault(pid, -1) + 1
        seen[pid] = j
        tokens, finish = truth(pid, j)
        assert tokens[:len(done)] == done
        rows.append((tokens[len(done):], finish, len(done)))
    budgets = np.asarray(budgets)
    ends = np.array([min(len(t), b) for (t, _, _), b in zip(rows, budgets, strict=True)])
    stop_at = MAX_NEW
    for s in range(seg, MAX_NEW, seg):  # every segment boundary but the last
        if stop_when(ends <= s):
            stop_at = s
            break
    out = []
    for (tokens, finish, at), end, budget in zip(rows, ends, budgets, strict=True):
        k = min(end, stop_at)
        if k < end:
            finish = "partial"
        elif k < len(tokens) or (finish == "length" and k == budget):
            finish = "length"
        out.append((tokens[:k], -np.arange(at, at + k) / 16 - version, finish))
    return fake_rollouts(out)


def test_steps_against_a_fake_sampler_train_on_whole_true_completions():
    target, n, ratio = 3, 2, 2.0
    carry, next_pid, taken_pids = april.Carry(MAX_NEW), 0, []
    seen = {"stale": 0.0, "resumed": 0, "skipped": 0, "surplus": 0}
    for step in range(8):
        if carry.num_finished < target:
            k = max(0, april.over_provision(target, ratio) - len(carry.groups))
            fresh = [[pid] for pid in range(next_pid, next_pid + k)]
            next_pid += k
            resumes, budgets = april.resume_requests(carry)
            seen["resumed"] += len(resumes)
            prompts = resumes + [p for p in fresh for _ in range(n)]
            budgets = np.concatenate([budgets, np.full(len(fresh) * n, MAX_NEW)])
            stop = april.stop_rule(target, april.row_groups(carry, len(fresh), n),
                                   finished=carry.num_finished)
            ro = fake_generate(prompts, budgets, stop, step)
            ready, carry = april.join(carry, ro, step)
            done, waiting = april.split_finished(ro, fresh, [p[0] for p in fresh], n, step,
                                                 start=len(resumes))
            ready, pending = ready + done, carry.groups + waiting
        else:
            seen["skipped"] += 1
            ready, carry = april.join(carry, None, step)
            pending = carry.groups
        seen["surplus"] += max(0, len(ready) - target)
        groups, carry = april.select(ready, pending, target, MAX_NEW)
        assert len(groups) == target
        for g in groups:
            assert g.reference == g.prompt[0] and g.born <= step
            for j, row in enumerate(g.rows):
                tokens, finish = truth(g.prompt[0], j)
                assert row.tokens.tolist() == tokens and row.finish == finish
                assert np.all(np.diff(row.versions) >= 0) and np.all(row.versions <= step)
                np.testing.assert_array_equal(  # each token's log-prob is its sampler's
                    row.logprobs, (-np.arange(len(tokens)) / 16 - row.versions).astype(
                        np.float32))
        stats = april.staleness(groups, step)
        assert 0 <= stats["april/staleness_mean"] <= stats["april/staleness_max"] <= step
        seen["stale"] = max(seen["stale"], stats["april/carried_token_frac"])
        taken_pids += [g.prompt[0] for g in groups]
        carry = april.state_from_json(json.loads(json.dumps(april.state_to_json(carry))))
    assert seen["stale"] > 0 and seen["resumed"] > 0 and seen["surplus"] > 0  # all paths ran
    assert len(set(taken_pids)) == len(taken_pids) == 8 * target  # none twice, none lost
    in_carry = [g.prompt[0] for g in carry.groups]
    assert sorted(taken_pids + in_carry) == list(range(next_pid))
