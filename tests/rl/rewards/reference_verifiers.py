"""math-verify as its users run it, registered as verifiers for the agreement test.

`math_verify_default`: `verify(parse("$gold$"), parse(completion))`, every
setting at the library's default (its own signal-based 5 s timeouts, which
work in a worker's main thread). `math_verify_trl`: the completion parsed as
TRL's `accuracy_reward` does (boxed answers first, no unanchored matches,
its normalisation settings). Both run in `rl.rewards.pool` workers, which
kill an item that outlives the pool's timeout (math-verify's C-level sympy
work cannot be interrupted by its own signals).
"""

from __future__ import annotations

from rl.rewards import common
from rl.rewards.common import VERIFIERS


def _in_a_worker() -> None:
    """Scored in the caller's process, the items go to the pool (hard timeouts)."""
    if not common.IN_WORKER:
        raise common.Escalate


def _gold(reference: str):
    from math_verify import parse
    return parse(f"${reference}$")


@VERIFIERS.register("math_verify_default")
def default(completion: str, reference: str) -> float:
    _in_a_worker()
    from math_verify import parse, verify
    return float(verify(_gold(reference), parse(completion)))


@VERIFIERS.register("math_verify_trl")
def trl(completion: str, reference: str) -> float:
    _in_a_worker()
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse, verify
    config = LatexExtractionConfig(
        normalization_config=NormalizationConfig(
            nits=False, malformed_operators=False, basic_latex=True, equations=True,
            boxed="all", units=True),
        boxed_match_priority=0, try_extract_without_anchor=False)
    answer = parse(completion, extraction_config=[config], extraction_mode="first_match")
    return float(verify(_gold(reference), answer))


@VERIFIERS.register("math_verify_boxed_gold")
def boxed_gold(completion: str, reference: str) -> float:
    """The default, with the reference parsed as `\\boxed{gold}` instead of `$gold$`."""
    _in_a_worker()
    from math_verify import parse, verify
    return float(verify(parse(f"\\boxed{{{reference}}}"), parse(completion)))
