"""Acceptance: the log-probs the sampler records for a multi-turn tool rollout equal the
learner's teacher-forced log-probs of the full token sequence (`rl.train.learner.
token_logprobs`, one forward pass, fp32: to rounding), with Qwen2.5- and Llama-3.1-style
chat templates: prompts rendered with the tools declared, replies from the real
calculator in each template's tool-response format, appended as tokens."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models.tokenizer import load_tokenizer
from rl.envs.environment import Episodes, ToolEnvironment
from rl.envs.observations import ObservationFormat
from rl.envs.parsers import PARSERS, Parsed, ToolCall
from rl.envs.tools import Calculator
from rl.train.learner import token_logprobs
from sampling import SamplingParams, generate_turns
from tests.rl.envs.chat_templates import FAMILIES, tokenizer_dir
from tests.tolerances import fp32_atol

pytestmark = pytest.mark.slow

QUESTIONS = ["What is 123 * 456?", "Compute 17 * 389."]


def every_turn(text: str) -> Parsed:
    """Random weights write no tool calls: a turn calls the calculator on its length
    unless its text has a '3' (which ends the episode)."""
    if "3" in text:
        return Parsed()
    return Parsed((ToolCall("calculator", {"expression": f"{len(text)} * 7"}),))


if "test_every_turn" not in PARSERS:
    PARSERS.register("test_every_turn")(every_turn)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_sampler_logprobs_equal_the_learners_over_the_whole_conversation(tmp_path, family):
    tokenizer = load_tokenizer(tokenizer_dir(tmp_path, family))
    config = models.get_preset("tiny")
    params = models.init(config, jax.random.key(7))
    tool = Calculator()
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                             tools=[tool.schema], tokenize=True)
               for q in QUESTIONS]
    env = ToolEnvironment([tool], parser="test_every_turn",
                          fmt=ObservationFormat.from_template(tokenizer), tokenizer=tokenizer)
    n = 2
    episodes = Episodes(env, tokenizer, len(prompts) * n)
    # the template's turn end, and frequent other stops (random weights)
    sp = SamplingParams(temperature=1.0, max_new_tokens=96,
                        stop_token_ids=(tokenizer.eos_id,) + tuple(range(40, 80)))
    ro = generate_turns(config, params, prompts, n, sp, jax.random.key(1), episodes,
                        max_turns=4, max_turn_tokens=24, page_size=8, segment_len=16)
    assert sum(episodes.counts["tool_calls"]) > 0 and ro.stats["observed_tokens"] > 0
    # an episode the environment ended holds exactly its turns and replies (the offsets
    # Fission-GRPO cuts at)
    for r, record in enumerate(episodes.records):
        if ro.finish_reason[r] == "stop":
            assert record.consumed == ro.lengths[r]

    width = max(map(len, prompts))
    padded = np.zeros((len(prompts), width), np.int32)
    for i, p in enumerate(prompts):
        padded[i, :len(p)] = p
    logp, _ = token_logprobs(config, params, jnp.asarray(padded),
                             jnp.asarray([len(p) for p in prompts], jnp.int32),
                             jnp.asarray(ro.tokens))
    logp = np.asarray(logp)
    mask = ro.loss_mask & (np.arange(ro.tokens.shape[1]) < ro.lengths[:, None])
    # paged decode + extend vs the learner's one forward pass: other summation orders
    np.testing.assert_allclose(ro.raw_logprobs[mask], logp[mask],
                               atol=fp32_atol(logp[mask], config.mlp_dim), rtol=0)
    # every reply is the template's tool-response text around the calculator's output
    for r in range(len(ro)):
        replies = ro.tokens[r, :ro.lengths[r]][~ro.loss_mask[r, :ro.lengths[r]]]
        if len(replies):
            assert tokenizer.decode(replies.tolist(), skip_special_tokens=False).count(
                ObservationFormat.from_template(tokenizer).after) == ro.turns[r] - 1
