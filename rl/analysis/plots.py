"""PNG figures for the token-level comparison of a base and an RL-trained model.

Each function draws one figure with matplotlib (the `plots` extra, Agg backend),
writes it to `path` and returns `path`:

    distributions  histograms of per-token Δlog p and Jensen-Shannon divergence
    positions      where in the completion the two models disagree
    mass           how probability mass moved relative to the base's top-1 / top-k
    sweep          accuracy of mixed decoding against budget or gamma
    updates        how much consecutive checkpoints differ
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from models import extras

DPI = 110


def _pyplot():
    extras.check("matplotlib", "plots", "analysis plots (rl.analysis.plots)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> str:
    plt = _pyplot()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _finite(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    return values[np.isfinite(values)]


def _histogram(ax, values, *, bins: int, color: str, xlabel: str, zero_line: bool) -> None:
    if values.size == 0:
        ax.text(0.5, 0.5, "no positions", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.hist(values, bins=bins, color=color, alpha=0.85, log=True)
        ax.set_title(f"n = {values.size:,}, mean = {values.mean():.4g}, "
                     f"median = {np.median(values):.4g}", fontsize=9)
    if zero_line:
        ax.axvline(0.0, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("positions (log scale)")
    ax.grid(alpha=0.3)


def distributions(records: Mapping[str, np.ndarray], path: str, *,
                  labels: tuple[str, str] = ("base", "rl"), bins: int = 80) -> str:
    """Histograms of `records["delta_logp"]` and `records["js"]` (valid positions, 1-D)."""
    plt = _pyplot()
    base, rl = labels
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    _histogram(left, _finite(records["delta_logp"]), bins=bins, color="tab:red",
               xlabel=f"Δlog p = log π_{rl} − log π_{base} (nats, realised token)", zero_line=True)
    _histogram(right, _finite(records["js"]), bins=bins, color="tab:orange",
               xlabel=f"JS({base} ‖ {rl}) of the next-token distributions (nats)",
               zero_line=False)
    fig.suptitle(f"Per-token difference between {base} and {rl}")
    return _save(fig, path)


def positions(positional: Mapping, path: str) -> str:
    """Share of positions above each JS threshold and mean JS, per normalised-position bin."""
    plt = _pyplot()
    edges = np.asarray(positional["edges"], dtype=np.float64)
    centres = (edges[:-1] + edges[1:]) / 2
    width = float(np.min(np.diff(edges))) if edges.size > 1 else 0.1
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    for threshold, fractions in sorted(positional.get("high_fraction", {}).items(),
                                       key=lambda kv: float(kv[0])):
        top.plot(centres, fractions, "o-", label=f"JS > {threshold}")
    top.set_ylabel("share of positions")
    top.set_title("Where in the completion the models disagree")
    top.grid(alpha=0.3)
    if positional.get("high_fraction"):
        top.legend(loc="best")
    bottom.bar(centres, positional["mean_js"], width=0.8 * width, color="tab:orange",
               alpha=0.8, label="mean JS")
    bottom.set_ylabel("mean JS (nats)", color="tab:orange")
    bottom.grid(alpha=0.3)
    if positional.get("mean_abs_delta") is not None:
        twin = bottom.twinx()
        twin.plot(centres, positional["mean_abs_delta"], "s-", color="tab:red",
                  label="mean |Δlog p|")
        twin.set_ylabel("mean |Δlog p| (nats)", color="tab:red")
    bottom.set_xlabel("normalised position in the completion (0 = first token, 1 = last)")
    bottom.set_xlim(edges[0], edges[-1])
    return _save(fig, path)


def mass(reallocation: Mapping[str, Mapping[str, float]], path: str) -> str:
    """Grouped bars: mean change in probability mass (model − base) by base-ranked token set."""
    plt = _pyplot()
    groups = (("top1", "base's top-1 token"), ("topk", "within base's top-k"),
              ("outside", "outside base's top-k"))
    models = [m for m in ("rl", "sft") if m in reallocation]
    models += [m for m in reallocation if m not in models]
    if not models:
        raise ValueError("mass: `reallocation` holds no model")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = np.arange(len(groups))
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        heights = [float(reallocation[model].get(key, np.nan)) for key, _ in groups]
        bars = ax.bar(x + (i - (len(models) - 1) / 2) * width, heights, width,
                      label=f"{model} − base")
        ax.bar_label(bars, fmt="%+.3f", fontsize=8, padding=2)
    ax.axhline(0.0, color="black", linewidth=1)
    ax.set_xticks(x, [label for _, label in groups])
    ax.set_ylabel("mean change in probability mass")
    ax.set_title("Where probability mass moved, relative to the base model's ranking")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="best")
    ax.margins(y=0.15)
    return _save(fig, path)


def sweep(rows: Sequence[Mapping], x: str, path: str, *, title: str = "") -> str:
    """Accuracy against `x` ("realised_fraction" or "gamma"), one line per (direction, criterion).

    Rows with `criterion == "pure"` and `policy` in ("base", "rl") are drawn as
    dashed horizontal reference lines at their accuracy.
    """
    if not rows:
        raise ValueError("sweep: no rows to plot")
    plt = _pyplot()
    lines: dict[tuple[str, str], list[tuple[float, float]]] = {}
    references = []
    for row in rows:
        if row.get("accuracy") is None:
            continue
        if row.get("criterion") == "pure":
            if row.get("policy") in ("base", "rl"):
                references.append((row["policy"], float(row["accuracy"])))
            continue
        if row.get(x) is None:
            continue
        key = (str(row.get("direction", "")), str(row.get("criterion", "")))
        lines.setdefault(key, []).append((float(row[x]), float(row["accuracy"])))
    if not lines and not references:
        raise ValueError(f"sweep: no row has both {x!r} and 'accuracy'")
    fig, ax = plt.subplots(figsize=(9, 5))
    # One colour per criterion, one line style per direction (solid forward, dashed
    # reverse), so a criterion's two directions read as a pair.
    criteria = sorted({criterion for _, criterion in lines})
    colours = {c: plt.get_cmap("tab10")(i % 10) for i, c in enumerate(criteria)}
    styles = {"reverse": ("s", "--")}
    for (direction, criterion), points in sorted(lines.items()):
        xs, ys = zip(*sorted(points))
        label = f"{criterion} ({direction})" if direction else criterion
        marker, style = styles.get(direction, ("o", "-"))
        ax.plot(xs, ys, marker=marker, linestyle=style, color=colours[criterion], label=label)
    for (policy, accuracy), color in zip(references, ("tab:gray", "black", "tab:brown")):
        ax.axhline(accuracy, color=color, linestyle=":", linewidth=1.4,
                   label=f"pure {policy} ({accuracy:.3f})")
    ax.set_xlabel({"realised_fraction": "realised fraction of positions from the other model",
                   "gamma": "gamma"}.get(x, x))
    ax.set_ylabel("accuracy")
    ax.set_title(title or f"Accuracy against {x}")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def updates(steps: Sequence[Mapping], path: str) -> str:
    """Mean |Δlog p| and share of positions with JS above a threshold between checkpoints."""
    if not steps:
        raise ValueError("updates: no steps to plot")
    plt = _pyplot()
    rows = sorted(steps, key=lambda r: r["to_step"])
    xs = [r["to_step"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(xs, [r.get("mean_abs_delta", np.nan) for r in rows], "o-", color="tab:red",
            label="mean |Δlog p|")
    ax.set_xlabel("checkpoint step (compared with the previous one)")
    ax.set_ylabel("mean |Δlog p| (nats)", color="tab:red")
    ax.grid(alpha=0.3)
    twin = ax.twinx()
    fraction_keys = sorted({k for r in rows for k in r if k.startswith("frac_js_above_")})
    for key, marker in zip(fraction_keys, "s^vD*"):
        twin.plot(xs, [r.get(key, np.nan) for r in rows], marker + "--",
                  label=f"share JS > {key.removeprefix('frac_js_above_')}")
    twin.set_ylabel("share of positions")
    handles = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], loc="best")
    ax.set_title("Change between consecutive checkpoints")
    return _save(fig, path)
