"""The multi-turn sections: `env` (the tools an episode may call) and `rl.multiturn` (how
a multi-turn batch is updated). Both act only with `rollout.max_turns` >= 1
(docs/tools.md)."""

import ml_collections


def env_section() -> ml_collections.ConfigDict:
    e = ml_collections.ConfigDict()
    # comma-separated tools (rl.envs.tools.TOOLS: calculator, python)
    e.tools = "calculator"
    e.parser = "hermes"  # how a turn's tool calls are read (rl.envs.parsers.PARSERS)
    # how a tool's output is written after the policy's turn: auto (the chat template's
    # tool-response format when the tokenizer has a template, else plain) | template | plain
    e.format = "auto"
    e.max_calls = 4             # tool calls run per turn (more are answered with an error)
    e.max_output_chars = 2000   # a tool's output is cut there
    # the python tool's sandbox, per call (rl.envs.sandbox.Limits)
    e.sandbox = ml_collections.ConfigDict()
    e.sandbox.wall_s = 10.0
    e.sandbox.cpu_s = 5
    e.sandbox.memory_mb = 512
    e.sandbox.output_bytes = 4096
    return e


def multiturn_section() -> ml_collections.ConfigDict:
    m = ml_collections.ConfigDict()
    # joint: one update on every policy token of the episode | seeupo: one update per
    # turn, in rl.multiturn.order, each turn's advantage scaled by the clipped sequence
    # ratios of the turns updated before it (SeeUPO; use advantage.name=seeupo)
    m.update = "joint"
    m.order = "reverse"        # seeupo: reverse (the paper's) | sequential
    m.factor_low = 0.2         # seeupo: the factor stays in [1 - low, 1 + high]
    m.factor_high = 0.2
    # Fission-GRPO: an episode with a failed tool call (a tool error or a call that does
    # not parse) is cut after its first failed turn and the tool's error reply; the cut
    # episode is a new prompt, kept in a last-in-first-out buffer; once the buffer holds
    # train.prompts_per_step of them, the most recent are sampled as new groups of
    # sampling.n and trained on in an extra update after the step's own
    m.fission = False
    m.fission_capacity = 64    # the buffer's size (the oldest are dropped)
    m.fission_every = 1        # at most one fission update every this many steps
    return m
