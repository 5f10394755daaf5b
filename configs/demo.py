"""The embedded default: the `tiny` preset learns a procedural task on CPU.

    python -m launch.demo                         # SFT warm start, then GRPO
    python -m launch.train --config=configs/demo.py --workdir=/tmp/run
    python -m launch.train --config=configs/demo.py:dapo --workdir=/tmp/dapo

No downloads: the model is initialised from `seed`, the tokenizer is the
built-in byte tokenizer and the task is generated. The argument after the
colon picks an algorithm variant (configs/variants.py); default grpo
(without its KL term). The settings below are the measured run in the README.
"""

from configs import base, variants


def get_config(arg: str | None = None):
    preset, chosen = base.parse_arg(arg)
    config = base.build(preset)
    variants.apply(config, "grpo")
    for name in chosen:
        variants.apply(config, name)

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
    config.optim.lr = 7e-5
    config.optim.warmup_steps = 5
    config.rl.kl.coef = 0.0  # no reference model: the demo measures the policy alone

    config.eval.size = 200
    config.eval.n = 4
    config.eval.k = "1,4"

    config.sft.steps = 60
    config.sft.batch_size = 64
    config.sft.lr = 3e-3
    config.sft.warmup_steps = 20
    config.sft.eval_every = 0
    config.lock()
    return config
