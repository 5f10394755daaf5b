"""Multi-turn training parts: turn ids, the verifier's answer span, warm-start traces,
episode metrics, the config checks, Fission-GRPO's corrective prompts and LIFO buffer
(NumPy / plain-Python references), and SeeUPO's turn-by-turn driver on a real learner."""

import dataclasses

import jax
import numpy as np
import optax
import pytest

import models
from configs import base
from models import byte_tokenizer
from models.tokenizer import load_tokenizer
from rl.envs.environment import Record, ToolEnvironment
from rl.envs.observations import ObservationFormat
from rl.envs.tools import TOOLS
from rl.train import fission, multiturn
from rl.train import learner as learner_lib
from rl.train.groups import Groups
from rl.train.turn_update import seeupo_update
from sampling.rollouts import Rollouts
from tests.rl.fault_config import set_keys
from tests.rl.train.test_learner import CONFIG, make_algorithm, make_batch


def ref_turn_ids(mask):
    out = np.full(mask.shape, -1)
    for r, row in enumerate(mask):
        turn, previous = -1, False
        for t, own in enumerate(row):
            turn += bool(own and not previous)
            out[r, t] = turn if own else -1
            previous = own
    return out


@pytest.mark.parametrize("seed", range(3))
def test_turn_ids_and_answer_start(seed):
    mask = np.random.default_rng(seed).random((6, 20)) < 0.6
    mask[0] = True
    np.testing.assert_array_equal(multiturn.turn_ids(mask), ref_turn_ids(mask))
    for row in mask:
        observed = [t for t in range(12) if not row[t]]
        assert multiturn.answer_start(row, 12) == (observed[-1] + 1 if observed else 0)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(str(byte_tokenizer.save_byte_tokenizer(tmp_path_factory.mktemp("t"))))


def env_for(tokenizer, parser):
    return ToolEnvironment([TOOLS.get("calculator")()], parser=parser,
                           fmt=ObservationFormat.plain(), tokenizer=tokenizer)


@pytest.mark.parametrize("parser", ["hermes", "pythonic"])
def test_trace_is_the_environment_episode(tokenizer, parser):
    env = env_for(tokenizer, parser)
    eos = byte_tokenizer.EOS_ID
    tokens, mask = multiturn.trace(env, tokenizer, eos, "850 * 636", "540600")
    mask = np.asarray(mask)
    assert multiturn.turn_ids(mask[None]).max() == 1  # two policy turns
    first = tokens[:np.argmin(mask)]
    assert first[-1] == eos and tokenizer.decode(first[:-1]).count("850 * 636") == 1
    observed = [t for t, own in zip(tokens, mask, strict=True) if not own]
    assert tokenizer.decode(observed) == ObservationFormat.plain().render(["540600"])
    assert tokens[multiturn.answer_start(mask, len(tokens)):] == tokenizer.encode("540600") + [eos]
    with pytest.raises(ValueError, match="failed"):
        multiturn.trace(env, tokenizer, eos, "1 / 0", "0")


def rollouts_with(mask, lengths, records, turns):
    r, n = mask.shape
    return Rollouts(tokens=np.arange(r * n).reshape(r, n), lengths=np.asarray(lengths),
                    logprobs=np.zeros((r, n)), raw_logprobs=np.zeros((r, n)),
                    prompt_index=np.zeros(r, np.int32), finish_reason=np.array(["stop"] * r),
                    stats={"turn_limit_rows": 1}, loss_mask=mask, turns=np.asarray(turns),
                    episodes=records)


def test_episode_stats_are_means_per_episode():
    mask = np.array([[1, 1, 0, 0, 1, 0], [1, 1, 1, 0, 0, 0]], bool)
    records = [Record(tool_calls=2, tool_errors=1, failure=(2, (5,))),
               Record(parse_failures=1)]
    out = rollouts_with(mask, [5, 3], records, [2, 1])
    np.testing.assert_array_equal(multiturn.answer_tokens(out, 0), [4])
    np.testing.assert_array_equal(multiturn.answer_tokens(out, 1), [6, 7, 8])
    stats = multiturn.episode_stats([out])
    assert stats == {"episode/turns": 1.5, "episode/tool_calls": 1.0,
                     "episode/parse_failures": 0.5, "episode/tool_errors": 0.5,
                     "episode/failed_frac": 0.5, "episode/policy_tokens": 3.0,
                     "episode/observed_tokens": 1.0, "episode/turn_limit_frac": 0.5}
    assert multiturn.episode_stats([dataclasses.replace(out, episodes=None)]) == {}


def config(**overrides):
    cfg = base.build("tiny")
    cfg.rollout.max_turns = 2
    set_keys(cfg, overrides)
    return cfg


@pytest.mark.parametrize("overrides,processes,message", [
    ({"rollout.max_turns": 0, "rl.multiturn.update": "seeupo"}, 1, "need rollout.max_turns"),
    ({"rollout.max_turns": 0, "rl.multiturn.fission": True}, 1, "need rollout.max_turns"),
    ({"rl.multiturn.update": "turnwise"}, 1, "rl.multiturn.update must be"),
    ({"rollout.max_turns": -1}, 1, "must be >= 0"),
    ({"rl.multiturn.order": "random"}, 1, "rl.multiturn.order must be"),
    ({"rl.multiturn.factor_low": 1.0}, 1, "factor_low"),
    ({"rl.multiturn.fission": True, "rl.multiturn.fission_capacity": 1}, 1, "capacity"),
    ({"rollout.max_turn_tokens": 999}, 1, "more than the episode's budget"),
    ({"rollout.mode": "async"}, 1, "rollout.mode=async"),
    ({"rollout.april": True}, 1, "rollout.april"),
    ({}, 2, "2 processes"),
    ({"env.tools": ""}, 1, "env.tools is empty"),
    ({"env.tools": "calculator,shell"}, 1, "shell"),
    ({"env.parser": "xml"}, 1, "xml"),
    ({"env.format": "json"}, 1, "env.format must be"),
    ({"env.max_calls": 0}, 1, "env.max_calls"),
    ({"env.sandbox.memory_mb": 0}, 1, "memory_mb"),
])
def test_check_refuses_in_one_line(overrides, processes, message):
    with pytest.raises((ValueError, KeyError)) as error:
        multiturn.check(config(**overrides), tree=False, processes=processes)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_check_accepts_a_tools_run():
    multiturn.check(config(**{"rl.multiturn.update": "seeupo", "rl.multiturn.fission": True}),
                    tree=False, processes=1)
    multiturn.check(base.build("tiny"), tree=True, processes=2)  # single-turn


# -- Fission-GRPO ------------------------------------------------------------------------

def groups_with_failures():
    kept = Groups()
    mask = np.ones((4, 9), bool)
    records = [Record(failure=(3, (70, 71))), None or Record(), Record(failure=(5, (72,))),
               Record(failure=(2, (73,)))]
    out = rollouts_with(mask, [6, 4, 9, 5], records, [2, 1, 2, 2])
    kept.add([1, 2], [(out, np.array([0, 1]), 0)], reference="a")
    kept.add([3], [(out, np.array([2, 3]), 0)], reference="b")
    kept.valid[3] = False  # a padding row is never harvested
    return kept, out


def test_harvest_cuts_after_the_first_failed_turn_and_its_reply():
    kept, out = groups_with_failures()
    items = fission.harvest(kept)
    assert items == [fission.Item((1, 2) + tuple(out.tokens[0, :3]) + (70, 71), "a"),
                     fission.Item((3,) + tuple(out.tokens[2, :5]) + (72,), "b")]
    with pytest.raises(ValueError, match="does not fit"):
        fission.corrective([1], [5, 6], (3, (7,)))


@pytest.mark.parametrize("seed", range(3))
def test_buffer_is_lifo_with_a_capacity(seed):
    rng = np.random.default_rng(seed)
    buffer, model, counter = fission.Buffer(5), [], 0
    for _ in range(30):
        if rng.random() < 0.6:
            new = [fission.Item((counter + i,), None) for i in range(rng.integers(0, 4))]
            counter += len(new)
            dropped = buffer.push(new)
            model += new
            assert dropped == max(0, len(model) - 5)
            model = model[-5:]
        else:
            k = int(rng.integers(0, 4))
            assert buffer.pop(k) == model[::-1][:k]
            model = model[:max(0, len(model) - k)]
        assert buffer.items == model
    restored = fission.Buffer(5)
    restored.set_state(buffer.state())
    assert restored.items == buffer.items


# -- SeeUPO's driver -----------------------------------------------------------------------

def test_seeupo_update_reverse_turns_and_factor():
    """Two turns per row: the driver steps on turn 1 then turn 0, the second step's π_old
    is the policy after the first, and its advantages carry the factor computed (NumPy,
    from the learner's scores) from turn 1's sequence ratio."""
    alg = make_algorithm(**{"kl.coef": 0.0})
    learner = learner_lib.Learner(CONFIG, alg, optax.sgd(0.5))
    params = models.init(CONFIG, jax.random.key(0))
    fresh = lambda: learner.init_state(models.init(CONFIG, jax.random.key(0)),  # noqa: E731
                                       jax.random.key(1))  # train_step donates its state
    batch = make_batch(n=8, c=8, group=2)
    mask = batch["mask"].copy()
    mask[:, 3] = False  # a reply at position 3: turn 0 before, turn 1 after
    mask[1, 4:] = False  # row 1: one turn only
    turn_ids = multiturn.turn_ids(mask)
    adv = np.where(mask, batch["advantages"], 0).astype(np.float32)
    sequences = {k: batch[k] for k in ("prompts", "prompt_lens", "completion")} | {"mask": mask}
    ref = batch["ref_logp"]

    def inputs(m, a, old):
        return {"mask": m, "advantages": a, "old_logp": old, "ref_logp": ref}

    old = np.asarray(learner.score(params, sequences)[0])
    state, _, extra = seeupo_update(learner, fresh(), sequences, inputs, mask, adv, old,
                                    turn_ids, low=0.2, high=0.2)
    assert extra["seeupo/turn_updates"] == 2

    # the same two steps by hand, the factor from NumPy
    m1, m0 = mask & (turn_ids == 1), mask & (turn_ids == 0)
    s1, _ = learner.train_step(fresh(), sequences | inputs(m1, np.where(m1, adv, 0), old))
    new1 = np.asarray(learner.score(s1.params, sequences)[0], np.float64)
    count = m1.sum(1)
    log_ratio = np.clip(np.where(count > 0, ((new1 - old) * m1).sum(1) / np.maximum(count, 1),
                                 0), -10, 10)
    factor = np.where(count > 0, np.clip(np.clip(np.exp(log_ratio), 0.8, 1.2), 0.8, 1.2), 1.0)
    assert factor[1] == 1.0 and np.any(factor != 1.0)
    old0 = np.asarray(learner.score(s1.params, sequences)[0])
    s0, _ = learner.train_step(s1, sequences | inputs(
        m0, np.where(m0, adv * factor[:, None], 0).astype(np.float32), old0))
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(s0.params), strict=True):
        # the factor in fp32 (driver) vs fp64 (here): its rounding in each advantage
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)
