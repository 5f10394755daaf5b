"""A self-contained HTML report of a token-level base vs RL comparison.

`write` produces one file with inline CSS and JS and the figures embedded as
base64 PNG data URIs (no external URL anywhere), holding:

  * the summary as tables (nested keys flattened to "a / b" rows);
  * the figures;
  * the samples: the prompt in grey, then one `<span class="tok">` per completion
    token whose background encodes a metric, chosen with radio buttons.

Colour scales:
  * metrics named `delta*` (Δlog p): diverging, BLUE at -clip, white at 0, RED at
    +clip, with clip = `delta_clip` (2 nats by default);
  * any other metric with negative values: the same diverging scale, clipped at
    the 99th percentile of |value| over all samples (or `clips[name]`);
  * the rest (JS, entropies, ...): sequential, white at 0 to a saturated colour at
    the 99th percentile of the metric over all samples' tokens (or the fixed
    maximum `clips[name]`); larger values take the saturated colour.

Each token's colour under every selectable metric is computed here and stored
in its `data-c` attribute (space-separated, in the order of `metrics`); the
script only swaps them, so the static HTML (inline `style`, first metric) and the
toggled view use exactly the same colours. Every token's `title` tooltip lists
all of its values with 3 decimals; replaced tokens are underlined.
"""

from __future__ import annotations

import base64
import html
import numbers
import os
import unicodedata
from collections.abc import Mapping, Sequence

import numpy as np

WHITE = (255, 255, 255)
RED = (214, 39, 40)     # Δlog p at +clip: the RL model gives the realised token more mass
BLUE = (31, 119, 180)   # Δlog p at -clip: the RL model gives it less
SEQUENTIAL = {"js": (245, 130, 10), "entropy": (128, 60, 190)}  # by name prefix
OTHER = (20, 150, 140)
MISSING = "#e0e0e0"     # non-finite value
PERCENTILE = 99.0

_CSS = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1100px; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: left; }
td.num { text-align: right; font-family: monospace; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); }
figure { margin: 0.5em; } img { width: 100%; } figcaption { font-size: 0.85em; color: #555; }
.controls { position: sticky; top: 0; background: #fff; padding: 6px 0; z-index: 1; }
.legend { display: inline-flex; align-items: center; gap: 6px; margin-left: 1em; }
.bar { display: inline-block; width: 160px; height: 12px; border: 1px solid #aaa; }
.sample { border: 1px solid #ddd; border-radius: 4px; padding: 8px; margin: 10px 0; }
.meta { font-size: 0.85em; color: #555; margin-bottom: 4px; }
.prompt, .completion { white-space: pre-wrap; overflow-wrap: anywhere; font-family: monospace;
                       line-height: 1.6; }
.prompt { color: #888; margin-bottom: 6px; }
.tok { border-radius: 2px; }
.tok.rep { text-decoration: underline; text-decoration-thickness: 2px; }
"""

_JS = """
document.querySelectorAll('input[name="metric"]').forEach(function (radio) {
  radio.addEventListener('change', function () {
    var i = Number(radio.value);
    document.querySelectorAll('span.tok').forEach(function (tok) {
      tok.style.background = tok.getAttribute('data-c').split(' ')[i];
    });
    document.querySelectorAll('.legend').forEach(function (legend) {
      legend.style.display = Number(legend.getAttribute('data-i')) === i ? '' : 'none';
    });
  });
});
"""


def _hex(rgb) -> str:
    return "#%02x%02x%02x" % tuple(int(round(c)) for c in rgb)


def _mix(t: float, colour) -> str:
    """White at t=0 to `colour` at t=1."""
    return _hex([w + t * (c - w) for w, c in zip(WHITE, colour)])


class _Scale:
    def __init__(self, name: str, values: np.ndarray, delta_clip: float,
                 clips: Mapping[str, float]):
        finite = values[np.isfinite(values)]
        self.name = name
        self.diverging = name.startswith("delta") or bool((finite < 0).any())
        if name in clips:
            clip = float(clips[name])
            self.source = "fixed"
        elif name.startswith("delta"):
            clip = float(delta_clip)
            self.source = "fixed"
        else:
            data = np.abs(finite) if self.diverging else finite
            clip = float(np.percentile(data, PERCENTILE)) if data.size else 1.0
            self.source = f"p{PERCENTILE:g}"
        self.clip = clip if clip > 0 else 1.0
        prefix = next((p for p in SEQUENTIAL if name.startswith(p)), None)
        self.colour = SEQUENTIAL.get(prefix, OTHER)

    def __call__(self, value: float) -> str:
        if not np.isfinite(value):
            return MISSING
        t = float(np.clip(value / self.clip, -1.0, 1.0))
        if self.diverging:
            return _mix(t, RED) if t >= 0 else _mix(-t, BLUE)
        return _mix(max(t, 0.0), self.colour)

    def gradient(self) -> str:
        if self.diverging:
            return f"linear-gradient(to right, {_hex(BLUE)}, #ffffff, {_hex(RED)})"
        return f"linear-gradient(to right, #ffffff, {_hex(self.colour)})"

    def legend(self, index: int, shown: bool) -> str:
        clip = f"{self.clip:.3g}"
        low = f"≤ −{clip}" if self.diverging else "0"
        how = "fixed clip" if self.source == "fixed" else f"clip = {self.source} over all tokens"
        style = "" if shown else ' style="display:none"'
        return (f'<span class="legend" data-i="{index}"{style}>{html.escape(self.name)}: '
                f'{low} <span class="bar" style="background: {self.gradient()}"></span> '
                f'≥ {clip} ({html.escape(how)})</span>')


def _number(value) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "—"}[value]
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return f"{float(value):.4g}"
    return str(value)


def _flatten(value, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)) and any(isinstance(v, (Mapping, list, tuple))
                                                  for v in value):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return [(prefix, value)]
    rows = []
    for key, item in items:
        rows += _flatten(item, f"{prefix} / {key}" if prefix else key)
    return rows


def _cell(value) -> str:
    if isinstance(value, (numbers.Number, type(None))) and not isinstance(value, complex):
        return f'<td class="num">{_number(value)}</td>'
    if isinstance(value, (list, tuple)):
        return f'<td class="num">{html.escape(", ".join(_number(v) for v in value))}</td>'
    return f"<td>{html.escape(str(value))}</td>"


def _summary(summary: Mapping) -> str:
    tables, general = [], []
    for key, value in summary.items():
        if isinstance(value, Mapping):
            tables.append((str(key), _flatten(value)))
        else:
            general += _flatten(value, str(key))
    if general:
        tables.insert(0, ("overview", general))
    out = []
    for name, rows in tables:
        body = "".join(f"<tr><th>{html.escape(k)}</th>{_cell(v)}</tr>" for k, v in rows)
        out.append(f"<h3>{html.escape(name)}</h3><table>{body}</table>")
    return "\n".join(out)


def _figures(figures: Mapping[str, str]) -> str:
    out = []
    for name, path in figures.items():
        if path is None:
            continue
        with open(path, "rb") as f:
            data = base64.b64encode(f.read()).decode("ascii")
        alt = html.escape(str(name))
        out.append(f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
                   f"<figcaption>{alt}</figcaption></figure>")
    return f'<div class="figures">{"".join(out)}</div>' if out else ""


def _visible(text: str) -> str:
    """HTML-escaped token with whitespace and control characters made visible."""
    out = []
    for ch in text:
        if ch == "\n":
            out.append("↵\n")
        elif ch == "\t":
            out.append("⇥\t")
        elif ch == "\r":
            out.append("␍")
        elif unicodedata.category(ch) in ("Cc", "Cs"):
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(html.escape(ch))
    return "".join(out) or "∅"


def _tooltip(token: str, values: Mapping[str, Sequence[float]], i: int, order) -> str:
    lines = [f"token {i}: {token!r}"]
    for name in order:
        value = values[name][i]
        value = float("nan") if value is None else float(value)
        lines.append(f"{name}: {value:.3f}")
    return html.escape("\n".join(lines), quote=True)


def _sample(index: int, sample: Mapping, metrics: Sequence[str], scales: list[_Scale]) -> str:
    tokens, values = list(sample["tokens"]), sample["values"]
    replaced = sample.get("replaced")
    order = list(metrics) + [k for k in values if k not in metrics]
    for name in order:
        if len(values[name]) != len(tokens):
            raise ValueError(f"sample {index}: {len(values[name])} {name!r} values "
                             f"for {len(tokens)} tokens")
    if replaced is not None and len(replaced) != len(tokens):
        raise ValueError(f"sample {index}: {len(replaced)} `replaced` flags "
                         f"for {len(tokens)} tokens")
    spans = []
    for i, token in enumerate(tokens):
        colours = [scale(np.nan if values[m][i] is None else float(values[m][i]))
                   for m, scale in zip(metrics, scales)]
        cls = "tok rep" if replaced is not None and replaced[i] else "tok"
        spans.append(f'<span class="{cls}" style="background:{colours[0]}" '
                     f'data-c="{" ".join(colours)}" title="{_tooltip(token, values, i, order)}">'
                     f"{_visible(token)}</span>")
    reward = sample.get("reward")
    meta = f"sample {index} · {len(tokens)} tokens · reward {_number(reward)}"
    if replaced is not None:
        meta += f" · {int(sum(bool(r) for r in replaced))} replaced (underlined)"
    return (f'<div class="sample"><div class="meta">{html.escape(meta)}</div>'
            f'<div class="prompt">{html.escape(str(sample.get("prompt", "")))}</div>'
            f'<div class="completion">{"".join(spans)}</div></div>')


def write(path: str, *, title: str, samples: Sequence[Mapping], summary: Mapping,
          figures: Mapping[str, str], metrics: Sequence[str] = ("delta_logp", "js", "entropy_rl"),
          delta_clip: float = 2.0, clips: Mapping[str, float] | None = None) -> str:
    """Writes the HTML report to `path` and returns `path`.

    Args:
      samples: dicts {"prompt", "tokens", "reward", "values": {metric: [per token]},
        optionally "replaced": [bool per token]}; `values` holds every name in `metrics`.
      summary: nested JSON-able dict, shown as tables.
      figures: name -> PNG path, embedded as data URIs.
      metrics: the metrics the colouring can switch between; the first is shown initially.
      delta_clip: |Δlog p| (nats) at which the diverging scale saturates.
      clips: fixed saturation values per metric, replacing the 99th percentile.
    """
    if not metrics:
        raise ValueError("write: `metrics` is empty")
    clips = dict(clips or {})
    for i, sample in enumerate(samples):
        missing = [m for m in metrics if m not in sample["values"]]
        if missing:
            raise ValueError(f"sample {i}: no values for {missing}")
    scales = []
    for name in metrics:
        pooled = [np.nan if v is None else float(v) for s in samples for v in s["values"][name]]
        scales.append(_Scale(name, np.asarray(pooled, dtype=np.float64), delta_clip, clips))
    radios = " ".join(
        f'<label><input type="radio" name="metric" value="{i}"{" checked" if i == 0 else ""}>'
        f" {html.escape(name)}</label>" for i, name in enumerate(metrics))
    legends = "".join(scale.legend(i, i == 0) for i, scale in enumerate(scales))
    body = [
        f"<h1>{html.escape(title)}</h1>",
        "<h2>Summary</h2>" if summary else "", _summary(summary),
        "<h2>Figures</h2>" if figures else "", _figures(figures),
        f"<h2>Samples ({len(samples)})</h2>",
        f'<div class="controls">colour by: {radios}{legends}</div>',
        *(_sample(i, s, metrics, scales) for i, s in enumerate(samples)),
    ]
    document = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
                + "\n".join(b for b in body if b)
                + f"\n<script>{_JS}</script>\n</body></html>\n")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(document)
    return path
