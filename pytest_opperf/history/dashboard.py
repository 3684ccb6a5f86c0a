"""The dashboard: one self-contained static page (plotly charts, plotly.js inline) of a history.

What it shows is listed in docs/history.md. Nothing is fetched at view time:
plotly.js and the data are in the page. The charts are plotly figures built here and drawn by
plotly.js; the page's own script only swaps the searched metric's data into its chart.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from typing import Any

from ..comparison.metrics import (
    EXAMPLES_PER_SEC,
    PYTHON_SHARE,
    WINDOW_EXAMPLES_PER_SEC,
    WINDOW_PYTHON_SHARE,
)
from ..records.atomic import write_text_atomic
from ..workcounts.workcount import LABELS
from .errors import EXTRA_HINT, MissingExtra
from .trends import (
    RUN_METRICS,
    SESSION_HEADERS,
    WORK_TOTALS,
    Group,
    Series,
    change_line,
    is_work,
    session_rows,
)

__all__ = ["TOP_OPERATORS", "page", "work_traces", "write"]

TOP_OPERATORS = 8
TOP_SHARES = 15
SESSIONS_SHOWN = 20


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
        import plotly.offline
    except ImportError:
        raise MissingExtra(f"the dashboard needs plotly ({EXTRA_HINT})") from None
    return go, pio, plotly.offline


# Inside a <script> element "</script" ends it and "<!--" (with "<script") puts the parser in a
# state where the rest of the page is script: no "<", ">" or "&" may appear in it. JSON text holds
# these only inside strings, where \u escapes mean the same; U+2028/U+2029 end lines in old JS.
_SCRIPT_SAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                0x2028: "\\u2028", 0x2029: "\\u2029"}


def _json(obj: Any) -> str:
    """JSON safe inside a <script> element (any text read from the store is data)."""
    return json.dumps(obj, allow_nan=False).translate(_SCRIPT_SAFE)


def _round(values: Sequence[float]) -> list[float]:
    return [float(f"{v:.5g}") for v in values]  # the timers' resolution; a third of the bytes


def _trace_data(group: Group, s: Series) -> dict[str, Any]:
    """A series as the charts take it: x = commit labels."""
    cs = [group.commits[p] for p in s.points]
    x = [c.label for c in cs]
    return {
        "x": x, "y": _round(s.values), "text": [f"{c.when} {c.branch or ''}".strip() for c in cs],
        "cp_x": [x[c.index] for c in s.changes],
        "cp_y": _round([s.values[c.index] for c in s.changes]),
        "cp_text": [change_line(group, s, c) for c in s.changes],
    }


def _add_series(go: Any, fig: Any, data: dict[str, Any], name: str, fmt: str = ".4g") -> None:
    hover = "%{x} %{text}<br>%{y:" + fmt + "}<extra>" + html.escape(name) + "</extra>"
    fig.add_trace(go.Scatter(x=data["x"], y=data["y"], text=data["text"], name=name,
                             mode="lines+markers", hovertemplate=hover))
    if data["cp_x"]:
        fig.add_trace(go.Scatter(x=data["cp_x"], y=data["cp_y"], text=data["cp_text"],
                                 mode="markers", name=f"{name}: change points",
                                 marker={"symbol": "x", "size": 13, "color": "red"},
                                 hovertemplate="%{text}<extra></extra>", showlegend=False))


def _figure(go: Any, title: str, ytitle: str, tickformat: str | None = None) -> Any:
    fig = go.Figure()
    fig.update_layout(title=title, height=380, margin={"l": 60, "r": 20, "t": 50, "b": 60},
                      xaxis={"type": "category", "title": "commit"}, yaxis={"title": ytitle},
                      legend={"orientation": "h", "y": -0.25}, template="plotly_white")
    if tickformat:
        fig.update_yaxes(tickformat=tickformat)
    return fig


def _div(pio: Any, fig: Any, div_id: str) -> str:
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def _e2e_runs(group: Group) -> list[str]:
    return sorted({s.run for s in group.series if s.kind == "e2e"})


def work_traces(group: Group, run: str) -> list[tuple[str, dict[str, Any]]]:
    """The work chart of one run: its work counts per step over the commits (bytecodes, Python
    calls, C calls; CPU instructions where counted), each as (label, trace data); none for a
    run without work counts."""
    by_metric = {s.metric: s for s in group.series if s.run == run}
    return [(LABELS[m], _trace_data(group, by_metric[m])) for m in WORK_TOTALS if m in by_metric]


# run -> (wall ms, Python share, framework share, [(kernel stat, ms)]) of the latest session
_Shares = dict[str, tuple[float, float, float, list[tuple[str, float]]]]


def _shares(go: Any, group: Group, latest_runs: _Shares) -> Any:
    fig = go.Figure()
    for run, (wall_ms, python, framework, ops) in sorted(latest_runs.items()):
        top = sorted(ops, key=lambda kv: -kv[1])[:TOP_SHARES]
        rest = sum(v for _, v in ops) - sum(v for _, v in top)
        if rest > 0:
            top.append(("other kernels", rest))
        names = [n for n, _ in top] + ["framework overhead", "Python"]
        values = [v / wall_ms for _, v in top] + [framework, python]
        fig.add_trace(go.Bar(y=names, x=values, name=run, orientation="h",
                             hovertemplate="%{y}: %{x:.2%}<extra>" + html.escape(run) + "</extra>"))
    fig.update_layout(title="latest session: shares of wall time", barmode="group",
                      template="plotly_white",
                      height=max(380, 26 * (TOP_SHARES + 3) * max(1, len(latest_runs))),
                      margin={"l": 200, "r": 20, "t": 50, "b": 40}, xaxis={"tickformat": ".0%"},
                      yaxis={"autorange": "reversed"}, legend={"orientation": "h", "y": -0.08})
    return fig


def _group_html(gi: int, group: Group, latest: dict[str, Any], go: Any, pio: Any) -> str:
    parts = [f'<section id="group-{gi}"><h2>{html.escape(group.title)}</h2>',
             f"<p>{len(group.sessions)} session(s), {len(group.commits)} commit(s); red crosses "
             "mark change points (hover for the step).</p>"]
    runs = _e2e_runs(group)
    by_key = {(s.run, s.metric): s for s in group.series}
    if runs:
        for metric, window, title, ytitle, fmt in (
                (EXAMPLES_PER_SEC, WINDOW_EXAMPLES_PER_SEC, "examples/sec", "examples/sec", None),
                (PYTHON_SHARE, WINDOW_PYTHON_SHARE, "Python share of wall time", "share", ".1%")):
            fig = _figure(go, title, ytitle, fmt)
            for run in runs:  # the steady state, and the whole window (warm-up included) apart
                for key, name in ((metric, run), (window, f"{run} (whole window)")):
                    if (run, key) in by_key:
                        _add_series(go, fig, _trace_data(group, by_key[(run, key)]), name)
            parts.append(_div(pio, fig, f"{metric}-{gi}"))
        for ri, run in enumerate(runs):
            tops = [s for s in group.series if s.run == run and s.kind == "e2e"
                    and s.metric not in RUN_METRICS and not is_work(s.metric)
                    and latest["kernels"].get((run, s.stat), False) and "/" not in s.stat]
            tops = sorted(tops, key=lambda s: -(s.latest or 0.0))[:TOP_OPERATORS]
            fig = _figure(go, f"top operators, ms per step: {run}", "ms per step")
            for s in tops:
                _add_series(go, fig, _trace_data(group, s), s.stat)
            parts.append(_div(pio, fig, f"top-{gi}-{ri}"))
            work = work_traces(group, run)
            if work:  # counts of different sizes on one log axis
                fig = _figure(go, f"work per step: {run}", "count per step")
                fig.update_yaxes(type="log")
                for name, data in work:
                    _add_series(go, fig, data, name, ",.0f")  # every digit: exact counts
                parts.append(_div(pio, fig, f"work-{gi}-{ri}"))
    if latest["shares"]:
        parts.append(_div(pio, _shares(go, group, latest["shares"]), f"shares-{gi}"))
    metrics = [s for s in group.series if s.metric not in RUN_METRICS]
    if metrics:
        # compact for the page's script: points index one shared list of commits
        data = {"labels": [c.label for c in group.commits],
                "text": [f"{c.when} {c.branch or ''}".strip() for c in group.commits],
                "series": {f"{s.run} {s.metric}": {"p": s.points, "y": _round(s.values),
                                                   "cp": [c.index for c in s.changes],
                                                   "cpt": [change_line(group, s, c)
                                                           for c in s.changes]} for s in metrics}}
        first = next(iter(data["series"]))
        fig = _figure(go, first, "ms, or count for work counts")
        _add_series(go, fig, _trace_data(group, metrics[0]), first)
        options = "".join(f'<option value="{html.escape(k)}"></option>' for k in data["series"])
        parts += [f"<h3>per-op trends</h3><p><label>metric ({len(metrics)}): <input "
                  f'id="search-{gi}" list="metrics-{gi}" size="90" placeholder="type to search, '
                  'e.g. conv2d"></label></p>'
                  f'<datalist id="metrics-{gi}">{options}</datalist>',
                  _div(pio, fig, f"trend-{gi}"),
                  f'<script type="application/json" id="data-{gi}">{_json(data)}</script>']
    if latest["compare"] is not None:
        sid, compare = latest["compare"]
        shown = html.escape(json.dumps(compare, indent=1, sort_keys=True, default=str))
        parts.append(f'<h3>latest A/B result (session {sid})</h3>'
                     f'<pre class="compare">{shown}</pre>')
    rows = session_rows(group.sessions[-SESSIONS_SHOWN:][::-1])
    head = "".join(f"<th>{html.escape(h)}</th>" for h in SESSION_HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    parts.append(f"<h3>sessions (latest first)</h3><table><tr>{head}</tr>{body}</table></section>")
    return "\n".join(parts)


_SCRIPT = """
document.querySelectorAll('input[id^="search-"]').forEach(function (input) {
  var gi = input.id.slice(7);
  var data = JSON.parse(document.getElementById('data-' + gi).textContent);
  input.addEventListener('change', function () {
    var d = data.series[input.value];
    if (!d) { return; }
    var x = d.p.map(function (i) { return data.labels[i]; });
    var text = d.p.map(function (i) { return data.text[i]; });
    var traces = [{x: x, y: d.y, text: text, name: input.value, mode: 'lines+markers',
                   type: 'scatter', hovertemplate: '%{x} %{text}<br>%{y:.4g}<extra></extra>'}];
    if (d.cp.length) {
      traces.push({x: d.cp.map(function (j) { return x[j]; }),
                   y: d.cp.map(function (j) { return d.y[j]; }),
                   text: d.cpt, mode: 'markers', type: 'scatter', showlegend: false,
                   name: input.value + ': change points', hovertemplate: '%{text}<extra></extra>',
                   marker: {symbol: 'x', size: 13, color: 'red'}});
    }
    var div = document.getElementById('trend-' + gi);
    var layout = Object.assign({}, div.layout, {title: {text: input.value}});
    Plotly.react(div, traces, layout);
  });
});
"""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
pre.compare { max-height: 30em; overflow: auto; background: #f6f6f6; padding: 0.5em; }
section { margin-bottom: 3em; }
"""


def _latest(group: Group, history_runs: Any, history_stats: Any) -> dict[str, Any]:
    """The latest session's shares, which stats are top-level kernels, the latest A/B result."""
    ids = {s.id for s in group.sessions}
    latest_id = group.sessions[-1].id if group.sessions else None
    kernels = {(st.run, st.name): True for st in history_stats
               if st.session_id in ids and st.kernel}
    shares: _Shares = {r.run: (r.wall_s * 1e3, r.window_python_share, r.framework_share, [])
                       for r in history_runs
                       if r.session_id == latest_id and r.kind == "e2e" and r.wall_s > 0}
    for st in history_stats:
        if st.session_id == latest_id and st.run in shares and st.kernel and "/" not in st.name:
            shares[st.run][3].append((st.name, st.total_ms))
    compare = next(((s.id, s.compare) for s in reversed(group.sessions) if s.compare is not None),
                   None)
    return {"kernels": kernels, "shares": shares, "compare": compare}


def page(label: str, groups: Sequence[Group], history: Any) -> str:
    """The whole page; ``history`` is the :class:`~.records.History` the groups were built from."""
    go, pio, offline = _plotly()
    body = [_group_html(gi, g, _latest(g, history.runs, history.stats), go, pio)
            for gi, g in enumerate(groups)]
    toc = "".join(f'<li><a href="#group-{gi}">{html.escape(g.title)}</a></li>'
                  for gi, g in enumerate(groups))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>opperf history: {html.escape(label)}</title><style>{_STYLE}</style>"
        f"<script>{offline.get_plotlyjs()}</script></head><body>"
        f"<h1>opperf history</h1><p>{html.escape(label)}: "
        f"{sum(len(g.sessions) for g in groups)} session(s)</p><ul>{toc}</ul>\n"
        + ("\n".join(body) if body else "<p>the history holds no sessions</p>")
        + f"<script>{_SCRIPT}</script></body></html>\n"
    )


def write(path: str | os.PathLike[str], label: str, groups: Sequence[Group], history: Any) -> int:
    """Write the page atomically; its size in bytes."""
    text = page(label, groups, history)
    write_text_atomic(path, text)
    return len(text.encode())
