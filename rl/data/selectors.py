"""Task selectors: which prompts a step trains on and how many rollouts each gets.

Pure host-side NumPy. A selector is a frozen object holding its options; all that
changes during a run is a `state` dict (plain floats / None / float64 arrays) that
the trainer keeps in its checkpointed host state, arrays as arrays (`state_to_json` /
`state_from_json` convert it to and from plain JSON, e.g. for format-1 checkpoints).

  uniform  the data iterator's own order: `select` returns None
  dars     Difficulty-Adaptive Rollout Sampling (arXiv 2508.13755): prompts come
           from the iterator; after stage 1 (n rollouts each) a prompt with
           accuracy a < 0.5 gets `extra_rollouts` more so its cumulative advantage
           reaches the peak A* (schedule "et") or 2(1-a)·A* (schedule "hw")
  bots     Bayesian Online Task Selection (arXiv 2510.26374): a Beta(α, β) pass-rate
           posterior per task of a pool of K; Thompson draws nearest `target` are
           selected; every task's posterior is updated each step from explicit
           evidence (its rollouts) and implicit evidence (interpolated offline rates)

    sel = make(name, num_tasks=len(source), n=sampling.n, offline=None, **options)
    state = sel.init_state()
    idx = sel.select(state, step_rng(seed, step), batch_size)   # None: use the iterator
    extra = sel.extra_rollouts(state, accuracy)                  # [P] int, zeros unless dars
    state = sel.update(state, idx, successes, attempts)          # totals incl. extra rollouts
    metrics = sel.metrics(state)                                 # {name: float}

Unknown names/options raise `RegistryError`; bad option values raise a one-line
`ValueError` when the selector is made.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from rl.registry import Registry, check_kwargs

SELECTORS: Registry = Registry("task selector")

# DARS-B (breadth): a large prompt batch, one full-batch update, 2 epochs (the authors'
# experiments/DARS-*-Breadth.sh: train_batch_size = ppo_mini_batch_size = 3072, ppo_epochs=2).
DARS_B_OVERRIDES = {"data.selector.name": "dars", "train.prompts_per_step": 3072,
                    "train.minibatches": 1, "train.epochs": 2}
_ZERO_ACCURACY = 1e-6  # the authors' threshold for "no rollout succeeded"
_CAP_EPS = 1e-6        # BOTS: added to the anchor gap f¹ - f⁰ (as in Trinity-RFT)


def step_rng(seed: int, step: int) -> np.random.Generator:
    """The selection Generator of `step`: derived, so a resumed run needs no RNG state."""
    return np.random.default_rng([int(seed), int(step), 0x5E1EC7])


# -- DARS --------------------------------------------------------------------------------------
def dars_extra_rollouts(accuracy, n: int, *, schedule: str = "hw", n_max: int = 64,
                        normalized: bool = False) -> np.ndarray:
    """Extra rollouts per prompt [P] int64 from stage-1 accuracy [P] in [0, 1].

    a = 0 counts as 0.5/n; a >= 0.5 gets 0. Per rollout the cumulative advantage is
    S = 2a(1-a) with peak A* = n/2, or (normalized, σ-scaled advantages)
    S = 2√(a(1-a)) with A* = n. Δn = ⌈(T - n·S)/S⌉ with T = A* ("et") or
    2(1-a)·A* ("hw"), clipped to [0, n_max - n].
    """
    _check_dars(n, schedule, n_max)
    a = np.asarray(accuracy, np.float64)
    if a.ndim != 1 or np.any(~(a >= 0) | ~(a <= 1)):
        raise ValueError(f"accuracy must be a [P] array in [0, 1], got shape {a.shape}")
    easy = a >= 0.5
    a = np.where(a <= _ZERO_ACCURACY, 0.5 / n, np.where(easy, 0.25, a))  # 0.25: masked below
    if normalized:
        s, peak = 2.0 * np.sqrt(a * (1.0 - a)), float(n)
    else:
        s, peak = 2.0 * a * (1.0 - a), 0.5 * n
    target = peak if schedule == "et" else 2.0 * (1.0 - a) * peak
    delta = np.ceil((target - n * s) / s)
    delta = np.clip(delta, 0, n_max - n)
    return np.where(easy, 0, delta).astype(np.int64)


def _check_dars(n: int, schedule: str, n_max: int) -> None:
    if schedule not in ("et", "hw"):
        raise ValueError(f"dars schedule must be 'et' or 'hw', got {schedule!r}")
    if not _is_int(n) or n < 1:
        raise ValueError(f"dars needs an integer n >= 1 rollouts per prompt, got {n!r}")
    if not _is_int(n_max) or n_max < n:
        raise ValueError(f"dars n_max must be an integer >= n = {n}, got {n_max!r}")


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


# -- BOTS --------------------------------------------------------------------------------------
def bots_scores(alpha, beta, rng: np.random.Generator, *, target: float = 0.5,
                thompson: bool = True) -> np.ndarray:
    """-|p - target| [K] with p ~ Beta(α, β) (one `rng.beta` call) or the posterior mean."""
    p = rng.beta(alpha, beta) if thompson else alpha / (alpha + beta)
    return -np.abs(p - target)


def top_or_sample(scores, rng: np.random.Generator, batch_size: int, tau: float) -> np.ndarray:
    """[B] distinct indices: the B best `scores` (τ = 0; ties to the lower index) or B
    draws without replacement from softmax(scores/τ) by the Gumbel-top-B trick (one
    `rng.gumbel` call; the same law as sequential draws, without underflow)."""
    if tau == 0:
        return np.argsort(-scores, kind="stable")[:batch_size]
    keys = scores / tau + rng.gumbel(size=scores.shape)
    return np.argsort(-keys, kind="stable")[:batch_size]


def capability(rates, offline_selected, previous: float | None, ema: float = 0.9) -> float:
    """EMA of c_new = (mean rate - mean f⁰)/(mean f¹ - mean f⁰ + 1e-6) over the selected
    tasks; the first estimate is taken as it is (Trinity-RFT). offline_selected [B, 2]."""
    f0, f1 = np.mean(offline_selected, axis=0)
    new = (float(np.mean(rates)) - f0) / (f1 - f0 + _CAP_EPS)
    return float(new) if previous is None else float(ema * previous + (1.0 - ema) * new)


def implicit_pass_rates(offline, c: float) -> np.ndarray:
    """p̃ = clip(f⁰ + c·(f¹ - f⁰), 0, 1) [K] from offline [K, 2] = (weak, strong)."""
    return np.clip(offline[:, 0] + c * (offline[:, 1] - offline[:, 0]), 0.0, 1.0)


def bots_posterior(alpha, beta, s, f, p_tilde, has_tilde, *, lam: float, rho: float, m: int,
                   prior: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """One generalized Bayesian step for all K tasks ([K] arrays in, new arrays out):

    α ← (1-λ)α + λ·prior + (1-ρ)s + ρ·m·p̃,  β ← (1-λ)β + λ·prior + (1-ρ)f + ρ·m·(1-p̃)

    s, f are zero for unobserved tasks; the implicit term is dropped where `has_tilde`
    is False (no prediction for the task).
    """
    implicit = np.where(has_tilde, rho * m, 0.0)
    new_alpha = (1 - lam) * alpha + lam * prior + (1 - rho) * s + implicit * p_tilde
    new_beta = (1 - lam) * beta + lam * prior + (1 - rho) * f + implicit * (1 - p_tilde)
    return new_alpha, new_beta


# -- the selectors -----------------------------------------------------------------------------
@SELECTORS.register("uniform")
@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Uniform:
    """The data iterator's order; no state, no extra rollouts."""

    num_tasks: int
    n: int
    offline: np.ndarray | None = None
    name = "uniform"

    def init_state(self) -> dict:
        return {}

    def select(self, state: dict, rng: np.random.Generator, batch_size: int) -> np.ndarray | None:
        """[B] task indices, or None: take the next batch from the data iterator."""
        return None

    def extra_rollouts(self, state: dict, accuracy) -> np.ndarray:
        """[P] int64 rollouts to add to each prompt after stage 1."""
        return np.zeros(np.shape(accuracy), np.int64)

    def update(self, state: dict, indices, successes, attempts) -> dict:
        """New state after a step; successes/attempts [P] count all rollouts of a prompt."""
        return state

    def metrics(self, state: dict) -> dict[str, float]:
        return dict(state.get("stats", {}))



@SELECTORS.register("dars")
@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Dars(Uniform):
    schedule: str = "hw"
    n_max: int = 64
    normalized: bool = False
    name = "dars"

    def __post_init__(self):
        _check_dars(self.n, self.schedule, self.n_max)
        if not isinstance(self.normalized, (bool, np.bool_)):
            raise ValueError(f"dars normalized must be a bool, got {self.normalized!r}")

    def extra_rollouts(self, state: dict, accuracy) -> np.ndarray:
        return dars_extra_rollouts(accuracy, self.n, schedule=self.schedule, n_max=self.n_max,
                                   normalized=self.normalized)

    def update(self, state: dict, indices, successes, attempts) -> dict:
        extra = np.maximum(np.asarray(attempts, np.int64) - self.n, 0)
        return {"stats": {"dars/extra_rollouts": float(extra.sum()),
                          "dars/extra_prompt_fraction": float(np.mean(extra > 0)),
                          "dars/rollouts_per_prompt": float(np.mean(attempts))}}



@SELECTORS.register("bots")
@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Bots(Uniform):
    lam: float = 0.1
    rho: float = 0.1
    tau: float = 0.0
    prior: float = 1.0
    target: float = 0.5
    thompson: bool = True
    cap_ema: float = 0.9
    name = "bots"

    def __post_init__(self):
        for key in ("lam", "rho", "tau", "prior", "target", "cap_ema"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise ValueError(f"bots {key} must be a number, got {value!r}")
        for key in ("lam", "rho", "target"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"bots {key} must be in [0, 1], got {getattr(self, key)}")
        if not 0.0 <= self.cap_ema < 1.0:
            raise ValueError(f"bots cap_ema must be in [0, 1), got {self.cap_ema}")
        if not (self.tau >= 0 and math.isfinite(self.tau)):
            raise ValueError(f"bots tau must be a finite number >= 0, got {self.tau}")
        if not self.prior > 0:
            raise ValueError(f"bots prior must be > 0, got {self.prior}")
        if not isinstance(self.thompson, (bool, np.bool_)):
            raise ValueError(f"bots thompson must be a bool, got {self.thompson!r}")
        if not (_is_int(self.num_tasks) and _is_int(self.n)) or min(self.num_tasks, self.n) < 1:
            raise ValueError(f"bots needs num_tasks >= 1 and n >= 1, got "
                             f"{self.num_tasks} and {self.n}")
        if self.offline is not None:
            off = np.asarray(self.offline, np.float64)
            if off.shape != (self.num_tasks, 2) or np.any(~(off >= 0) | ~(off <= 1)):
                raise ValueError(f"bots offline must be [num_tasks={self.num_tasks}, 2] pass "
                                 f"rates in [0, 1], got shape {off.shape}")
            object.__setattr__(self, "offline", off)

    def init_state(self) -> dict:
        """alpha, beta [K] float64 at the prior; cap_coef None until the first update."""
        k = self.num_tasks
        return {"alpha": np.full(k, float(self.prior)), "beta": np.full(k, float(self.prior)),
                "cap_coef": None}

    def select(self, state: dict, rng: np.random.Generator, batch_size: int) -> np.ndarray:
        if not 1 <= batch_size <= self.num_tasks:
            raise ValueError(f"bots batch_size must be in [1, {self.num_tasks}], got {batch_size}")
        scores = bots_scores(state["alpha"], state["beta"], rng, target=self.target,
                             thompson=self.thompson)
        return top_or_sample(scores, rng, batch_size, self.tau).astype(np.int64)

    def update(self, state: dict, indices, successes, attempts) -> dict:
        """indices [B] distinct tasks, successes/attempts [B] their rollout counts."""
        idx = np.asarray(indices, np.int64)
        s_obs, n_obs = np.asarray(successes, np.float64), np.asarray(attempts, np.float64)
        if idx.ndim != 1 or s_obs.shape != idx.shape or n_obs.shape != idx.shape:
            raise ValueError(f"bots update needs [B] indices/successes/attempts, got "
                             f"{idx.shape}, {s_obs.shape}, {n_obs.shape}")
        if len(np.unique(idx)) != len(idx) or np.any((idx < 0) | (idx >= self.num_tasks)):
            raise ValueError(f"bots update indices must be distinct and in [0, {self.num_tasks})")
        if np.any(n_obs < 1) or np.any((s_obs < 0) | (s_obs > n_obs)):
            raise ValueError("bots update needs attempts >= 1 and 0 <= successes <= attempts")
        k, rates = self.num_tasks, s_obs / n_obs
        s, f = np.zeros(k), np.zeros(k)
        s[idx], f[idx] = s_obs, n_obs - s_obs
        has_tilde = np.zeros(k, bool)
        has_tilde[idx] = True
        p_tilde, cap, stats = np.zeros(k), state["cap_coef"], {}
        if self.offline is not None:
            cap = capability(rates, self.offline[idx], cap, self.cap_ema)
            p_tilde = implicit_pass_rates(self.offline, cap)
            stats["bots/capability"] = cap
            stats["bots/implicit_abs_error"] = float(np.mean(np.abs(p_tilde[idx] - rates)))
            has_tilde[:] = True
        p_tilde[idx] = rates
        alpha, beta = state["alpha"], state["beta"]
        stats["bots/posterior_mean_selected"] = float(np.mean(
            alpha[idx] / (alpha[idx] + beta[idx])))
        stats["bots/pass_rate_selected"] = float(np.mean(rates))
        stats["bots/effective_ratio"] = float(np.mean((s_obs > 0) & (s_obs < n_obs)))
        alpha, beta = bots_posterior(alpha, beta, s, f, p_tilde, has_tilde, lam=self.lam,
                                     rho=self.rho, m=self.n, prior=self.prior)
        stats["bots/evidence"] = float(np.mean(alpha + beta))
        return {"alpha": alpha, "beta": beta, "cap_coef": cap, "stats": stats}



_RESERVED = ("num_tasks", "n", "offline")


def make(name: str, *, num_tasks: int, n: int, offline=None, **options) -> Uniform:
    """The selector `name` over a pool of `num_tasks` tasks with `n` rollouts per prompt;
    `offline` [num_tasks, 2] (weak, strong) reference pass rates or None."""
    cls = SELECTORS.get(name)
    check_kwargs("task selector", name, cls, options, reserved=_RESERVED)
    return cls(num_tasks=num_tasks, n=n, offline=offline, **options)


def names() -> list[str]:
    return SELECTORS.names()


def state_to_json(state: dict) -> dict:
    """`state` with arrays as lists of floats (exact in JSON: floats print round-trip)."""
    return {k: state_to_json(v) if isinstance(v, dict) else
            v.tolist() if isinstance(v, np.ndarray) else v for k, v in state.items()}


def state_from_json(data: dict) -> dict:
    """Inverse of `state_to_json`: lists back to float64 arrays."""
    return {k: state_from_json(v) if isinstance(v, dict) else
            np.asarray(v, np.float64) if isinstance(v, list) else v for k, v in data.items()}
