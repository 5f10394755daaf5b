"""Generation engine: paged KV cache, flat group sampler, speculative decoding, LATR
branching, TreePO tree sampler, two-policy lockstep sampler, multi-turn rollouts.

    from sampling import generate, SamplingParams
    rollouts = generate(config, params, prompts, n=8,
                        sampling_params=SamplingParams(temperature=1.0, max_new_tokens=256),
                        rng=jax.random.key(0))

Design and measurements: docs/sampling.md. Depends only on `models`.
"""

from sampling.flat import generate
from sampling.latr import latr_generate
from sampling.latr_step import LatrConfig
from sampling.lockstep import Lockstep, MixRule, lockstep_generate
from sampling.params import SamplingParams
from sampling.rollouts import Rollouts
from sampling.spec_decode import SpecConfig
from sampling.tree import TreeConfig, tree_generate
from sampling.turns import TurnEnd, generate_turns

__all__ = ["LatrConfig", "Lockstep", "MixRule", "Rollouts", "SamplingParams", "SpecConfig",
           "TreeConfig", "TurnEnd", "generate", "generate_turns", "latr_generate",
           "lockstep_generate", "tree_generate"]
