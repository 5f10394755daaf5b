"""LATR's tree phase as the authors' code runs it, in plain Python on a probability oracle.

Written from starreeze/latr (model/generation.py `_sample_new_sequence_with_rollout` and
`generate`, model/sample_filter.py `ProbFilter` and `RolloutFilter`, model/utils.py
`BranchInfo`), with none of the engine's code: rows are Python lists in the authors'
batch order (roots, then branches appended as created), a step's new branches are
appended in row order while their group has room, and the checks run at the end of
each step on the tokens so far. `margin` records how close each decision came to its
threshold, so a test can require decisions that fp32 rounding cannot flip.
"""

from __future__ import annotations

import math

import numpy as np

ENDED = -1  # the authors append eos to a finished row; any stop counts


def edit_distance(a, b) -> int:
    d = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, y in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != y))
    return d[len(b)]


class Row:
    def __init__(self, prompt, tokens, parent, birth):
        self.prompt, self.tokens, self.parent, self.birth = prompt, tokens, parent, birth
        self.stopped = False


def tree_phase(probs_of, prompts: int, width: int, max_new: int, abs_t: float, rel_t: float,
               lookahead, distance: float, stops, exempt, fill_init: float,
               fill_decay: float, max_steps: int):
    """(rows per prompt in batch order, the last tree step (None: the tree phase lasted
    the whole length or every row stopped), counts, margin).

    `probs_of(rows) -> [len(rows), V]` the raw next-token probabilities of each row."""
    rows = [Row(p, [], None, 0) for p in range(prompts)]
    counts = {"born": 0, "pruned": 0, "suppressed": 0}
    margin = math.inf
    end = None
    for step in range(min(max_new, max_steps)):
        probs = probs_of(rows)
        room = {p: width - sum(r.prompt == p for r in rows) for p in range(prompts)}
        new, majors = [], []
        for r, p in zip(rows, probs, strict=True):
            if r.stopped:
                majors.append(ENDED)
                continue
            top = np.argsort(-p, kind="stable")[:3]
            p1, p2, p3 = p[top]
            margin = min(margin, p1 - p2, _decision(p2 - abs_t, rel_t - (p1 - p2)))
            if p2 > abs_t and p1 - p2 < rel_t:
                margin = min(margin, p2 - p3)  # the child's token
                if room[r.prompt] > 0:
                    room[r.prompt] -= 1
                    new.append(Row(r.prompt, r.tokens + [int(top[1])], r, step))
                    counts["born"] += 1
                else:
                    counts["suppressed"] += 1
            majors.append(int(top[0]))
        for r, token in zip(rows, majors, strict=True):
            r.tokens.append(token)
        rows += new
        rows = _prune(rows, step + 1, lookahead, distance, stops, exempt, counts)
        for r in rows:
            r.stopped = r.stopped or r.tokens[-1] in stops
        if all(r.stopped for r in rows):
            break
        effective = sum(width if all(r.stopped for r in rows if r.prompt == p)
                        else sum(r.prompt == p for r in rows) for p in range(prompts))
        thres = fill_init - fill_decay * step / max_new
        if (effective >= round(width * prompts * thres)
                and not any(r.birth + max(lookahead) >= step for r in rows)):
            end = step
            break
    else:  # the loop ran force_return_step (max_steps) steps, or the whole length
        end = max_steps - 1 if max_steps < max_new else None
    return [[r for r in rows if r.prompt == p] for p in range(prompts)], end, counts, margin


def _decision(*clauses) -> float:
    """How far the conjunction of `clauses` (each true when > 0) is from flipping: the
    nearest clause when all hold, else the furthest false one."""
    false = [-c for c in clauses if c <= 0]
    return max(false) if false else min(clauses)


def _prune(rows, current: int, lookahead, distance, stops, exempt, counts):
    """The rows left after the edit-distance filter at `current` tokens, descendants of a
    pruned branch removed with it."""
    removed = set()
    for r in rows:
        length = current - r.birth
        if r.parent is None or length not in lookahead:
            continue
        a, b = r.tokens[-length:], r.parent.tokens[-length:]
        if any(x == ENDED or x in stops for x in a + b) or exempt[b[0]]:
            continue
        if edit_distance(a, b) / length < distance:
            removed.add(id(r))
            counts["pruned"] += 1
    changed = True
    while changed:
        changed = False
        for r in rows:
            if id(r) not in removed and r.parent is not None and id(r.parent) in removed:
                removed.add(id(r))
                changed = True
    return [r for r in rows if id(r) not in removed]
