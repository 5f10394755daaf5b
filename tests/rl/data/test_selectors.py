"""Task selectors (uniform, DARS, BOTS) against NumPy re-derivations of the papers' rules."""

import json
import math

import numpy as np
import pytest

from rl.data import selectors
from rl.registry import RegistryError


# -- DARS --------------------------------------------------------------------------------------
def ref_dars(a, n, schedule, n_max, normalized):
    """Δn for one prompt, straight from the paper's formulas."""
    if a == 0:
        a = 0.5 / n
    if a >= 0.5:
        return 0
    per_rollout = 2 * math.sqrt(a * (1 - a)) if normalized else 2 * a * (1 - a)
    peak = n if normalized else n / 2
    target = peak if schedule == "et" else 2 * (1 - a) * peak
    extra = math.ceil((target - n * per_rollout) / per_rollout)
    return min(max(extra, 0), n_max - n)


GRID = [0.0, 0.01, 0.1, 0.2, 0.3, 0.4, 0.45, 0.49, 0.5, 0.51, 0.7, 0.99, 1.0]


@pytest.mark.parametrize("schedule", ["et", "hw"])
@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("n,n_max", [(4, 4), (8, 32), (8, 64), (16, 1000)])
def test_dars_matches_reference(schedule, normalized, n, n_max):
    acc = np.array(GRID + [k / n for k in range(n + 1)])
    got = selectors.dars_extra_rollouts(acc, n, schedule=schedule, n_max=n_max,
                                        normalized=normalized)
    want = [ref_dars(a, n, schedule, n_max, normalized) for a in acc]
    assert got.dtype == np.int64 and got.shape == acc.shape
    np.testing.assert_array_equal(got, want)


def test_dars_hand_values_and_edges():
    acc = np.arange(9) / 8
    et = selectors.dars_extra_rollouts(acc, 8, schedule="et", n_max=1000)
    # a=0 -> 1/16: S = 0.1171875, (4 - 0.9375)/S = 26.1 -> 27; 1/8: 10.3 -> 11; 1/4: 2.7 -> 3
    np.testing.assert_array_equal(et, [27, 11, 3, 1, 0, 0, 0, 0, 0])
    hw = selectors.dars_extra_rollouts(acc, 8, schedule="hw", n_max=1000)
    assert np.all(hw[:4] >= et[:4]) and np.all(hw[4:] == 0)
    capped = selectors.dars_extra_rollouts(acc, 8, schedule="hw", n_max=16)
    np.testing.assert_array_equal(capped, np.minimum(hw, 8))
    assert not selectors.dars_extra_rollouts(acc, 8, n_max=8).any()


@pytest.mark.parametrize("normalized", [False, True])
def test_dars_et_reaches_peak_advantage(normalized):
    n = 8
    acc = np.concatenate([[0.0], np.linspace(0.01, 0.49, 49)])
    extra = selectors.dars_extra_rollouts(acc, n, schedule="et", n_max=10_000,
                                          normalized=normalized)
    a = np.where(acc == 0, 0.5 / n, acc)
    s = 2 * np.sqrt(a * (1 - a)) if normalized else 2 * a * (1 - a)
    peak = n if normalized else n / 2
    assert np.all((n + extra) * s >= peak - 1e-9)
    assert np.all((n + extra - 1) * s < peak)  # and Δn is the least that does


def test_dars_selector_is_uniform_order_and_reports_extras():
    sel = selectors.make("dars", num_tasks=100, n=8, schedule="et", n_max=32)
    state = sel.init_state()
    assert sel.select(state, np.random.default_rng(0), 4) is None
    extra = sel.extra_rollouts(state, np.array([0.0, 0.25, 0.5, 1.0]))
    np.testing.assert_array_equal(extra, [24, 3, 0, 0])
    state = sel.update(state, None, np.array([1, 4, 4, 8]), 8 + extra)
    assert sel.metrics(state) == {"dars/extra_rollouts": 27.0, "dars/extra_prompt_fraction": 0.5,
                                  "dars/rollouts_per_prompt": 14.75}


def test_dars_b_overrides():
    assert selectors.DARS_B_OVERRIDES["train.minibatches"] == 1
    assert selectors.DARS_B_OVERRIDES["train.epochs"] == 2
    assert selectors.DARS_B_OVERRIDES["data.selector.name"] == "dars"


def test_uniform():
    sel = selectors.make("uniform", num_tasks=10, n=4)
    state = sel.init_state()
    assert sel.select(state, np.random.default_rng(0), 3) is None
    np.testing.assert_array_equal(sel.extra_rollouts(state, np.zeros(3)), [0, 0, 0])
    assert sel.update(state, None, np.ones(3), np.full(3, 4)) == {}
    assert sel.metrics(state) == {}
    assert selectors.names() == ["bots", "dars", "uniform"]


# -- BOTS --------------------------------------------------------------------------------------
def ref_bots_step(alpha, beta, cap, idx, succ, att, offline, lam, rho, m, prior=1.0, ema=0.9):
    """One BOTS step as a loop over tasks (Trinity-RFT's interpolation plug-in)."""
    alpha, beta = list(alpha), list(beta)
    rates = {int(k): s / a for k, s, a in zip(idx, succ, att)}
    if offline is not None:
        mean_rate = sum(rates.values()) / len(rates)
        f0 = sum(offline[k][0] for k in rates) / len(rates)
        f1 = sum(offline[k][1] for k in rates) / len(rates)
        new = (mean_rate - f0) / (f1 - f0 + 1e-6)
        cap = new if cap is None else ema * cap + (1 - ema) * new
    for k in range(len(alpha)):
        s = f = 0.0
        if k in rates:
            j = list(idx).index(k)
            s, f = succ[j], att[j] - succ[j]
            pt = rates[k]
        elif offline is not None:
            pt = min(max(offline[k][0] + cap * (offline[k][1] - offline[k][0]), 0.0), 1.0)
        else:
            pt = None
        ia = 0.0 if pt is None else rho * m * pt
        ib = 0.0 if pt is None else rho * m * (1 - pt)
        alpha[k] = (1 - lam) * alpha[k] + lam * prior + (1 - rho) * s + ia
        beta[k] = (1 - lam) * beta[k] + lam * prior + (1 - rho) * f + ib
    return np.array(alpha), np.array(beta), cap


@pytest.mark.parametrize("with_offline", [False, True])
def test_bots_update_matches_loop(with_offline):
    rng = np.random.default_rng(1)
    k, m, lam, rho, prior = 12, 8, 0.15, 0.3, 1.5
    offline = rng.uniform(0, 1, (k, 2)) if with_offline else None
    sel = selectors.make("bots", num_tasks=k, n=m, offline=offline, lam=lam, rho=rho,
                         prior=prior)
    state = sel.init_state()
    alpha, beta, cap = np.full(k, prior), np.full(k, prior), None
    for step in range(4):
        idx = rng.choice(k, 5, replace=False)
        att = rng.integers(1, 2 * m, 5)  # DARS-style totals, not always m
        succ = rng.binomial(att, 0.4)
        state = sel.update(state, idx, succ, att)
        alpha, beta, cap = ref_bots_step(alpha, beta, cap, idx, succ, att,
                                         None if offline is None else offline.tolist(),
                                         lam, rho, m, prior)
        np.testing.assert_allclose(state["alpha"], alpha, rtol=1e-12)
        np.testing.assert_allclose(state["beta"], beta, rtol=1e-12)
        assert state["cap_coef"] == pytest.approx(cap, rel=1e-12) if with_offline \
            else state["cap_coef"] is None


def test_bots_capability_ema_and_clipping():
    # f⁰ = 0.2, f¹ = 0.6 on every task but the last two, whose p̃ leaves [0, 1]
    offline = np.array([[0.2, 0.6]] * 6 + [[0.9, 0.1], [0.0, 1.0]])
    sel = selectors.make("bots", num_tasks=8, n=10, offline=offline, lam=0.0, rho=1.0)
    idx, att = np.array([0, 1]), np.array([10, 10])
    state, cap = sel.init_state(), None
    for succ in ([6, 8], [10, 10], [0, 0]):
        state = sel.update(state, idx, np.array(succ), att)
        new = (np.mean(succ) / 10 - 0.2) / (0.4 + 1e-6)
        cap = new if cap is None else 0.9 * cap + 0.1 * new
        assert state["cap_coef"] == pytest.approx(cap, rel=1e-12)
        assert sel.metrics(state)["bots/capability"] == pytest.approx(cap, rel=1e-12)
    # caps: 0.5/0.4 = 1.25, 0.9·1.25 + 0.1·2 = 1.325, 0.9·1.325 + 0.1·(-0.5) = 1.1425
    assert cap == pytest.approx(1.1425, rel=1e-5)
    p_tilde = selectors.implicit_pass_rates(offline, cap)
    np.testing.assert_allclose(p_tilde[2:6], 0.2 + cap * 0.4)
    assert p_tilde[6] == 0.0 and p_tilde[7] == 1.0  # 0.9 - 0.8·1.1425 < 0, 1.1425 > 1
    # with λ = 0 and ρ = 1 the last step adds exactly m·p̃ to α of an unselected task
    before = sel.update(sel.init_state(), idx, np.array([6, 8]), att)
    before = sel.update(before, idx, np.array([10, 10]), att)
    np.testing.assert_allclose(state["alpha"][2:] - before["alpha"][2:], 10 * p_tilde[2:])


def test_bots_thompson_top_b_is_nearest_half():
    rng = np.random.default_rng(2)
    k, b = 40, 7
    sel = selectors.make("bots", num_tasks=k, n=8)
    state = {"alpha": rng.uniform(0.5, 20, k), "beta": rng.uniform(0.5, 20, k), "cap_coef": None}
    got = sel.select(state, np.random.default_rng(123), b)
    draws = np.random.default_rng(123).beta(state["alpha"], state["beta"])
    distance = np.abs(draws - 0.5)
    want = sorted(range(k), key=lambda i: distance[i])[:b]
    np.testing.assert_array_equal(got, want)
    assert np.max(distance[got]) <= np.min(np.delete(distance, got))
    np.testing.assert_array_equal(got, sel.select(state, np.random.default_rng(123), b))


def test_bots_softmax_sampling_law():
    # τ > 0 draws B without replacement from softmax(score/τ) (thompson off: fixed scores)
    means = np.array([0.5, 0.4, 0.2, 0.05])
    sel = selectors.make("bots", num_tasks=4, n=8, tau=0.1, thompson=False)
    state = {"alpha": means * 10, "beta": (1 - means) * 10, "cap_coef": None}
    scores = -np.abs(means - 0.5)
    q = np.exp(scores / 0.1) / np.exp(scores / 0.1).sum()
    rng, trials = np.random.default_rng(0), 4000
    picks = np.array([sel.select(state, rng, 2) for _ in range(trials)])
    assert all(len(set(p)) == 2 for p in picks)
    np.testing.assert_allclose(np.bincount(picks[:, 0], minlength=4) / trials, q, atol=0.03)
    second = np.array([sum(q[i] * q[j] / (1 - q[i]) for i in range(4) if i != j)
                       for j in range(4)])  # P(j second) for sequential draws
    np.testing.assert_allclose(np.bincount(picks[:, 1], minlength=4) / trials, second,
                               atol=0.03)


def test_bots_posteriors_track_true_pass_rates():
    rng = np.random.default_rng(0)
    k, b, n, steps = 50, 10, 16, 30
    true_p = rng.uniform(0.02, 0.98, k)
    sel = selectors.make("bots", num_tasks=k, n=n)
    state, errors = sel.init_state(), []
    for step in range(steps):
        idx = sel.select(state, selectors.step_rng(0, step), b)
        post = state["alpha"][idx] / (state["alpha"][idx] + state["beta"][idx])
        errors.append(np.mean(np.abs(post - true_p[idx])))
        state = sel.update(state, idx, rng.binomial(n, true_p[idx]), np.full(b, n))
    assert np.mean(errors[-5:]) < 0.5 * np.mean(errors[:5])
    final = np.mean(np.abs(state["alpha"] / (state["alpha"] + state["beta"]) - true_p))
    assert final < 0.5 * np.mean(np.abs(0.5 - true_p))
    metrics = sel.metrics(state)
    assert set(metrics) == {"bots/posterior_mean_selected", "bots/pass_rate_selected",
                            "bots/effective_ratio", "bots/evidence"}
    assert 0 <= metrics["bots/effective_ratio"] <= 1


# -- options and state -------------------------------------------------------------------------
@pytest.mark.parametrize("name,options", [
    ("dars", {"schedule": "linear"}), ("dars", {"n_max": 4}), ("dars", {"n_max": 32.5}),
    ("dars", {"normalized": "yes"}), ("bots", {"lam": 1.5}), ("bots", {"rho": -0.1}),
    ("bots", {"tau": -1.0}), ("bots", {"tau": float("inf")}), ("bots", {"prior": 0.0}),
    ("bots", {"target": 2.0}), ("bots", {"cap_ema": 1.0}), ("bots", {"lam": "0.1"}),
    ("bots", {"thompson": 1}), ("bots", {"offline": np.zeros((3, 2))}),
    ("bots", {"offline": np.full((10, 2), 1.5)}),
])
def test_bad_options_raise_one_line(name, options):
    offline = options.pop("offline", None)
    with pytest.raises(ValueError) as err:
        selectors.make(name, num_tasks=10, n=8, offline=offline, **options)
    assert "\n" not in str(err.value) and name in str(err.value)


def test_bad_inputs_raise():
    with pytest.raises(RegistryError, match="unknown task selector 'random'"):
        selectors.make("random", num_tasks=10, n=8)
    with pytest.raises(RegistryError, match="has no option 'lamb'"):
        selectors.make("bots", num_tasks=10, n=8, lamb=0.1)
    sel = selectors.make("bots", num_tasks=10, n=8)
    state = sel.init_state()
    with pytest.raises(ValueError, match="batch_size"):
        sel.select(state, np.random.default_rng(0), 11)
    with pytest.raises(ValueError, match="distinct"):
        sel.update(state, np.array([1, 1]), np.array([1, 2]), np.array([8, 8]))
    with pytest.raises(ValueError, match="successes"):
        sel.update(state, np.array([1, 2]), np.array([9, 2]), np.array([8, 8]))
    with pytest.raises(ValueError, match="accuracy"):
        selectors.dars_extra_rollouts(np.array([0.5, 1.2]), 8)


@pytest.mark.parametrize("name", ["uniform", "dars", "bots"])
def test_state_json_round_trip(name):
    rng = np.random.default_rng(5)
    offline = rng.uniform(0, 1, (20, 2)) if name == "bots" else None
    sel = selectors.make(name, num_tasks=20, n=8, offline=offline)
    state = sel.init_state()
    for step in range(3):
        idx = sel.select(state, selectors.step_rng(7, step), 4)
        idx = np.arange(4) if idx is None else idx
        state = sel.update(state, idx, rng.integers(0, 9, 4), np.full(4, 8))
    back = selectors.state_from_json(json.loads(json.dumps(selectors.state_to_json(state))))
    assert back.keys() == state.keys()
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            assert back[key].dtype == value.dtype and np.array_equal(back[key], value)
        else:
            assert back[key] == value
    if name == "bots":  # the restored state selects the same tasks
        np.testing.assert_array_equal(sel.select(back, selectors.step_rng(7, 9), 4),
                                      sel.select(state, selectors.step_rng(7, 9), 4))
