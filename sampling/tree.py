"""TreePO-style segment/tree sampler: branches share their prefix pages.

    rollouts = sampling.tree_generate(config, params, prompts, TreeConfig(
        segment_len=64, max_depth=4, leaves_per_prompt=16), sampling_params, rng,
        decode=tokenizer.decode, stop_text=rl.rewards.latex.complete_box)

Every round decodes one segment for all alive nodes of all prompts in one
`engine.decode` call. A node becomes a leaf when its segment repeats itself,
hits a stop token, completes an answer by the caller's `stop_text` rule (TreePO: a
closed `\\boxed{...}`; cut right after it; needs `decode`) or reaches `max_depth`
(rules: sampling/tree_schedule.py). The others
branch: a prompt's continuing nodes share min(rem, divergence × (continuing +
finished this round)) children (rem = leaves_per_prompt - leaves), so the
budget of nodes that just finished moves to their siblings, split by
`branch_policy`. Each child copies the parent's page table (reference counts,
no KV copy) and gets fresh pages for its next segment, whose first token it
samples itself. When a prompt has no alive node but budget left, `fallback`
cuts a leaf that ended properly ("stop") back at a random segment boundary and
re-expands it (from the prompt if there is none). Each prompt ends with exactly
`leaves_per_prompt` leaves; `Rollouts.paths` gives each leaf's branch ids per
depth (for `rl.algorithms.advantages.compute("tree", ...)`). Host code runs only between
rounds. The rules follow the TreePO authors' rollout (multimodal-art-projection/
TreePO, verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py, and
recipe/treepo/vllm_rollout_tree.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np

from models.config import ModelConfig
from models.sharding import ActivationSharding
from sampling import engine, tree_schedule
from sampling import shards as shards_lib
from sampling.page_pool import NULL_PAGE, PagePool
from sampling.params import SamplingParams
from sampling.rollouts import Rollouts

POLICIES = ("uniform", "low_likelihood", "high_likelihood")


@dataclasses.dataclass(frozen=True)
class TreeConfig:
    """Tree shape. `segment_len` must be a multiple of `page_size`.

    first_branching: children of the root, an int or an inclusive (lo, hi)
      range drawn uniformly per prompt (TreePO: (2, 8)).
    divergence: children per continuing node and round (TreePO's
      fixed_step_width, 2); a prompt's nodes that finish in a round hand their
      share to its continuing ones, so a node can get more.
    branch_policy: how a prompt's children are split over its continuing nodes:
      uniform (the authors' fixed_avg: total // k each, the remainder to the
      last); low_likelihood (largest-remainder split by softmax over
      -(Σ log p - min) / T, favouring unlikely paths); high_likelihood (the
      inverse). Every node gets at least one child.
    repetition_chars, repetition_count: with `decode`, a segment whose text
      holds a `repetition_chars`-character substring `repetition_count` times
      stops ("repetition"; the authors' check, 32 and 8, run on each new
      segment before any other rule).
    repetition_ngram: without `decode`, the same check on token ids: an n-gram
      of the segment `repetition_count` times. 8 tokens ≈ 32 characters of
      English BPE text, so both defaults flag about the same loops. The check in
      use is off when its length (repetition_chars / repetition_ngram) or
      repetition_count is 0.
    fallback: re-expand leaves that ended properly while budget remains.
    """

    segment_len: int = 64
    max_depth: int = 4
    leaves_per_prompt: int = 16
    first_branching: int | tuple[int, int] = (2, 8)
    divergence: int = 2
    branch_policy: str = "uniform"
    policy_temperature: float = 1.0
    repetition_chars: int = 32
    repetition_ngram: int = 8
    repetition_count: int = 8
    fallback: bool = True
    page_size: int = 16

    def __post_init__(self):
        if self.page_size < 1 or self.segment_len < 1 or self.segment_len % self.page_size:
            raise ValueError(f"segment_len ({self.segment_len}) must be a positive multiple of "
                             f"page_size ({self.page_size})")
        for name in ("max_depth", "leaves_per_prompt", "divergence"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        lo, hi = self.branching_range
        if not 1 <= lo <= hi:
            raise ValueError(f"first_branching must be >= 1 (or a range lo <= hi), "
                             f"got {self.first_branching}")
        if self.branch_policy not in POLICIES:
            raise ValueError(f"branch_policy must be one of {POLICIES}, got {self.branch_policy!r}")
        if self.policy_temperature <= 0:
            raise ValueError(f"policy_temperature must be > 0, got {self.policy_temperature}")
        for name in ("repetition_chars", "repetition_ngram", "repetition_count"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def branching_range(self) -> tuple[int, int]:
        fb = self.first_branching
        return (int(fb), int(fb)) if isinstance(fb, int) else (int(fb[0]), int(fb[1]))


@dataclasses.dataclass
class Node:
    prompt: int
    depth: int                 # segments on the path, this one included
    path: tuple[int, ...]      # branch id per depth
    prefix: list[int]          # page ids before this segment (prompt pages first)
    hidden: np.ndarray         # [D] state the segment starts from
    parent: Node | None
    pages: list[int] = dataclasses.field(default_factory=list)
    tokens: np.ndarray | None = None
    logprobs: np.ndarray | None = None
    raw_logprobs: np.ndarray | None = None
    end_hidden: np.ndarray | None = None
    finish: str = ""
    children: int = 0

    def ancestors(self) -> list[Node]:
        chain, node = [], self
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain[::-1]

    def path_logp(self) -> float:
        return float(sum(n.raw_logprobs.sum() for n in self.ancestors()))

    def path_tokens(self) -> np.ndarray:
        return np.concatenate([n.tokens for n in self.ancestors()])


@dataclasses.dataclass
class _Forest:
    """Every prompt's tree while it grows: the pool and the prompt pages the nodes share,
    and the nodes that are done (leaves per prompt, internal nodes)."""

    tree: TreeConfig
    pools: list[PagePool]      # one per batch shard (`sampling.shards`), ids local to it
    shard: np.ndarray          # [B] the shard of each prompt (its whole tree)
    prompt_tables: np.ndarray  # [B, pages] the prompts' page tables
    offsets: np.ndarray        # [B] each prompt's first real slot
    slots: int                 # prompt slots (pages × page_size)
    hidden: np.ndarray         # [B, D] each prompt's last hidden state
    roots: list[Node]
    leaves: list[list[Node]]
    internal: list[Node] = dataclasses.field(default_factory=list)

    def pool(self, node: Node) -> PagePool:
        """The pool of the shard that holds `node`'s prompt, and so its pages."""
        return self.pools[self.shard[node.prompt]]

    def spawn(self, prompt: int, base: Node | None) -> Node:
        """A new child of `base` (None = the prompt): it shares the path's pages."""
        if base is None:
            prefix, start, path, depth = (list(self.prompt_tables[prompt]), self.hidden[prompt],
                                          (), 0)
        else:
            prefix = base.prefix + base.pages
            start, path, depth = base.end_hidden, base.path, base.depth
        owner = base if base is not None else self.roots[prompt]
        node = Node(prompt=prompt, depth=depth + 1, path=path + (owner.children,),
                    prefix=prefix, hidden=start, parent=base)
        owner.children += 1
        self.pool(node).retain(prefix)
        return node

    def first_branches(self, rng: np.random.Generator) -> list[Node]:
        """The root's children of every prompt (`first_branching`, drawn per prompt)."""
        lo, hi = self.tree.branching_range
        alive = []
        for i in range(len(self.roots)):
            count = min(int(rng.integers(lo, hi + 1)), self.tree.leaves_per_prompt)
            alive += [self.spawn(i, None) for _ in range(count)]
        for root, table in zip(self.roots, self.prompt_tables, strict=True):
            self.pool(root).release(table)  # the nodes hold them
        return alive


def tree_generate(config: ModelConfig, params: dict, prompts, tree: TreeConfig,
                  sampling_params: SamplingParams, rng: jax.Array, *,
                  decode: Callable[[list[int]], str] | None = None,
                  stop_text: Callable[[str], bool] | None = None,
                  attention: str = "shared_prefix",
                  sharding: ActivationSharding | None = None) -> Rollouts:
    """`tree.leaves_per_prompt` leaves per prompt (see module docstring).

    `decode` (token ids -> text, e.g. `tokenizer.decode`) enables the text rules:
    the character repetition check and, with `stop_text` (a path's text -> it holds
    a complete answer; TreePO's is a closed `\\boxed{}`,
    `rl.rewards.latex.complete_box`), the answer stop; without it only the token
    repetition check runs. A leaf has at most segment_len * max_depth tokens, which
    must not exceed `sampling_params.max_new_tokens` (ValueError otherwise). Rows are
    ordered by prompt; stats count decode_tokens once per tree node (shared prefixes
    once), prefill_tokens once per distinct prompt, rounds, decode_row_steps,
    fallback_children, the leaves per finish reason (finish_stop, finish_length,
    finish_repetition) and the pool pages still in use after release (always 0).
    `attention` and `sharding`: as `generate`'s.
    """
    longest = tree.segment_len * tree.max_depth
    if longest > sampling_params.max_new_tokens:
        raise ValueError(f"tree leaves reach segment_len × max_depth = {longest} tokens, more "
                         f"than max_new_tokens={sampling_params.max_new_tokens}")
    if stop_text is not None and decode is None:
        raise ValueError("stop_text needs decode (the rule reads the path's text)")
    prompts = engine.check_prompts(config, prompts)
    sp = dataclasses.replace(sampling_params, max_new_tokens=tree.segment_len)
    host_rng = np.random.default_rng(np.asarray(jax.random.key_data(rng)).ravel().tolist())
    forest, cache = _plant(config, params, prompts, tree, sharding)
    alive = forest.first_branches(host_rng)
    stop_ids = engine.stop_token_ids(config, sp)
    stats = {"rounds": 0, "decode_tokens": 0, "decode_steps": 0, "decode_row_steps": 0,
             "fallback_children": 0}
    while alive:
        state, rows = _round_state(forest, alive)
        out, end_hidden, cache = engine.decode(
            config, params, cache, state, rng, stats["rounds"], np.int32(tree.segment_len),
            sp, tree.segment_len, stop_ids, attention, sharding)
        out, end_hidden = engine.as_numpy((out, end_hidden))
        out, end_hidden = engine.take_rows(out, rows.place), rows.to_items(end_hidden)
        stats["rounds"] += 1
        stats["decode_steps"] += int(out.steps)
        stats["decode_row_steps"] += int(out.steps) * rows.rows
        stats["decode_tokens"] += int(out.num_tokens.sum())
        continuing, finished_now = _finish_round(forest, alive, out, end_hidden, decode,
                                                 stop_text)
        alive = _branch(forest, continuing, finished_now, host_rng, stats)
    rows_out = [leaf for group in forest.leaves for leaf in group]
    for leaf in rows_out:
        forest.pool(leaf).release(leaf.prefix + leaf.pages)
    in_use = sum(pool.used_pages for pool in forest.pools)
    if in_use:
        raise RuntimeError(f"KV page leak: {in_use} pages still in use")
    for reason in ("stop", "length", "repetition"):
        stats[f"finish_{reason}"] = sum(leaf.finish == reason for leaf in rows_out)
    return _rollouts(rows_out, tree, config, stats | {
        "prefill_tokens": int(sum(map(len, prompts))),
        "kv_pages": sum(pool.num_pages for pool in forest.pools),
        "pages_in_use_after_release": in_use,
        "nodes": len(forest.internal) + len(rows_out)})


def _plant(config: ModelConfig, params: dict, prompts: list[list[int]], tree: TreeConfig,
           sharding: ActivationSharding | None):
    """(the forest of root nodes, the KV cache) after the prompts' prefill into a pool
    sized from buckets, so that the cache shape, like every other, repeats across calls.
    With batch shards each prompt's tree lives on one (`sampling.shards.assign`), whose
    pool is sized for the trees there."""
    ps, b, count = tree.page_size, len(prompts), shards_lib.of(sharding).count
    shard = shards_lib.assign([tree.leaves_per_prompt] * b, count)
    per_shard = engine.next_pow2(int(np.bincount(shard, minlength=count).max()))
    prompt_pages = engine.prompt_bucket(max(map(len, prompts)), ps) // ps
    seg_pages = tree.segment_len // ps
    pools = [PagePool(1 + per_shard * (prompt_pages + tree.leaves_per_prompt * tree.max_depth
                                       * seg_pages)) for _ in range(count)]
    layout = engine.layout_prompts(pools, prompts, ps, config.pad_token_id or 0, shard)
    hidden, cache = engine.prefill_layout(config, params, sum(p.num_pages for p in pools),
                                          layout, sharding=sharding)
    hidden = engine.as_numpy(hidden)[layout.rows]
    roots = [Node(prompt=i, depth=0, path=(), prefix=[], hidden=hidden[i], parent=None)
             for i in range(b)]
    forest = _Forest(tree, pools, shard, layout.tables[layout.rows], layout.offsets[layout.rows],
                     layout.slots, hidden, roots, [[] for _ in range(b)])
    return forest, cache


def _round_state(forest: _Forest, alive: list[Node]
                 ) -> tuple[engine.RowState, shards_lib.Placement]:
    """The decode rows of one round, placed on their prompts' shards: each alive node with
    fresh pages for its segment. Siblings (children of one node, or of the prompt) share
    their whole prefix: one group each, read once per step for all of them."""
    ps, seg = forest.tree.page_size, forest.tree.segment_len
    placed = shards_lib.place(forest.shard[[node.prompt for node in alive]], len(forest.pools))
    rows = placed.rows
    group_of: dict[tuple, int] = {}  # (shard, prefix): page ids are local to a shard
    row_group = np.zeros(rows, np.int32)
    for r, node in zip(placed.place, alive, strict=True):
        row_group[r] = group_of.setdefault((forest.shard[node.prompt], tuple(node.prefix)),
                                           len(group_of))
    width = max(len(prefix) for _, prefix in group_of)
    group_tables = np.full((len(group_of), width), NULL_PAGE, np.int32)
    group_offsets = np.zeros(len(group_of), np.int32)
    segment = np.full((rows, seg // ps), NULL_PAGE, np.int32)
    positions = np.zeros(rows, np.int32)
    start_hidden = np.zeros((rows, forest.hidden.shape[1]), forest.hidden.dtype)
    for r, node in zip(placed.place, alive, strict=True):
        g = row_group[r]
        group_tables[g, width - len(node.prefix):] = node.prefix
        # the prefix is right-aligned in the view; the prompt table leads it
        group_offsets[g] = (width - len(node.prefix)) * ps + forest.offsets[node.prompt]
        node.pages = forest.pool(node).alloc(seg // ps)
        segment[r] = node.pages
        positions[r] = forest.slots - forest.offsets[node.prompt] + (node.depth - 1) * seg
        start_hidden[r] = node.hidden
    done = ~placed.real()
    pages = engine.page_rows(group_tables, group_offsets, row_group,
                             np.zeros((rows, 0), np.int32), segment, done, placed.count)
    return engine.RowState(hidden=start_hidden, pages=pages, positions=positions, done=done,
                           ids=placed.ids()), placed


def _finish_round(forest: _Forest, alive: list[Node], out, end_hidden: np.ndarray,
                  decode, stop_text) -> tuple[list[list[Node]], list[int]]:
    """Stores each alive node's segment and decides whether it ends its path
    (`tree_schedule.segment_finish`): (the continuing nodes per prompt, the nodes per
    prompt that became leaves this round)."""
    b = len(forest.roots)
    continuing: list[list[Node]] = [[] for _ in range(b)]
    finished_now = [0] * b
    texts = stop_text is not None and decode is not None
    for r, node in enumerate(alive):
        n = int(out.num_tokens[r])
        before = (node.parent.path_tokens() if texts and node.parent is not None
                  else np.zeros(0, np.int32))
        node.finish, keep = tree_schedule.segment_finish(
            out.tokens[r, :n], before, bool(out.finish[r] == engine.STOP), node.depth,
            forest.tree, decode, stop_text)
        node.tokens, node.logprobs = out.tokens[r, :keep], out.logprobs[r, :keep]
        node.raw_logprobs, node.end_hidden = out.raw_logprobs[r, :keep], end_hidden[r]
        if node.finish:
            forest.leaves[node.prompt].append(node)
            finished_now[node.prompt] += 1
        else:
            continuing[node.prompt].append(node)
    return continuing, finished_now


def _branch(forest: _Forest, continuing: list[list[Node]], finished_now: list[int],
            rng: np.random.Generator, stats: dict) -> list[Node]:
    """The next round's nodes: each prompt's budget handed to its continuing nodes'
    children, or, with none left, leaves cut back and re-expanded (`fallback`)."""
    tree, alive = forest.tree, []
    for i, nodes in enumerate(continuing):
        leaves = forest.leaves[i]
        budget = tree.leaves_per_prompt - len(leaves)
        if nodes:
            total = tree_schedule.branch_total(budget, len(nodes), finished_now[i],
                                               tree.divergence)
            logp = (None if tree.branch_policy == "uniform"
                    else np.array([node.path_logp() for node in nodes]))
            counts = tree_schedule.allocate(total, len(nodes), tree.branch_policy, logp,
                                            tree.policy_temperature)
            for node, count in zip(nodes, counts, strict=True):
                alive += [forest.spawn(i, node) for _ in range(count)]
                forest.pool(node).release(node.prefix + node.pages)  # children hold them now
                forest.internal.append(node)
        elif budget > 0 and tree.fallback:
            plan = tree_schedule.fallback_plan([leaf.finish for leaf in leaves],
                                               [leaf.depth for leaf in leaves], budget,
                                               tree.divergence, rng)
            for j, keep, count in plan:
                base = leaves[j].ancestors()[keep - 1] if j >= 0 and keep else None
                alive += [forest.spawn(i, base) for _ in range(count)]
                stats["fallback_children"] += count
        elif budget > 0:
            raise RuntimeError(f"prompt {i}: {len(leaves)} leaves, fallback disabled")
    return alive


def _rollouts(leaves: list[Node], tree: TreeConfig, config: ModelConfig, stats) -> Rollouts:
    width = tree.segment_len * tree.max_depth
    r = len(leaves)
    tokens = np.full((r, width), config.pad_token_id or 0, np.int32)
    logprobs, raw = np.zeros((r, width), np.float32), np.zeros((r, width), np.float32)
    lengths = np.zeros(r, np.int32)
    paths = np.full((r, tree.max_depth), -1, np.int32)
    for row, leaf in enumerate(leaves):
        chain = leaf.ancestors()
        seq = np.concatenate([n.tokens for n in chain])
        lengths[row] = len(seq)
        tokens[row, :len(seq)] = seq
        logprobs[row, :len(seq)] = np.concatenate([n.logprobs for n in chain])
        raw[row, :len(seq)] = np.concatenate([n.raw_logprobs for n in chain])
        paths[row, :len(leaf.path)] = leaf.path
    return Rollouts(tokens=tokens, lengths=lengths, logprobs=logprobs, raw_logprobs=raw,
                    prompt_index=np.array([leaf.prompt for leaf in leaves], np.int32),
                    finish_reason=np.array([leaf.finish for leaf in leaves]), paths=paths,
                    stats=stats)
