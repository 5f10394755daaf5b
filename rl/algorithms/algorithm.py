"""The algorithm a run uses, read and checked from the `config.rl` section.

`from_config(config.rl)` resolves every name (estimator, loss, KL kind,
reweighter, verifier) and checks every option that is set against the
component it is meant for, so a typo fails at start-up with one line naming
it, before any compute. Options left at None keep the component's default.
The off-policy correction (`rl.off_policy`) is carried as an
`rl.algorithms.off_policy.Correction`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rl import rewards
from rl.algorithms import advantages, kl, losses, reweighting
from rl.algorithms import off_policy as off_policy_lib
from rl.registry import RegistryError, check_kwargs, set_options

# compute()-level keys of the loss section (the rest go to the loss itself)
LOSS_COMMON = ("agg", "norm_length", "entropy_coef")
# RewardSpec-level keys of the reward section (the rest are the verifiers' options)
REWARD_COMMON = ("name", "correct", "workers", "timeout_s")


@dataclasses.dataclass(frozen=True)
class Algorithm:
    advantage: str
    advantage_options: Mapping[str, Any]
    loss: str
    loss_options: Mapping[str, Any]
    kl_kind: str
    kl_coef: float
    kl_clamp: float | None
    kl_in_reward: bool
    reweight: str | None
    reweight_options: Mapping[str, Any]
    reward: rewards.RewardSpec
    overlong_buffer: int = 0
    overlong_factor: float = 1.0
    overlong_filter: bool = False
    off_policy: off_policy_lib.Correction = off_policy_lib.Correction()

    @property
    def needs_reference(self) -> bool:
        """Whether the run keeps a frozen reference policy: a KL term, or a reweighter
        that reads the reference's log-probs."""
        return self.kl_coef > 0 or self.reweight in ("delta_logp_mask", "divergence_weighted")


def from_config(section: Any) -> Algorithm:
    """Validated `Algorithm` from a `config.rl` section; RegistryError/ValueError otherwise."""
    adv = set_options(section["advantage"])
    name = section["advantage"]["name"]
    check_kwargs("advantage estimator", name, advantages.ESTIMATORS.get(name).advantage, adv)

    loss = set_options(section["loss"])
    loss_name = section["loss"]["name"]
    own = {k: v for k, v in loss.items() if k not in LOSS_COMMON}
    policy_loss = losses.LOSSES.get(loss_name)
    check_kwargs("policy loss", loss_name, policy_loss.fn, own)
    if policy_loss.check is not None:
        policy_loss.check(**own)
    if loss.get("agg") is not None and loss["agg"] not in losses.AGGREGATIONS:
        raise ValueError(f"unknown aggregation {loss['agg']!r} "
                         f"(choose from {', '.join(losses.AGGREGATIONS)})")

    kl_section = section["kl"]
    kl.KL_ESTIMATORS.get(kl_section["kind"])

    rw_name = section["reweight"]["name"] or None
    rw = set_options(section["reweight"])
    if rw_name is None:
        if rw:
            raise RegistryError(f"reweight options {sorted(rw)} are set but reweight.name is empty")
    else:
        check_kwargs("advantage reweighter", rw_name, reweighting.REWEIGHTERS.get(rw_name), rw)

    section_reward = section["reward"]
    reward = rewards.RewardSpec.build(
        section_reward["name"], set_options(section_reward, REWARD_COMMON),
        correct=section_reward["correct"], workers=section_reward["workers"],
        timeout_s=section_reward["timeout_s"])

    return Algorithm(
        advantage=name, advantage_options=adv, loss=loss_name, loss_options=loss,
        kl_kind=kl_section["kind"], kl_coef=float(kl_section["coef"]),
        kl_clamp=kl_section["clamp"], kl_in_reward=bool(kl_section["in_reward"]),
        reweight=rw_name, reweight_options=rw, reward=reward,
        overlong_buffer=int(section["overlong"]["buffer"]),
        overlong_factor=float(section["overlong"]["factor"]),
        overlong_filter=bool(section["overlong"]["filter"]),
        off_policy=off_policy_lib.from_config(section["off_policy"]))
