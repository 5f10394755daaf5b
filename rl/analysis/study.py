"""A whole base-vs-RL study into a directory: what `launch.analyze` runs.

    study = Study(base, rl, sft=None, prompts, references, judge, tokenizer)
    outputs = run_study(study, Settings(), "runs/analysis", progress=print)

Steps: sample `n` completions per prompt from the RL policy (and from the SFT
policy when given); score them teacher-forced under base and RL (base and
SFT); summarise; cross-sampling budget sweeps in both directions and the
extrapolation γ sweep; Δlog p across the RL run's checkpoints when given;
then write summary.json, tokens.parquet, the PNG figures and report.html.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

import models
import sampling
from models import extras, paths
from rl.analysis import plots, report, sweeps
from rl.analysis import summary as summary_lib
from rl.analysis.pairs import Policy, Scored, check_pair, load_policy, score_rows
from rl.analysis.scoring import FIELDS, ScoreOptions
from rl.analysis.sweeps import Judge
from rl.analysis.updates import checkpoint_steps, checkpoint_updates
from rl.train import build
from sampling.lockstep import MixRule

CRITERIA = ("delta_logp", "js", "entropy", "kl", "reverse_kl", "random")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a study samples and sweeps (each a `launch.analyze` flag)."""

    n: int = 4                       # samples per prompt
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    criteria: tuple[str, ...] = ("delta_logp", "js", "entropy", "random")
    budgets: tuple[float, ...] = (0.01, 0.02, 0.04, 0.08, 0.16)
    directions: tuple[str, ...] = ("forward", "reverse")
    gammas: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2)
    tau: float = 0.3
    ks: tuple[int, ...] = (1,)
    page_size: int = 16
    report_samples: int = 12
    sweeps: bool = True
    top_k: int = 8

    def __post_init__(self):
        bad = [c for c in self.criteria if c not in CRITERIA]
        if bad:
            raise ValueError(f"unknown criteria {bad} (choose from {', '.join(CRITERIA)})")
        if any(not 0 < b <= 1 for b in self.budgets):
            raise ValueError(f"budgets must be in (0, 1], got {list(self.budgets)}")
        if any(g < 0 for g in self.gammas):
            raise ValueError(f"gammas must be >= 0, got {list(self.gammas)}")
        bad = [d for d in self.directions if d not in sweeps.DIRECTIONS]
        if bad:
            raise ValueError(f"unknown directions {bad} (choose from forward, reverse)")
        if self.n < 1 or any(not 1 <= k <= self.n for k in self.ks):
            raise ValueError(f"need n >= 1 and every k in [1, n={self.n}], got {list(self.ks)}")
        _ = self.sampling_params  # SamplingParams checks temperature, top_p and the length
        for gamma in self.gammas:  # MixRule checks each value as the sweeps will use it
            MixRule(mode="extrapolate", gamma=gamma)
        if not math.isfinite(self.tau):
            raise ValueError(f"tau must be a finite number, got {self.tau}")
        if self.page_size < 1 or self.report_samples < 0 or self.top_k < 1:
            raise ValueError("page_size and top_k must be >= 1 and report_samples >= 0")

    @property
    def sampling_params(self) -> sampling.SamplingParams:
        return sampling.SamplingParams(temperature=self.temperature, top_p=self.top_p,
                                       max_new_tokens=self.max_new_tokens)


@dataclasses.dataclass
class Study:
    base: Policy
    rl: Policy
    sft: Policy | None
    prompts: list[list[int]]
    references: list[Any]
    judge: Judge
    tokenizer: Any
    updates_dir: str | None = None  # an RL workdir whose consecutive checkpoints to compare
    completion_len: int = 64  # the config's completion length (the default max_new_tokens)


def load(cfg, base: str, rl: str, sft: str = "", *, steps=(None, None, None),
         prompts: int = 32, updates: bool = True, tmp: str | None = None,
         progress: Callable[[str], None] = print) -> Study:
    """The study of `cfg`'s data: prompts (its held-out split, else the training
    split), references and verifier, and the models at the paths `base`, `rl` and
    `sft` (HF directories or training workdirs, local or gs:// / s3:// URIs, read
    through the local cache where needed: `load_policy`; `steps` their checkpoint steps).
    With `updates`, an RL workdir's consecutive checkpoints are compared too
    (`run_study` loads them two at a time). The tokenizer is
    the RL model's. Raises one of `rl.train.build.ERRORS` with a one-line message."""

    for name, path in (("base", base), ("rl", rl), ("sft", sft)):
        if (path or name != "sft") and not paths.isdir(path or ""):
            raise FileNotFoundError(f"the {name} model {path!r} is not a directory")
    if prompts < 1:
        raise ValueError(f"need at least one prompt, got {prompts}")
    run = build.resolve(cfg, tmp)
    progress(f"loading base {base}, rl {rl}" + (f", sft {sft}" if sft else ""))
    policies = [load_policy(p, s) if p else None
                for p, s in zip((base, rl, sft), steps)]
    for other in filter(None, policies[1:]):
        check_pair(policies[0].config, other.config)
    with paths.local_copy(policies[1].tokenizer_dir) as local:  # a run's may be in a bucket
        tokenizer = models.load_tokenizer(local)
    if tokenizer.vocab_size > policies[1].config.vocab_size:
        raise ValueError(f"the tokenizer in {policies[1].tokenizer_dir} has "
                         f"{tokenizer.vocab_size} ids, more than the models' "
                         f"{policies[1].config.vocab_size}")
    source = run.heldout_source or run.train_source
    examples = [source[i] for i in range(min(prompts, len(source)))]
    data, alg = cfg.data, run.algorithm
    ids = [build.encode_prompt(tokenizer, ex.prompt, chat_template=bool(data.chat_template),
                               system_prompt=data.system_prompt) for ex in examples]

    def verify(texts, refs):  # the correctness verifier's scores (rl.reward.correct)
        return alg.reward.score(texts, refs).parts[alg.reward.correct]

    history = rl if updates and len(checkpoint_steps(rl)) >= 2 else None
    return Study(*policies, ids, [ex.reference for ex in examples],
                 Judge(tokenizer.decode, verify), tokenizer, history, run.completion_len)


def sample(policy: Policy, prompts, settings: Settings):
    """`settings.n` completions per prompt from `policy` alone (the flat sampler)."""
    sp = settings.sampling_params
    seg = settings.page_size * -(-sp.max_new_tokens // settings.page_size)
    return sampling.generate(policy.config, policy.params, prompts, settings.n, sp,
                             jax.random.key(settings.seed), page_size=settings.page_size,
                             segment_len=seg)


def compare(base: Policy, other: Policy, prompts, settings: Settings) -> tuple[Scored, Any]:
    """`other`'s own samples scored teacher-forced under base and other."""
    ro = sample(other, prompts, settings)
    rows = [prompts[int(i)] for i in ro.prompt_index]
    completions = [ro.completion(r) for r in range(len(ro))]
    return score_rows(base, other, rows, completions,
                      options=ScoreOptions(top_k=settings.top_k)), ro


def summarize(scored: Scored) -> tuple[dict, dict[str, np.ndarray]]:
    mask = scored.mask
    tokens = summary_lib.flatten(scored.stats, mask)
    return summary_lib.summarize(tokens, summary_lib.normalised_position(mask)[mask]), tokens


def token_table(pair: str, scored: Scored, rollouts, scores, tokenizer) -> dict[str, list]:
    """Per-token records of one pair (columns: pair, row, prompt_index, position,
    norm_position, token, text, reward and every `FIELDS` statistic, a = base)."""
    mask = scored.mask
    rows, cols = np.nonzero(mask)
    norm = summary_lib.normalised_position(mask)[mask]
    ids = scored.tokens[mask]
    table = {"pair": [pair] * len(rows), "row": rows.tolist(),
             "prompt_index": rollouts.prompt_index[rows].tolist(),
             "position": (cols - scored.prompt_lens[rows]).tolist(),
             "norm_position": norm.tolist(), "token": ids.tolist(),
             "text": [tokenizer.decode([int(t)]) for t in ids],
             "reward": np.asarray(scores)[rows].tolist()}
    for name in FIELDS:
        table[name] = scored.stats[name][mask].tolist()
    return table


def write_parquet(path: str, tables: Sequence[dict[str, list]]) -> str:
    extras.check("pyarrow", "parquet", "the analysis's per-token records (tokens.parquet)")
    import pyarrow as pa
    import pyarrow.parquet as pq

    merged = {k: [v for t in tables for v in t[k]] for k in tables[0]}
    pq.write_table(pa.table(merged), path)
    return path


def report_samples(study: Study, scored: Scored, rollouts, scores, count: int) -> list[dict]:
    """The first `count` RL samples for report.html, each token with its values."""
    out = []
    for r in range(min(count, len(rollouts))):
        p = int(scored.prompt_lens[r])
        cols = slice(p, p + int(scored.lengths[r]))
        s = {k: scored.stats[k][r, cols].tolist() for k in FIELDS}
        out.append({
            "prompt": study.tokenizer.decode(study.prompts[int(rollouts.prompt_index[r])]),
            "tokens": [study.tokenizer.decode([int(t)]) for t in scored.tokens[r, cols]],
            "reward": float(scores[r]),
            "values": {"delta_logp": s["delta_logp"], "js": s["js"],
                       "entropy_rl": s["entropy_b"], "entropy_base": s["entropy_a"],
                       "logp_base": s["logp_a"], "logp_rl": s["logp_b"],
                       "kl_rl_base": s["kl_ba"], "rank_in_base": s["rank_a"]}})
    return out


def rewards(study: Study, rollouts) -> np.ndarray:
    """[R] verifier scores of the rollouts' completions."""
    texts = [study.judge.decode(rollouts.completion(r)) for r in range(len(rollouts))]
    refs = [study.references[int(i)] for i in rollouts.prompt_index]
    return np.asarray(study.judge.verify(texts, refs), np.float64)


def run_sweeps(study: Study, settings: Settings, progress: Callable[[str], None]) -> list[dict]:
    common = dict(n=settings.n, sampling_params=settings.sampling_params,
                  rng=jax.random.key(settings.seed), ks=settings.ks,
                  page_size=settings.page_size)
    args = (study.base, study.rl, study.prompts, study.references, study.judge)
    rows = sweeps.pure_rows(*args, **common)
    for row in rows:
        progress(f"{row['policy']} alone: accuracy {row['accuracy']:.3f}")
    for direction in settings.directions:
        rows += sweeps.budget_sweep(*args, criteria=settings.criteria, budgets=settings.budgets,
                                    direction=direction, progress=progress, **common)
    for where in ("all", "delta_logp"):
        rows += sweeps.gamma_sweep(*args, gammas=settings.gammas, where=where,
                                   tau=settings.tau, progress=progress, **common)
    return rows


def finite(value):
    """`value` with every non-finite float replaced by None (summary.json is strict
    JSON: a budget of 1 calibrates to the threshold -inf)."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def run_study(study: Study, settings: Settings, out_dir: str,
              progress: Callable[[str], None] = print) -> dict[str, str]:
    """Runs every step (see the module doc) and writes the outputs; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    path = lambda name: os.path.join(out_dir, name)  # noqa: E731
    progress(f"sampling {settings.n} completions of {len(study.prompts)} prompts from "
             f"{study.rl.name} and scoring them under {study.base.name}")
    scored, ro = compare(study.base, study.rl, study.prompts, settings)
    scores = rewards(study, ro)
    result, flat = summarize(scored)
    pairs = {"rl": result}
    result["accuracy"] = float(np.mean(scores >= sweeps.CORRECT))
    tables = [token_table("rl", scored, ro, scores, study.tokenizer)]
    if study.sft is not None:
        progress(f"the same for {study.sft.name} (SFT) against {study.base.name}")
        sft_scored, sft_ro = compare(study.base, study.sft, study.prompts, settings)
        sft_rewards = rewards(study, sft_ro)
        pairs["sft"], _ = summarize(sft_scored)
        pairs["sft"]["accuracy"] = float(np.mean(sft_rewards >= sweeps.CORRECT))
        tables.append(token_table("sft", sft_scored, sft_ro, sft_rewards, study.tokenizer))
    out = {"summary": path("summary.json"), "records": write_parquet(path("tokens.parquet"),
                                                                      tables)}
    figures = {"distributions": plots.distributions(flat, path("distributions.png")),
               "positions": plots.positions(result["positional"], path("positions.png")),
               "mass": plots.mass({k: v["reallocation"] for k, v in pairs.items()},
                                  path("mass.png"))}
    doc = {"models": {k: p.name for k, p in (("base", study.base), ("rl", study.rl),
                                             ("sft", study.sft)) if p is not None},
           "settings": dataclasses.asdict(settings), "pairs": pairs}
    if settings.sweeps:
        progress("cross-sampling and extrapolation sweeps")
        rows = run_sweeps(study, settings, progress)
        doc["sweeps"] = rows
        budget_rows = [r for r in rows if not r["criterion"].startswith("extrapolate")]
        figures["budget"] = plots.sweep(budget_rows, "realised_fraction", path("budget.png"),
                                        title="cross-sampling: accuracy vs replaced share")
        gamma_rows = [r for r in rows if r["criterion"].startswith("extrapolate")
                      or r["criterion"] == "pure"]
        figures["gamma"] = plots.sweep(gamma_rows, "gamma", path("gamma.png"),
                                       title="extrapolation: accuracy vs γ")
    if study.updates_dir:
        progress(f"Δlog p between consecutive checkpoints of the RL run {study.updates_dir}")
        rows = [study.prompts[int(i)] for i in ro.prompt_index]
        doc["updates"] = checkpoint_updates(study.updates_dir, rows,
                                            [ro.completion(r) for r in range(len(ro))],
                                            options=ScoreOptions(top_k=settings.top_k),
                                            progress=progress)
        figures["updates"] = plots.updates(doc["updates"], path("updates.png"))
    with open(out["summary"], "w") as f:
        json.dump(finite(doc), f, indent=2, allow_nan=False)
    out.update(figures)
    out["report"] = report.write(
        path("report.html"), title=f"{study.rl.name} vs {study.base.name}",
        samples=report_samples(study, scored, ro, scores, settings.report_samples),
        summary={k: v for k, v in doc.items() if k not in ("sweeps", "updates")},
        figures=figures)
    return out
