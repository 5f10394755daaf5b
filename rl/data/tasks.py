"""Procedural tasks with verifiable answers and disjoint train / held-out splits.

    task = rl.data.tasks.make("countdown", num_numbers=3, max_number=20)
    ex = task.example(index=17, split="train")
    ex.prompt, ex.reference, ex.solution   # text, verifier reference, a correct answer

Examples are pure functions of (seed, split, index), so a data iterator's
state is just an index. Splits are disjoint by construction: each problem
has a canonical `uid`, and a keyed hash of it puts the problem in the
held-out split with probability `heldout_fraction`; `example` draws until
the problem lands in the requested split. `reward` names the verifier in
`rl.rewards` that checks completions of the task.
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from rl.registry import Registry, check_kwargs

SPLITS = {"train": 0, "heldout": 1}
MAX_DRAWS = 10_000
DEFAULT_ANSWER = "<answer>{}</answer>"


@dataclasses.dataclass(frozen=True)
class Example:
    prompt: str
    reference: Any
    solution: str   # a correct completion, used for the supervised warm start
    uid: str        # canonical problem id (split assignment, deduplication)
    # offline pass rates of a weak and a strong reference model (BOTS's implicit evidence)
    pass_rates: tuple[float, float] | None = None
    # an expression whose value is the answer ("123 * 456"): the calculator call of a
    # tool-use warm start's traces ("" when the task has none)
    work: str = ""


def heldout_bucket(uid: str, seed: int) -> float:
    """A uniform number in [0, 1) fixed by (uid, seed)."""
    digest = hashlib.blake2b(f"{seed}:{uid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


@dataclasses.dataclass(frozen=True)
class Task:
    """A generator `draw(rng) -> (prompt fields, reference, answer, uid)` plus split logic."""

    name: str
    reward: str
    draw: Callable[[np.random.Generator], tuple[dict, Any, str, str]]
    template: str
    answer_template: str = DEFAULT_ANSWER
    heldout_fraction: float = 0.1
    seed: int = 0
    work: Callable[[dict], str] | None = None  # prompt fields -> Example.work

    def in_split(self, uid: str, split: str) -> bool:
        heldout = heldout_bucket(uid, self.seed) < self.heldout_fraction
        return heldout == (split == "heldout")

    def example(self, index: int, split: str = "train") -> Example:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")
        if index < 0:
            raise ValueError(f"example index must be >= 0, got {index}")
        rng = np.random.default_rng([self.seed, SPLITS[split], index])
        for _ in range(MAX_DRAWS):
            fields, reference, answer, uid = self.draw(rng)
            if self.in_split(uid, split):
                return Example(prompt=self.template.format(**fields), reference=reference,
                               solution=self.answer_template.format(answer), uid=uid,
                               work=self.work(fields) if self.work else "")
        raise RuntimeError(f"{self.name}: no {split} problem in {MAX_DRAWS} draws; "
                           f"heldout_fraction={self.heldout_fraction} leaves it empty")


TASKS: Registry = Registry("task")


def make(name: str, **options) -> Task:
    """The task `name` with its options (unknown ones raise, naming them)."""
    builder = TASKS.get(name)
    check_kwargs("task", name, builder, options)
    return builder(**options)


def _check(name: str, value, low, high=None) -> None:
    if isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value!r}")


_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _countdown_draw(num_numbers: int, max_number: int, max_target: int):
    def draw(rng):
        while True:
            numbers = [int(x) for x in rng.integers(1, max_number + 1, num_numbers)]
            order = [int(i) for i in rng.permutation(num_numbers)]
            value, expr, prec = numbers[order[0]], str(numbers[order[0]]), 3
            for i in order[1:]:
                x, op = numbers[i], "+-*/"[int(rng.integers(4))]
                if op == "/" and value % x:
                    op = "+"
                value = value // x if op == "/" else _OPS[op](value, x)
                op_prec = 2 if op in "*/" else 1
                left = f"({expr})" if prec < op_prec else expr  # left-assoc: only lower binds
                expr, prec = f"{left} {op} {x}", op_prec
            if 1 <= value <= max_target:
                break
        uid = f"countdown:{sorted(numbers)}->{value}"
        fields = {"numbers": ", ".join(map(str, numbers)), "target": value}
        return fields, {"target": value, "numbers": numbers}, expr, uid
    return draw


@TASKS.register("countdown")
def countdown(*, num_numbers: int = 3, max_number: int = 20, max_target: int = 100,
              heldout_fraction: float = 0.1, seed: int = 0,
              template: str = "Using the numbers {numbers}, make {target}. ",
              answer_template: str = DEFAULT_ANSWER) -> Task:
    """Reach a target with +, -, *, / over the given numbers, each used once.

    Targets come from a random expression over all the numbers, so every
    problem is solvable; `solution` is that expression.
    """
    _check("num_numbers", num_numbers, 2, 6)
    _check("max_number", max_number, 1)
    _check("max_target", max_target, 1)
    _check("heldout_fraction", heldout_fraction, 0.0, 1.0)
    return Task("countdown", "countdown", _countdown_draw(num_numbers, max_number, max_target),
                template, answer_template, heldout_fraction, seed)


@TASKS.register("arithmetic")
def arithmetic(*, digits: int = 3, ops: str = "+-*", heldout_fraction: float = 0.1,
               seed: int = 0, template: str = "{a} {op} {b} = ",
               answer_template: str = DEFAULT_ANSWER) -> Task:
    """a op b with operands of up to `digits` digits; the reference is the exact result."""
    _check("digits", digits, 1, 18)
    _check("heldout_fraction", heldout_fraction, 0.0, 1.0)
    if not ops or set(ops) - set(_OPS):
        raise ValueError(f"ops must be a non-empty string over '+-*', got {ops!r}")

    def draw(rng):
        a, b = (int(x) for x in rng.integers(0, 10 ** digits, 2))
        op = ops[int(rng.integers(len(ops)))]
        result = _OPS[op](a, b)
        return {"a": a, "op": op, "b": b}, result, str(result), f"arithmetic:{a}{op}{b}"

    return Task("arithmetic", "arithmetic", draw, template, answer_template,
                heldout_fraction, seed, work=lambda f: f"{f['a']} {f['op']} {f['b']}")
