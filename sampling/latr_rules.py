"""LATR's rules as pure device functions over the S rows of a decode call.

LATR (lookahead tree-based rollouts) grows each prompt's group from one greedy root:
a row whose two most likely next tokens are close spawns a child that takes the second
one while the row takes the first; a child whose next r tokens (r in the lookahead
points) stay within a normalised edit distance of its parent's is pruned with its
descendants. `sampling.latr_step` runs these inside the decode loop; each function
here has a NumPy reference test (tests/sampling/test_latr_rules.py).

Rows are slots: a group (one prompt) owns a fixed set of slots, a slot is `alive` when
it holds a row, and a child is born into a free slot of its parent's group.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

STOPPED = -1  # the history entry of a step at which a row was not running


def levenshtein(a: jax.Array, b: jax.Array) -> jax.Array:
    """Edit distance of each row's pair of token sequences: a, b [S, r] -> [S] int32.

    The standard dynamic programme row by row, each row vectorised: with E[j] =
    min(D[i-1][j] + 1, D[i-1][j-1] + cost) the insertion chain D[i][j] = min_k≤j
    (E[k] + j - k) is a running minimum of E - j, plus j."""
    s, r = a.shape
    cols = jnp.arange(r + 1, dtype=jnp.int32)

    def row(i, prev):
        cost = (a[:, i - 1][:, None] != b).astype(jnp.int32)          # [S, r]
        e = jnp.minimum(prev[:, 1:] + 1, prev[:, :-1] + cost)
        e = jnp.concatenate([jnp.full((s, 1), i, jnp.int32), e], axis=1)
        return jax.lax.cummin(e - cols, axis=1) + cols

    last = jax.lax.fori_loop(1, r + 1, row, jnp.broadcast_to(cols, (s, r + 1)))
    return last[:, r]


def same_group(group: jax.Array) -> jax.Array:
    """[S, S] bool: rows s and s' are slots of one group (padding rows, group -1, of none)."""
    return (group[:, None] == group[None, :]) & (group[:, None] >= 0)


def match(candidate: jax.Array, free: jax.Array, group: jax.Array, order: jax.Array):
    """Each group's branch candidates into its free slots, oldest candidate first.

    candidate, free [S] bool; group [S] int32; order [S] int32 the rows' creation order
    (the authors' batch order: a group keeps its existing rows and takes new branches in
    row order while it has room). The k-th candidate of a group (by `order`) gets the
    group's k-th free slot (by index); candidates beyond the free slots are suppressed.
    Returns (parent [S] int32: the candidate born into each slot, else the slot itself;
    born [S] bool; suppressed [] int32)."""
    s = candidate.shape[0]
    index = jnp.arange(s, dtype=jnp.int32)
    same = same_group(group)
    rank = jnp.sum(same & candidate[None] & (order[None] < order[:, None]), axis=1)
    slot = jnp.sum(same & free[None] & (index[None] < index[:, None]), axis=1)
    pairs = same & free[:, None] & candidate[None] & (slot[:, None] == rank[None])  # [slot, c]
    born = jnp.any(pairs, axis=1)
    parent = jnp.where(born, jnp.argmax(pairs, axis=1).astype(jnp.int32), index)
    taken = jnp.any(pairs, axis=0)
    return parent, born, jnp.sum(candidate & ~taken).astype(jnp.int32)


def descendants(kill: jax.Array, alive: jax.Array, parent: jax.Array) -> jax.Array:
    """[S] bool: the rows in `kill` and every alive row descending from one of them
    (`parent` [S], -1 for roots)."""

    def grow(state):
        marked, _ = state
        more = marked | (alive & (parent >= 0) & marked[jnp.maximum(parent, 0)])
        return more, jnp.any(more != marked)

    marked, _ = jax.lax.while_loop(lambda state: state[1], grow, (kill, jnp.bool_(True)))
    return marked


def window(history: jax.Array, t, r: int) -> jax.Array:
    """[S, r] each row's tokens of steps t - r .. t - 1 from the ring `history` [S, H]."""
    h = history.shape[1]
    return history[:, (t - r + jnp.arange(r)) % h]


def prune(history: jax.Array, t, alive: jax.Array, parent: jax.Array, birth: jax.Array,
          stops: jax.Array, exempt: jax.Array, lookahead: tuple[int, ...],
          distance: float) -> jax.Array:
    """[S] bool: the branches pruned before step t (their descendants not included).

    A branch (parent >= 0) born at step b is compared with its parent when it has r =
    t - b tokens, r in `lookahead`: over steps b .. t-1 the normalised edit distance
    levenshtein / r of their tokens below `distance` prunes it. Skipped when either
    window holds a stop token (or a step after the row stopped), and when the parent's
    token at the branch point is `exempt` [V] (the authors' math-symbol rule)."""
    pruned = jnp.zeros(alive.shape, bool)
    branch = alive & (parent >= 0)
    p = jnp.maximum(parent, 0)
    for r in lookahead:
        due = branch & (t - birth == r)

        def check(due=due, r=r):
            a, b = window(history, t, r), window(history, t, r)[p]
            ended = jnp.any(jnp.isin(a, stops) | (a == STOPPED)
                            | jnp.isin(b, stops) | (b == STOPPED), axis=1)
            kept = exempt[jnp.maximum(b[:, 0], 0)]
            close = levenshtein(a, b) < distance * r
            return due & ~ended & ~kept & close

        pruned = pruned | jax.lax.cond(jnp.any(due), check, lambda: jnp.zeros_like(due))
    return pruned


def full(alive: jax.Array, finished: jax.Array, latr: jax.Array, group: jax.Array,
         parent: jax.Array, birth: jax.Array, t, width: int, needed, settle: int) -> jax.Array:
    """[] bool: the tree phase may end after step t (the authors' return-on-full rule).

    A group whose rows have all finished counts as `width` rows, any other its alive
    rows; the groups are full enough when they hold `needed` rows (round(width · prompts
    · thres), thres decaying with t: `sampling.latr.needed_rows`), and no row is younger
    than `settle` steps (a branch's pruning checks are still to come), a root counting as
    born at step 0 as in the authors' code: the phase lasts more than `settle` steps."""
    rows = latr & alive
    same = same_group(group) & rows[None]
    count = jnp.sum(same, axis=1)                                    # per row: its group's
    done = jnp.all(~same | finished[None], axis=1)
    effective = jnp.where(done, width, count)
    first = rows & (parent < 0)                                      # one row per group: its root
    total = jnp.sum(jnp.where(first, effective, 0))
    young = jnp.any(rows & (birth + settle >= t))
    return (total >= needed) & ~young
