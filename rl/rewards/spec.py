"""A run's reward: named verifiers with weights, scored serially or in a worker pool.

    spec = RewardSpec.build("math:1.0,format:0.1", {"search": "all"}, correct="math",
                            workers=2, timeout_s=5.0)
    pending = spec.submit(completions, references)   # workers start at once
    rewards = pending.result()                        # Rewards
    rewards.total      # [N] float32: 1.0 * math + 0.1 * format
    rewards.correct    # [N] bool: the `correct` verifier's score >= 1
    rewards.metrics()  # {"reward/math": .., "reward/format": .., "reward/timeouts": ..}

`terms` is "name" or "name:weight,name:weight" (weights finite floats; a name at
most once). Options are given flat and routed to the one listed verifier whose
signature has them; an option no listed verifier takes, or one that several
take, is an error naming them. `correct` names the verifier whose score
(>= 1 - 1e-6) defines correctness, the number accuracy, pass@k and dynamic
sampling use; with one verifier it defaults to that one, with several it must
be named.

Every reference and option is checked in the calling process before any item
is scored (each verifier is run on the empty completion against every
distinct reference: a `RewardInputError` there is raised, never scored 0 in a
worker). Each item is first scored in the calling process; the items a verifier
escalates (`common.Escalate`: the `math` verifier's library fallback, or a
verifier that escalates everything when `common.IN_WORKER` is False) go to a
pool of `max(workers, 1)` processes (`rl.rewards.pool`), scored while the
caller goes on; items of a batch that escalate with equal keys are sent
once. The project's verifiers are bounded and linear in the calling
process; sending every item to a worker instead would cost more in transfer
than their exact checks take (measured: benchmarks/RESULTS.md).
`timeout_s` bounds each item's time in a worker; timeouts and worker crashes
score 0 and are counted.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rl.registry import RegistryError, check_kwargs
from rl.rewards import common, pool

CORRECT = 1.0 - 1e-6
DEFAULT_TIMEOUT_S = 5.0
_SEND_EVERY = 8  # escalated items handed to the pool at a time while the batch is scanned
_RESERVED = ("completion", "reference")


def call(verify: common.Verifier, completion: object, reference: object,
         options: Mapping[str, Any]) -> float:
    """One verifier call: 0.0 for a non-str completion, any exception (except a
    `RewardInputError` or `Escalate`, which propagate) or a non-finite score."""
    if not isinstance(completion, str):
        return 0.0
    try:
        value = float(verify(completion, reference, **options))
    except (common.RewardInputError, common.Escalate):
        raise
    except Exception:  # noqa: BLE001 - a completion must never crash training
        return 0.0
    return value if math.isfinite(value) else 0.0


def parse_terms(text: str) -> tuple[tuple[str, float], ...]:
    """"math:1.0,format:0.1" -> (("math", 1.0), ("format", 0.1)); "math" -> weight 1."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"rl.reward.name is empty: name a verifier "
                         f"({', '.join(common.VERIFIERS.names())})")
    terms = []
    for part in text.split(","):
        name, _, weight = part.strip().partition(":")
        name = name.strip()
        common.VERIFIERS.get(name)  # RegistryError listing the names
        try:
            value = float(weight) if weight.strip() else 1.0
        except ValueError:
            raise ValueError(f"rl.reward.name {text!r}: weight {weight!r} of {name!r} "
                             "is not a number") from None
        if not math.isfinite(value):
            raise ValueError(f"rl.reward.name {text!r}: weight of {name!r} must be finite")
        if name in (n for n, _ in terms):
            raise ValueError(f"rl.reward.name {text!r} names {name!r} twice")
        terms.append((name, value))
    return tuple(terms)


def route_options(names: Sequence[str], options: Mapping[str, Any]) -> dict[str, dict]:
    """{verifier: its options} from flat options; RegistryError if unknown or ambiguous."""
    routed: dict[str, dict] = {name: {} for name in names}
    for key, value in options.items():
        takers = []
        for name in names:
            try:
                check_kwargs("verifier", name, common.VERIFIERS.get(name), {key: value},
                             reserved=_RESERVED)
                takers.append(name)
            except RegistryError:
                pass
        if not takers:
            accepted = sorted({p for name in names for p, v in inspect.signature(
                common.VERIFIERS.get(name)).parameters.items()
                if v.kind is inspect.Parameter.KEYWORD_ONLY})
            raise RegistryError(f"reward option {key!r} is not an option of "
                                f"{' or '.join(names)} (options: {', '.join(accepted) or 'none'})")
        if len(takers) > 1:
            raise RegistryError(f"reward option {key!r} is an option of both "
                                f"{' and '.join(takers)}: use one of them at a time")
        routed[takers[0]][key] = value
    return routed


@dataclasses.dataclass
class Rewards:
    """Scores of N completions: `total` [N] float32 (the weighted sum), `parts` {verifier:
    [N] float32}, `correct` [N] bool, `timeouts` / `crashes` (items scored 0 for them)."""
    total: np.ndarray
    parts: dict[str, np.ndarray]
    correct: np.ndarray
    timeouts: int = 0
    crashes: int = 0

    def metrics(self, prefix: str = "reward/") -> dict[str, float]:
        """Mean score per verifier, plus the timeout and crash counts."""
        out = {f"{prefix}{name}": float(v.mean()) if v.size else 0.0
               for name, v in self.parts.items()}
        out[f"{prefix}timeouts"] = self.timeouts
        out[f"{prefix}crashes"] = self.crashes
        return out


class PendingRewards:
    """A submitted batch (`RewardSpec.submit`); `result()` waits for it."""

    def __init__(self, spec: RewardSpec, n: int, scores: np.ndarray,
                 waiting: pool.Pending | None, slots: list[tuple[int, int, int]]):
        self._spec, self._n, self._scores, self._waiting, self._slots = \
            spec, n, scores, waiting, slots
        self._result: Rewards | None = None

    def result(self) -> Rewards:
        if self._result is not None:
            return self._result
        timeouts = crashes = 0
        if self._waiting is not None:
            out = self._waiting.result()
            for t, i, k in self._slots:  # a completion's timeout or crash counts for it
                self._scores[t, i] = out.scores[k]
                timeouts += int(out.timed_out[k])
                crashes += int(out.crashed[k])
        spec = self._spec
        parts = {name: self._scores[t] for t, (name, _) in enumerate(spec.terms)}
        weights = np.asarray([w for _, w in spec.terms], np.float32)
        total = (weights[:, None] * self._scores).sum(axis=0).astype(np.float32) \
            if self._n else np.zeros(0, np.float32)
        self._result = Rewards(total, parts, parts[spec.correct] >= CORRECT, timeouts, crashes)
        return self._result


@dataclasses.dataclass(frozen=True)
class RewardSpec:
    terms: tuple[tuple[str, float], ...]
    options: Mapping[str, Mapping[str, Any]]
    correct: str
    workers: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def build(cls, terms: str, options: Mapping[str, Any] | None = None, *, correct: str = "",
              workers: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S) -> RewardSpec:
        """Parses and checks everything (see the module docstring); raises on bad input."""
        parsed = parse_terms(terms)
        names = [name for name, _ in parsed]
        if not correct:
            if len(names) > 1:
                raise ValueError(f"rl.reward.name {terms!r} has several verifiers: name the "
                                 "one that decides correctness (accuracy, pass@k, dynamic "
                                 f"sampling) with rl.reward.correct (one of {', '.join(names)})")
            correct = names[0]
        if correct not in names:
            raise ValueError(f"rl.reward.correct={correct!r} is not one of the verifiers in "
                             f"rl.reward.name ({', '.join(names)})")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"rl.reward.workers must be an int >= 0, got {workers!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
                or not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError(f"rl.reward.timeout_s must be a number > 0, got {timeout_s!r}")
        routed = route_options(names, dict(options or {}))
        for name in names:
            check = common.OPTION_CHECKS.get(name)
            if check is not None:
                check(**routed[name])
        return cls(parsed, routed, correct, workers, float(timeout_s))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.terms)

    def check_inputs(self, references: Sequence[Any]) -> None:
        """Raises RewardInputError for a bad option or reference (no completion scored)."""
        distinct: dict[str, Any] = {}
        for ref in references:
            distinct.setdefault(repr(ref), ref)
        for name in self.names:
            verify = common.VERIFIERS.get(name)
            for ref in distinct.values():
                try:
                    call(verify, "", ref, self.options[name])
                except common.Escalate:
                    pass

    def _pool(self) -> pool.Pool:
        warm = tuple(n for n in self.names if n in common.WARMERS)
        modules = {common.VERIFIERS.get(n).__module__ for n in self.names}
        imports = tuple(m for m in modules if not m.startswith("rl.rewards."))
        if "__main__" in imports:
            raise ValueError("a verifier registered in __main__ cannot be imported by the "
                             "worker processes: define it in a module (or use workers=0 "
                             "with a verifier that never escalates)")
        return pool.shared(max(self.workers, 1), warm, imports)

    def submit(self, completions: Sequence[Any], references: Sequence[Any] | None
               ) -> PendingRewards:
        """Starts scoring; raises ValueError/RewardInputError for bad input at once."""
        completions = list(completions)
        references = [None] * len(completions) if references is None else list(references)
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        self.check_inputs(references)
        scores = np.zeros((len(self.terms), len(completions)), np.float32)
        slots: list[tuple[int, int, int]] = []  # (term, completion, pool item)
        sent: dict[tuple, int] = {}  # (verifier, escalation key) -> pool item
        items = 0  # sent to the pool so far
        waiting: pool.Pending | None = None
        buffer: list[pool.Item] = []
        for t, name in enumerate(self.names):
            verify, options = common.VERIFIERS.get(name), dict(self.options[name])
            for i, (completion, ref) in enumerate(zip(completions, references, strict=True)):
                try:
                    scores[t, i] = call(verify, completion, ref, options)
                    continue
                except common.Escalate as escalation:
                    key = None if escalation.key is None else (name, escalation.key)
                if key is not None and key in sent:  # the same work: scored once
                    slots.append((t, i, sent[key]))
                    continue
                slots.append((t, i, items))
                if key is not None:
                    sent[key] = items
                items += 1
                buffer.append((name, completion, ref, options))
                if len(buffer) >= _SEND_EVERY:  # the workers start while this loop goes on
                    waiting = waiting or self._pool().open(self.timeout_s)
                    waiting.add(buffer)
                    buffer = []
        if buffer:
            waiting = waiting or self._pool().open(self.timeout_s)
            waiting.add(buffer)
        if waiting is not None:
            waiting.close()
        return PendingRewards(self, len(completions), scores, waiting, slots)

    def score(self, completions: Sequence[Any], references: Sequence[Any] | None) -> Rewards:
        return self.submit(completions, references).result()
