"""Multi-turn rollouts (`sampling.turns`): replies appended onto the rows' pages give the
log-probs of one teacher-forced forward pass over the whole token sequence, whatever the
gaps the turns and replies leave in the pages; the schedule and the limits hold."""

import jax
import numpy as np
import pytest

import models
from sampling.params import SamplingParams
from sampling.turns import TurnEnd, generate_turns
from tests.sampling.test_tree import teacher_forced
from tests.tolerances import fp32_atol

pytestmark = pytest.mark.slow

STOPS = tuple(range(7, 40))  # frequent turn ends on random weights


@pytest.fixture(scope="module")
def tiny():
    config = models.get_preset("tiny")
    return config, models.init(config, jax.random.key(0))


class Env:
    """Replies of 1-9 tokens made from the turn's tokens; row i's episode ends (None) at
    its (i % 3 + 1)-th turn end. Records every call."""

    def __init__(self):
        self.calls, self.ends = [], {}

    def __call__(self, ends):
        self.calls.append([e.row for e in ends])
        replies = []
        for e in ends:
            count = self.ends[e.row] = self.ends.get(e.row, 0) + 1
            if count > e.row % 3:
                replies.append(None)
            else:
                size = (sum(e.tokens) + e.row) % 9 + 1
                replies.append([(t * 31 + 5 + j) % 400 + 100 for j, t in
                                enumerate((list(e.tokens) * size)[:size])])
        return replies


def prompts_of(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 512, k).tolist() for k in lengths]


@pytest.mark.parametrize("n", [3, 1])
def test_logprobs_of_the_whole_sequence_match_teacher_forcing(tiny, n):
    """n = 1 decodes through the dense view (one row per group), n > 1 through the shared
    pages; segments of 2 pages; replies of 1-9 tokens, shorter and longer than a page."""
    page_size, segment_len = 4, 8
    config, params = tiny
    prompts = prompts_of([5, 11, 3])
    env = Env()
    sp = SamplingParams(temperature=1.0, max_new_tokens=60, stop_token_ids=STOPS)
    ro = generate_turns(config, params, prompts, n, sp, jax.random.key(1), env,
                        max_turns=4, max_turn_tokens=24, page_size=page_size,
                        segment_len=segment_len)
    assert len(ro) == 3 * n and ro.stats["extend_calls"] > 0
    completions = [ro.completion(r) for r in range(len(ro))]
    refs = teacher_forced(config, params, [prompts[i] for i in ro.prompt_index], completions)
    replied = 0
    for r, ref in enumerate(refs):
        mask = ro.loss_mask[r, :ro.lengths[r]]
        replied += int((~mask).sum())
        # paged decode and extend vs one full forward: other summation orders
        np.testing.assert_allclose(ro.raw_logprobs[r, :ro.lengths[r]][mask], ref[mask],
                                   atol=fp32_atol(ref, config.mlp_dim), rtol=0)
        assert np.all(ro.raw_logprobs[r][~ro.loss_mask[r]] == 0.0)
        assert ro.turns[r] == 1 + sum(1 for c in env.calls for row in c if row == r) - (
            ro.finish_reason[r] == "stop")
    assert replied == ro.stats["observed_tokens"] > 0


def test_turns_replies_and_limits(tiny):
    config, params = tiny
    prompts = prompts_of([4, 7], seed=2)
    env = Env()
    sp = SamplingParams(temperature=1.0, max_new_tokens=40, stop_token_ids=STOPS)
    ro = generate_turns(config, params, prompts, 3, sp, jax.random.key(3), env,
                        max_turns=2, max_turn_tokens=10, page_size=4, segment_len=8)
    for r in range(len(ro)):
        tokens, mask = ro.completion(r), ro.loss_mask[r, :ro.lengths[r]]
        assert ro.lengths[r] <= 40 and ro.turns[r] <= 2
        # turns: runs of the policy's tokens, each at most 10, each but an unfinished last
        # one ending with a stop token; the replies between them
        runs = np.split(np.arange(len(tokens)), np.flatnonzero(np.diff(mask.astype(int))) + 1)
        turns = [run for run in runs if mask[run[0]]]
        assert len(turns) == ro.turns[r] and all(len(t) <= 10 for t in turns)
        for t in turns[:-1]:
            assert tokens[t[-1]] in STOPS
        if ro.finish_reason[r] == "stop":
            assert tokens[turns[-1][-1]] in STOPS
    assert set(ro.finish_reason) <= {"stop", "length"}
    assert ro.stats["turn_limit_rows"] == sum(
        1 for r in range(len(ro)) if ro.turns[r] == 2 and ro.finish_reason[r] == "length"
        and ro.completion(r)[-1] in STOPS)


def test_the_same_inputs_give_the_same_rollouts(tiny):
    config, params = tiny
    sp = SamplingParams(temperature=1.0, max_new_tokens=30, stop_token_ids=STOPS)
    runs = [generate_turns(config, params, prompts_of([6, 9]), 2, sp, jax.random.key(4), Env(),
                           max_turns=3, max_turn_tokens=12, page_size=4, segment_len=8)
            for _ in range(2)]
    np.testing.assert_array_equal(runs[0].tokens, runs[1].tokens)
    np.testing.assert_array_equal(runs[0].logprobs, runs[1].logprobs)


def test_bad_replies_and_limits_are_refused(tiny):
    config, params = tiny
    sp = SamplingParams(temperature=1.0, max_new_tokens=30, stop_token_ids=STOPS)
    with pytest.raises(ValueError, match="max_turns and max_turn_tokens must be >= 1"):
        generate_turns(config, params, [[1, 2]], 1, sp, jax.random.key(0), Env(), max_turns=0,
                       max_turn_tokens=4)
    sp = SamplingParams(temperature=1.0, max_new_tokens=30, stop_token_ids=tuple(range(512)))
    with pytest.raises(ValueError, match="answered row 0 with no tokens"):
        generate_turns(config, params, [[1, 2]], 1, sp, jax.random.key(0),
                       lambda ends: [[] for _ in ends], max_turns=3, max_turn_tokens=8,
                       page_size=4, segment_len=8)
    with pytest.raises(ValueError, match="answered 0 of 1 turns"):
        generate_turns(config, params, [[1, 2]], 1, sp, jax.random.key(0), lambda ends: [],
                       max_turns=3, max_turn_tokens=8, page_size=4, segment_len=8)
    assert TurnEnd(0, (1,)).tokens == (1,)
