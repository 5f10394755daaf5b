"""Synchronous rollouts vs APRIL (2× the groups in flight, the step trains on the first
prompts_per_step to finish, partial samples carried over).

    python -m launch.sweep --config=configs/paper/rollout.py:tiny --workdir=runs/paper/rollout
"""

from configs.paper import _study
from configs.paper._study import TARGET, get_config  # noqa: F401 - the sweep's config


def get_sweep(arg: str | None = None):
    get_config(arg)
    # both GRPO with its KL (the variant APRIL is built on)
    return _study.runs([{"name": "sync", **_study.variant("grpo")},
                        {"name": "april", **_study.variant("april")}])
