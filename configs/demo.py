"""The embedded default: the `tiny` preset learns a procedural task on CPU.

    python -m launch.demo                         # what `make demo` runs
    python -m launch.train --config=configs/demo.py --workdir=/tmp/run
    python -m launch.train --config=configs/demo.py:tree --workdir=/tmp/tree
    python -m launch.train --config=configs/demo.py:dapo --workdir=/tmp/dapo
    python -m launch.train --config=configs/demo.py:tools --workdir=/tmp/tools

No downloads: the model is initialised from `seed`, the tokenizer is the
built-in byte tokenizer and the task is generated. A random-init model never
solves the task, so every run of this config first takes the supervised warm
start (`train.warm_start=sft`: 60 SFT steps, written to DIR/sft and reused
by a rerun) and then trains with RL.

The argument after the colon is a comma-separated list of:
  (nothing)   GRPO *without* its KL term (`rl.kl.coef=0`: no reference model;
              the demo measures the policy alone). This is the only place the
              demo changes an algorithm's own settings.
  <variant>   an algorithm variant (configs/variants.py: grpo, dr_grpo, dapo,
              gspo, rloo, reinforce_pp) with all its own settings, KL and
              update schedule included; `:grpo` is GRPO with its KL (β=0.04).
  tree        TreePO sampling and tree advantages, shaped for the demo's
              8-token answers: 2 segments of 4 tokens, 4 first branches each
              split in 2 (8 leaves per prompt, like `sampling.n=8`).
  tools       another task, which the tiny model can only learn with a tool:
              products of two 3-digit numbers ("123 * 456 = "), in episodes of
              up to 2 turns with a calculator (pythonic tool calls); the warm
              start's traces call it and copy its reply (docs/tools.md).
  no_tools    the same products without the tool (the control: the answer must
              be computed by the model itself).
  lora        RL trains rank-16 adapters on every linear layer of the frozen
              warm-started model instead of all its weights (docs/lora.md),
              with the 10x learning rate adapters need.
  <preset>    a model preset other than `tiny`.
The settings below are the measured run in the README.
"""

from configs import base, variants


def _tree(config) -> None:
    """TreePO on the demo task: leaves of at most max_new_tokens = 2 × 4 tokens."""
    config.sampling.sampler = "tree"
    config.sampling.page_size = 4
    config.sampling.tree.segment_len = 4
    config.sampling.tree.max_depth = 2
    config.sampling.tree.leaves_per_prompt = 8
    config.sampling.tree.first_branching = "4"
    config.sampling.tree.divergence = 2
    config.rl.advantage.name = "tree"


def _products(config, tools: bool) -> None:
    """3-digit products, with a calculator (2-turn episodes) or without."""
    config.data.task.name = "arithmetic"
    for key in ("num_numbers", "max_number", "max_target", "template"):
        config.data.task[key] = None  # countdown's
    config.data.task.digits = 3
    config.data.task.ops = "*"
    config.data.task.answer_template = "{}"
    if tools:
        config.rollout.max_turns = 2
        config.rollout.max_turn_tokens = 48
        config.sampling.max_new_tokens = 96
        config.env.tools = "calculator"
        config.env.parser = "pythonic"  # half the tokens of hermes for the same call
    else:
        config.sampling.max_new_tokens = 8
    config.train.steps = TOOLS_STEPS
    config.sft.steps = TOOLS_SFT_STEPS


OWN = ("tree", "tools", "no_tools", "lora")
LORA_LR = 7e-4  # 10x the full-parameter run's (adapters need it; docs/lora.md)
TOOLS_STEPS = 100
TOOLS_SFT_STEPS = 54


def _lora(config) -> None:
    """RL on adapters over the frozen warm start (the SFT stays full-parameter)."""
    config.lora.rank = 16
    config.lora.alpha = 32.0
    config.optim.lr = LORA_LR


def get_config(arg: str | None = None):
    tokens = [t for t in (arg or "").split(",") if t]
    tree = "tree" in tokens
    if "tools" in tokens and "no_tools" in tokens:
        raise ValueError("configs/demo.py: tools and no_tools are two runs, name one")
    preset, chosen = base.parse_arg(",".join(t for t in tokens if t not in OWN))
    config = base.build(preset)

    # Two-number countdown ("17, 23 -> 391: " -> "17 * 23"), numbers up to 30:
    # ~3,600 distinct problems, so the held-out split measures generalisation
    # (with numbers up to 9 the model memorises the train problems).
    config.data.task.name = "countdown"
    config.data.task.num_numbers = 2
    config.data.task.max_number = 30
    config.data.task.max_target = 1000
    config.data.task.template = "{numbers} -> {target}: "
    config.data.task.answer_template = "{}"
    config.data.heldout_size = 200

    config.sampling.n = 8
    config.sampling.temperature = 1.0
    config.sampling.max_new_tokens = 8
    config.sampling.segment_len = 16

    config.train.steps = 300
    config.train.prompts_per_step = 16
    config.train.eval_every = 25
    config.train.log_every = 10
    config.train.warm_start = "sft"
    config.optim.lr = 7e-5
    config.optim.warmup_steps = 5

    config.eval.size = 200
    config.eval.n = 4
    config.eval.k = "1,4"

    config.sft.steps = 60
    config.sft.batch_size = 64
    config.sft.lr = 3e-3
    config.sft.warmup_steps = 20
    config.sft.eval_every = 0

    variants.apply(config, "grpo")
    config.rl.kl.coef = 0.0  # the demo's default: GRPO without a reference model
    if tree:
        _tree(config)
    if "tools" in tokens or "no_tools" in tokens:
        _products(config, tools="tools" in tokens)
    if "lora" in tokens:
        _lora(config)
    for name in chosen:  # a named variant brings all its own settings, KL included
        variants.apply(config, name)
    config.lock()
    return config
