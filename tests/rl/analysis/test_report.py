"""The token-level HTML report (rl.analysis.report) and its figures (rl.analysis.plots)."""

import base64
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from rl.analysis import plots, report  # noqa: E402

METRICS = ("delta_logp", "js", "entropy_rl")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class _Tokens(HTMLParser):
    """Collects the attributes and text of every `span.tok`, and every src/href value."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.spans, self.links, self.radios = [], [], []
        self._depth = 0  # > 0 inside a token span

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.links += [attrs[k] for k in ("src", "href") if k in attrs]
        if tag == "input" and attrs.get("type") == "radio":
            self.radios.append(attrs)
        if self._depth:
            self._depth += tag == "span"
        elif tag == "span" and "tok" in attrs.get("class", "").split():
            self.spans.append({**attrs, "text": ""})
            self._depth = 1

    def handle_endtag(self, tag):
        if self._depth and tag == "span":
            self._depth -= 1

    def handle_data(self, data):
        if self._depth:
            self.spans[-1]["text"] += data


def _parse(text):
    parser = _Tokens()
    parser.feed(text)
    return parser


def _sample(tokens, delta, *, prompt="Q: 1 + 1?", replaced=None):
    n = len(tokens)
    values = {"delta_logp": list(delta), "js": list(np.linspace(0.0, 0.3, n)),
              "entropy_rl": list(np.linspace(0.1, 2.0, n)), "logp_base": [-1.5] * n}
    sample = {"prompt": prompt, "tokens": list(tokens), "reward": 1.0, "values": values}
    if replaced is not None:
        sample["replaced"] = replaced
    return sample


@pytest.fixture
def figure(tmp_path):
    import matplotlib.pyplot as plt

    path = str(tmp_path / "tiny.png")
    plt.imsave(path, np.random.default_rng(0).random((8, 12, 3)))
    return path


@pytest.fixture
def samples():
    tokens = ["<b>&", " two", "\n", "  ", "ok", "\"q'"]
    return [_sample(tokens, [2.5, -3.0, 0.0, 0.4, -0.4, 1.0],
                    replaced=[False, True, False, False, True, False]),
            _sample(["x", "y"], [0.1, None], prompt="<prompt & more>")]


def _write(tmp_path, samples, figures, summary=None, **kwargs):
    path = str(tmp_path / "report.html")
    out = report.write(path, title="base <vs> rl", samples=samples,
                       summary=summary if summary is not None else {}, figures=figures, **kwargs)
    assert out == path
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_report_is_self_contained_with_embedded_figures(tmp_path, samples, figure):
    text = _write(tmp_path, samples, {"distributions": figure})
    links = _parse(text).links
    assert links, "the figure should be an <img src=...>"
    for link in links:
        assert link.startswith(("data:", "#")), link
    for attr in re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", text):
        assert attr.startswith(("data:", "#")), attr
    assert "http://" not in text and "https://" not in text
    assert not re.search(r"""(?:src|href)\s*=\s*["']?//""", text)
    with open(figure, "rb") as f:
        encoded = base64.b64encode(f.read()).decode("ascii")
    assert f'src="data:image/png;base64,{encoded}"' in text
    assert "<script src" not in text and "<link" not in text


def test_tokens_are_escaped_one_span_each_with_tooltips(tmp_path, samples, figure):
    text = _write(tmp_path, samples, {})
    spans = _parse(text).spans
    assert len(spans) == sum(len(s["tokens"]) for s in samples)
    assert "&lt;b&gt;&amp;" in text and "<b>&" not in text
    assert "&lt;prompt &amp; more&gt;" in text and "base &lt;vs&gt; rl" in text
    first = spans[0]
    assert first["text"] == "<b>&"
    assert spans[2]["text"] == "↵\n" and spans[3]["text"] == "  "
    assert spans[5]["text"] == "\"q'"
    # the tooltip lists every value (metrics and extras) with 3 decimals
    assert "'<b>&'" in first["title"]
    for line in ("delta_logp: 2.500", "js: 0.000", "entropy_rl: 0.100", "logp_base: -1.500"):
        assert line in first["title"]
    assert "delta_logp: nan" in spans[-1]["title"]
    assert [("rep" in s["class"].split()) for s in spans[:6]] == [False, True, False, False,
                                                                   True, False]
    assert "white-space: pre-wrap" in text


def test_initial_colouring_is_static_and_toggle_covers_every_metric(tmp_path, samples):
    text = _write(tmp_path, samples, {})
    parsed = _parse(text)
    assert [r["value"] for r in parsed.radios] == [str(i) for i in range(len(METRICS))]
    assert "checked" in parsed.radios[0]
    for name in METRICS:
        assert re.search(rf'<input type="radio"[^>]*> {name}</label>', text), name
    red, blue = report._hex(report.RED), report._hex(report.BLUE)
    spans = parsed.spans
    colours = [s["data-c"].split(" ") for s in spans]
    assert all(len(c) == len(METRICS) for c in colours)
    assert [s["style"] for s in spans] == [f"background:{c[0]}" for c in colours]
    assert colours[0][0] == red and colours[1][0] == blue      # +2.5 / -3 clip at ±2 nats
    assert colours[2][0] == "#ffffff"                          # 0 is white
    assert colours[-1][0] == report.MISSING                    # None
    assert colours[0][1] == "#ffffff"                          # js = 0
    assert text.count('class="legend"') == len(METRICS)


def test_delta_clip_and_fixed_clips(tmp_path, samples):
    parsed = _parse(_write(tmp_path, samples, {}, delta_clip=5.0, clips={"js": 0.3}))
    colours = [s["data-c"].split(" ") for s in parsed.spans]
    assert colours[0][0] not in (report._hex(report.RED), "#ffffff")   # 2.5 of 5 nats
    assert colours[5][1] == report._hex(report.SEQUENTIAL["js"])         # js = 0.3 = clip


def test_summary_tables_flatten_nested_keys(tmp_path, samples):
    summary = {"tokens": 12345, "rate": 0.123456,
               "js": {"mean": 0.0123456, "quantiles": {"p99": 1.5}, "ok": True},
               "by_position": [{"mean": 2.0}]}
    text = _write(tmp_path, samples, {}, summary=summary)
    # one table per top-level section (scalars in "overview"), deeper keys as "a / b" rows
    tables = dict(re.findall(r"<h3>([^<]*)</h3><table>(.*?)</table>", text))
    assert sorted(tables) == ["js", "overview"]
    assert re.search(r"<th>quantiles / p99</th><td[^>]*>1.5</td>", tables["js"])
    assert re.search(r"<th>mean</th><td[^>]*>0.01235</td>", tables["js"])
    assert re.search(r"<th>ok</th><td[^>]*>true</td>", tables["js"])
    assert re.search(r"<th>rate</th><td[^>]*>0.1235</td>", tables["overview"])
    assert re.search(r"<th>by_position / 0 / mean</th><td[^>]*>2</td>", tables["overview"])
    assert re.search(r"<th>tokens</th><td[^>]*>12345</td>", tables["overview"])


def test_mismatched_lengths_raise(tmp_path, samples):
    samples[0]["values"]["js"] = samples[0]["values"]["js"][:-1]
    with pytest.raises(ValueError, match="'js' values"):
        _write(tmp_path, samples, {})
    del samples[1]["values"]["entropy_rl"]
    with pytest.raises(ValueError, match="no values"):
        _write(tmp_path, samples[1:], {})


# ---- plots ----

SWEEP = [
    {"criterion": c, "direction": d, "budget": b, "gamma": g, "realised_fraction": b * 0.8,
     "accuracy": 0.4 + b + (0.05 if d == "forward" else 0.0), "pass@1": 0.4, "pass@4": 0.7}
    for c in ("js", "delta") for d in ("forward", "reverse")
    for b, g in ((0.02, 0.0), (0.04, 0.5), (0.08, 1.0))
] + [{"criterion": "pure", "policy": "base", "accuracy": 0.35},
     {"criterion": "pure", "policy": "rl", "accuracy": 0.55}]


def _check_png(path):
    import matplotlib.image

    assert os.path.getsize(path) > 1000
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[2] in (3, 4) and min(image.shape[:2]) > 100


def _positional():
    rng = np.random.default_rng(0)
    return {"edges": list(np.linspace(0, 1, 11)),
            "high_fraction": {"0.01": list(rng.random(10) * 0.5),
                              "0.1": list(rng.random(10) * 0.1)},
            "mean_js": list(rng.random(10) * 0.05), "mean_abs_delta": list(rng.random(10))}


PLOTS = {
    "distributions": lambda p: plots.distributions(
        {"delta_logp": np.random.default_rng(0).normal(0, 0.5, 2000),
         "js": np.random.default_rng(1).exponential(0.02, 2000)}, p),
    "positions": lambda p: plots.positions(_positional(), p),
    "mass": lambda p: plots.mass({"rl": {"top1": 0.05, "topk": -0.01, "outside": -0.04},
                                  "sft": {"top1": 0.02, "topk": 0.0, "outside": -0.02}}, p),
    "mass_rl_only": lambda p: plots.mass({"rl": {"top1": 0.05, "topk": -0.01,
                                                 "outside": -0.04}}, p),
    "sweep_fraction": lambda p: plots.sweep(SWEEP, "realised_fraction", p, title="mixed"),
    "sweep_gamma": lambda p: plots.sweep(SWEEP, "gamma", p),
    "updates": lambda p: plots.updates(
        [{"from_step": s - 3, "to_step": s, "mean_abs_delta": 0.1 / s,
          "frac_js_above_0.01": 0.3 / s} for s in (3, 6, 9)], p),
}


@pytest.mark.parametrize("name", sorted(PLOTS))
def test_plot_writes_a_png(tmp_path, name):
    path = str(tmp_path / "sub" / f"{name}.png")
    assert PLOTS[name](path) == path
    _check_png(path)


def test_sweep_rejects_empty_rows(tmp_path):
    with pytest.raises(ValueError):
        plots.sweep([], "gamma", str(tmp_path / "empty.png"))
    assert not os.path.exists(tmp_path / "empty.png")


# ---- the report in a browser ----

def _run_chromium(chromium, html_path, tmp_path, name):
    """Screenshots `html_path`; (path of the PNG or None, chromium's stderr)."""
    shot = tmp_path / f"{name}.png"
    result = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
         "--window-size=1000,700", f"--screenshot={shot}", f"file://{html_path}"],
        cwd=tmp_path, timeout=120, check=False, capture_output=True, text=True)
    return (shot if result.returncode == 0 and shot.exists() else None), result.stderr


def _screenshot(chromium, html_path, tmp_path, name):
    import matplotlib.image

    shot, stderr = _run_chromium(chromium, html_path, tmp_path, name)
    assert shot is not None, f"chromium rendered a plain page but not {html_path}: {stderr}"
    return matplotlib.image.imread(str(shot))[..., :3]   # floats in [0, 1]


def _usable_chromium(tmp_path):
    """The chromium binary, after it screenshots a plain page; skips the test when
    there is none or it cannot render here (a shim, no /dev/shm, no fonts)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium): "
                    "the report is not rendered")
    probe = tmp_path / "probe.html"
    probe.write_text("<html><body><p>probe</p></body></html>")
    shot, stderr = _run_chromium(chromium, probe, tmp_path, "probe")
    if shot is None:
        pytest.skip(f"chromium cannot render a plain page here: {stderr.strip()[-300:]}")
    return chromium


def _pixels_near(pixels, colour):
    # The token backgrounds are flat fills of exactly the scale's colour, so only
    # rounding (8-bit PNG, colour-space conversion: a few levels) and the anti-aliased
    # edges of the black glyphs and rounded corners move pixels away from it. 12/255
    # (~5%) takes in the rounding and leaves out blended edge pixels, which are far
    # from the extremes (glyph ink is black, the page white). Measured: the fills match
    # to within 1/255, and 12/255 adds only ~3% more pixels.
    tolerance = 12 / 255
    return int(np.all(np.abs(pixels - np.asarray(colour) / 255) <= tolerance, axis=-1).sum())


@pytest.mark.slow
def test_report_renders_coloured_tokens_in_chromium(tmp_path):
    chromium = _usable_chromium(tmp_path)
    # Large, strongly coloured tokens near the top of the page (no summary or figures).
    tokens = ["POSITIVE_TOKEN_" * 3, "NEGATIVE_TOKEN_" * 3, "neutral"] * 4
    delta = [3.0, -3.0, 0.0] * 4
    path = str(tmp_path / "report.html")
    report.write(path, title="render check", samples=[_sample(tokens, delta)], summary={},
                 figures={}, clips={"js": 0.1})
    pixels = _screenshot(chromium, path, tmp_path, "shot")
    red, blue = _pixels_near(pixels, report.RED), _pixels_near(pixels, report.BLUE)
    orange = _pixels_near(pixels, report.SEQUENTIAL["js"])
    assert red > 500 and blue > 500, f"Δlog p colours not rendered: {red} red, {blue} blue"
    assert orange == 0, orange

    # The toggle's script recolours the tokens: select "js" the way a click would.
    with open(path, encoding="utf-8") as f:
        text = f.read()
    click = ("<script>var r = document.querySelector('input[name=\"metric\"][value=\"1\"]');"
             "r.checked = true; r.dispatchEvent(new Event('change'));</script></body>")
    toggled = str(tmp_path / "toggled.html")
    with open(toggled, "w", encoding="utf-8") as f:
        f.write(text.replace("</body>", click))
    pixels = _screenshot(chromium, toggled, tmp_path, "toggled")
    red, blue = _pixels_near(pixels, report.RED), _pixels_near(pixels, report.BLUE)
    orange = _pixels_near(pixels, report.SEQUENTIAL["js"])
    assert orange > 500, f"js colours not rendered after the toggle ({orange} pixels)"
    assert red < 20 and blue < 20, f"Δlog p colours left after the toggle: {red}, {blue}"
