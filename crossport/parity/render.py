"""Renderers for the parity doctor's report: rich terminal table, JSON, self-contained HTML.

The HTML page embeds its CSS and an inline SVG plot of the error per layer (log scale), so
it opens offline; nothing is fetched from a network.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jinja2
from markupsafe import escape
from rich.console import Console
from rich.table import Table

from crossport.parity.doctor import DoctorReport


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if not math.isfinite(x) else f"{x:.2e}"


def rich_table(report: DoctorReport) -> Table:
    """The per-layer table for a terminal (the first divergent row in bold red)."""
    table = Table(title=f"crossport parity doctor (tolerance {report.atol:.0e})")
    for col in ("#", "torch module", "Keras layer", "shape", "max |Δ|", "error", "growth",
                "verdict", "pitfall"):
        table.add_column(col, overflow="fold")
    first = report.first_divergent
    for r in report.rows:
        style = "bold red" if r is first else ("yellow" if r.exceeds else None)
        verdict = r.verdict if r.exceeds else f"ok ({r.verdict})"
        table.add_row(str(r.index), f"{r.torch_name} ({r.torch_type})",
                      f"{r.keras_name} ({r.keras_type})", "x".join(map(str, r.keras_shape)),
                      _fmt(r.max_abs), _fmt(r.error),
                      "-" if r.growth is None else f"{r.growth:.1f}x", verdict,
                      ", ".join(p.name for p in r.pitfalls if p.affects_inference),
                      style=style)
    return table


def print_report(report: DoctorReport, console: Console | None = None) -> None:
    """Print the table, then the summary and diagnosis."""
    console = console or Console()
    console.print(rich_table(report))
    console.print(report.summary(), highlight=False, markup=False)
    for name, p in report.warnings:
        console.print(f"note [{p.name}] at {name}: {p.message} (fix: {p.fix})", highlight=False,
                      markup=False)


def to_json(report: DoctorReport, path: str | Path | None = None) -> str:
    """The report as strict JSON (written to ``path`` when given): a non-finite error (a
    mismatch) is written as ``null``, never as a ``NaN``/``Infinity`` token."""
    text = json.dumps(_finite(report.to_dict()), indent=2, default=str, allow_nan=False)
    if path is not None:
        Path(path).write_text(text)
    return text


def _finite(data):
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def svg_plot(report: DoctorReport, width: int = 960, height: int = 320) -> str:
    """An inline SVG: normalized error per layer on a log scale, tolerance line, verdicts."""
    rows = report.rows
    pad_l, pad_r, pad_t, pad_b = 70, 20, 20, 40
    positive = [r.error for r in rows if math.isfinite(r.error) and r.error > 0]
    lo = math.floor(math.log10(min(positive + [report.atol]))) - 1  # exact zeros sit here
    errs = [max(r.error, 10.0 ** lo) if math.isfinite(r.error) else None for r in rows]
    finite = [e for e in errs if e is not None] + [report.atol]
    hi = max(math.ceil(math.log10(max(finite))), lo + 1)
    n = max(len(rows) - 1, 1)

    def x(i: int) -> float:
        return pad_l + (width - pad_l - pad_r) * i / n

    def y(v: float) -> float:
        frac = (math.log10(v) - lo) / (hi - lo)
        return pad_t + (height - pad_t - pad_b) * (1 - frac)

    parts = [(f'<svg id="error-plot" xmlns="http://www.w3.org/2000/svg" width="{width}" '
              f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
              f'aria-label="normalized error per layer, log scale">'),
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    for d in range(lo, hi + 1):
        yy = y(10.0 ** d)
        parts.append(f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{yy:.1f}" y2="{yy:.1f}" '
                     f'stroke="#ddd"/><text x="{pad_l - 8}" y="{yy + 4:.1f}" font-size="11" '
                     f'text-anchor="end">1e{d}</text>')
    ty = y(report.atol)
    parts.append(f'<line class="tolerance" x1="{pad_l}" x2="{width - pad_r}" y1="{ty:.1f}" '
                 f'y2="{ty:.1f}" stroke="#c00" stroke-dasharray="6 4"/>'
                 f'<text x="{width - pad_r}" y="{ty - 4:.1f}" font-size="11" fill="#c00" '
                 f'text-anchor="end">tolerance {report.atol:.0e}</text>')
    points = [(x(i), y(e)) for i, e in enumerate(errs) if e is not None]
    if points:
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#36c" stroke-width="1.5"/>')
    first = report.first_divergent
    for i, (r, e) in enumerate(zip(rows, errs)):
        yy = y(e) if e is not None else pad_t
        color = "#c00" if r.exceeds and r.verdict == "semantic" else (
            "#e90" if r.exceeds else "#393")
        radius = 6 if r is first else 3.5
        parts.append(f'<circle class="point" cx="{x(i):.1f}" cy="{yy:.1f}" r="{radius}" '
                     f'fill="{color}"><title>{escape(r.keras_name)}: '
                     f'{_fmt(r.error)} ({r.verdict})</title></circle>')
    parts.append(f'<text x="{(pad_l + width) / 2:.0f}" y="{height - 8}" font-size="12" '
                 f'text-anchor="middle">layer (execution order)</text></svg>')
    return "".join(parts)


# the page style both reports share (the status colour and tables)
_BASE_STYLE = """body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 24px;
       color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
.status { font-weight: bold; color: {{ "#393" if passed else "#c00" }}; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; }
th { background: #f3f3f3; }
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>crossport parity doctor</title>
<style>{% set passed = report.passed %}
""" + _BASE_STYLE + """tr.exceeds td { background: #fff4e0; }
tr.first td { background: #ffd9d9; font-weight: bold; }
.pitfall { border-left: 4px solid #c00; padding: 6px 12px; margin: 8px 0; background: #fff6f6; }
code { background: #f3f3f3; padding: 1px 4px; }
</style></head>
<body>
<h1>crossport parity doctor</h1>
<p class="status">{{ "PASS" if report.passed else "FAIL" }}: output error
{{ fmt(report.output_error) }} (tolerance {{ "%.0e" % report.atol }}),
inputs: {{ report.distributions | join(", ") }}; {{ report.rows | length }} aligned layers.</p>
<h2>Diagnosis</h2>
{% if first %}
<p>First divergent layer: torch <code>{{ first.torch_name }}</code> ({{ first.torch_type }})
&harr; Keras <code>{{ first.keras_name }}</code> ({{ first.keras_type }}), error
{{ fmt(first.error) }} on {{ first.worst_input }} inputs, verdict <b>{{ first.verdict }}</b>.</p>
{% for p in report.diagnosis %}
<div class="pitfall"><b>{{ p.name }}</b>: {{ p.message }}<br>fix: <code>{{ p.fix }}</code></div>
{% else %}
<p>No known pitfall matched: compare this layer's configuration and weights by hand.</p>
{% endfor %}
{% else %}
<p>No semantic divergence: every layer is within tolerance or within float32 rounding.</p>
{% endif %}
<h2>Error per layer (normalized, log scale)</h2>
{{ svg | safe }}
<h2>Layers</h2>
<table id="layers">
<thead><tr><th>#</th><th>torch module</th><th>Keras layer</th><th>matched by</th>
<th>torch shape</th><th>Keras shape</th><th>max |&Delta;|</th><th>error</th>
<th>Keras vs fp64</th><th>torch vs fp64</th><th>growth</th><th>verdict</th>
<th>pitfalls</th></tr></thead>
<tbody>
{% for r in report.rows %}
<tr class="layer-row{{ ' exceeds' if r.exceeds }}{{ ' first' if r is sameas first }}">
<td>{{ r.index }}</td><td>{{ r.torch_name }} ({{ r.torch_type }})</td>
<td>{{ r.keras_name }} ({{ r.keras_type }})</td><td>{{ r.matched_by }}</td>
<td>{{ r.torch_shape | join("x") }}</td><td>{{ r.keras_shape | join("x") }}</td>
<td>{{ fmt(r.max_abs) }}</td><td>{{ fmt(r.error) }}</td><td>{{ fmt(r.keras_vs_fp64) }}</td>
<td>{{ fmt(r.torch_vs_fp64) }}</td>
<td>{{ "-" if r.growth is none else "%.1fx" % r.growth }}</td>
<td>{{ r.verdict if r.exceeds else "ok (" ~ r.verdict ~ ")" }}</td>
<td>{{ r.pitfalls | map(attribute="name") | join(", ") }}</td></tr>
{% endfor %}
</tbody></table>
{% if report.warnings %}
<h2>Other findings</h2><ul>
{% for name, p in report.warnings %}<li><code>{{ name }}</code> {{ p.name }}: {{ p.message }}
(fix: <code>{{ p.fix }}</code>)</li>{% endfor %}
</ul>{% endif %}
{% if report.unmatched_torch or report.unmatched_keras %}
<h2>Not aligned</h2>
<p>torch: {{ report.unmatched_torch | join(", ") or "-" }}<br>
Keras: {{ report.unmatched_keras | join(", ") or "-" }}</p>
{% endif %}
</body></html>
"""


def to_html(report: DoctorReport, path: str | Path | None = None) -> str:
    """A self-contained HTML page: diagnosis, SVG error plot, per-layer table."""
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    page = env.from_string(_TEMPLATE).render(report=report, first=report.first_divergent,
                                             svg=svg_plot(report), fmt=_fmt)
    if path is not None:
        Path(path).write_text(page, encoding="utf-8")
    return page


_QUANTIZATION_SECTION = """<section id="quantization">
<h2>Quantization: {{ q.format }}</h2>
<p class="qstatus">{% if q.sqnr_db is not none %}output SQNR <b>{{ "%.1f" % q.sqnr_db }} dB</b>
vs torch fp32 (at least {{ "%.0f" % q.min_sqnr_db }} dB for this format), normalized max error
<b>{{ fmt(q.max_error) }}</b>{% else %}not re-checked against torch{% endif %}.</p>
{% if q.float_layers %}<p>kept in float: {% for name in q.float_layers %}<code>{{ name }}</code>
{% endfor %}</p>{% endif %}
{% if q.per_layer_note %}<p>{{ q.per_layer_note }}</p>{% endif %}
{% if rows %}
<p>Per quantized op, worst first: the error it introduces by itself (RMS difference from the
float op on the same inputs, over the float output's range, per output channel, averaged).
Keep the worst in float with <code>float_layers=[...]</code>.</p>
<table id="quantized-layers">
<thead><tr><th>#</th><th>torch module</th><th>TFLite op</th><th>error</th><th>RMSE</th>
<th>max |&Delta;|</th><th>scale</th><th>zero point</th><th>fused</th></tr></thead>
<tbody>
{% for r in rows %}
<tr class="qlayer"><td>{{ loop.index }}</td><td><code>{{ r.name }}</code></td><td>{{ r.op }}</td>
<td>{{ fmt(r.error) }}</td><td>{{ fmt(r.rmse) }}</td><td>{{ fmt(r.max_abs_error) }}</td>
<td>{{ "%.3g" % r.scale }}</td><td>{{ r.zero_point }}</td><td>{{ r.fused | join(", ") }}</td></tr>
{% endfor %}
</tbody></table>
{% endif %}
</section>
"""

_EXPORT_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>crossport export report</title>
<style>
""" + _BASE_STYLE + """tr.qlayer:first-child td { background: #ffd9d9; font-weight: bold; }
code { background: #f3f3f3; padding: 1px 4px; }
</style></head>
<body>
<h1>crossport export report</h1>
<p class="status">{{ "PASS" if passed else "FAIL" }}{% if exported %}: {{ exported.format }}
written to <code>{{ exported.path }}</code>{% endif %}</p>
<table id="summary">
{% for key, value in summary %}<tr><th>{{ key }}</th><td>{{ value }}</td></tr>
{% endfor %}
</table>
{{ quantization | safe }}
</body></html>
"""


def _environment() -> jinja2.Environment:
    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)


def quantization_html(report) -> str:
    """An HTML section for a :class:`~crossport.export.QuantizationReport`: output SQNR and
    max error, then one row per quantized op, worst first, named by torch module path."""
    rows = sorted(report.layers, key=lambda r: -r.error)
    return _environment().from_string(_QUANTIZATION_SECTION).render(q=report, rows=rows,
                                                                     fmt=_fmt)


def export_html(conversion=None, exported=None, path: str | Path | None = None) -> str:
    """A self-contained HTML page for a conversion and its export (``crossport convert
    --html``): parity, the export's re-check and stage times, the quantization report.

    Example:
        >>> import torch, crossport
        >>> conv = crossport.convert_with_report(torch.nn.Linear(3, 2).eval(),
        ...                                      (torch.randn(1, 3),))
        >>> "PASS" in export_html(conv)
        True
    """
    summary = _export_summary(conversion, exported)
    quantization = (quantization_html(exported.quantization)
                    if exported is not None and exported.quantization is not None else "")
    passed = all(x.passed for x in (getattr(conversion, "report", None), exported)
                 if x is not None)
    page = _environment().from_string(_EXPORT_TEMPLATE).render(
        passed=passed, exported=exported, summary=summary, quantization=quantization)
    if path is not None:
        Path(path).write_text(page, encoding="utf-8")
    return page


def _export_summary(conversion, exported) -> list[tuple[str, str]]:
    rows = []
    report = getattr(conversion, "report", None)
    if report is not None:
        verdict = "PASS" if report.passed else "FAIL"
        rule = f"tolerance {report.atol:.0e}, rule {report.rule}"
        rows.append(("parity", f"{_fmt(report.max_error)} normalized max error ({verdict}, {rule})"))
    for stage, seconds in (getattr(conversion, "seconds", None) or {}).items():
        rows.append((f"time: {stage}", f"{seconds:.2f} s"))
    if exported is not None:
        if exported.quantization is None and exported.max_error is not None:
            bound = f"tolerance {exported.tolerance:.0e} for {exported.format}"
            rows.append(("re-loaded parity", f"{_fmt(exported.max_error)} ({bound})"))
        rows.append(("time: export + re-check", f"{exported.seconds:.2f} s"))
        for stage, seconds in exported.stages.items():
            rows.append((f"time: export {stage}", f"{seconds:.2f} s"))
    return rows
