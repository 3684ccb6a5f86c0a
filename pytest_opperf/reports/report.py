"""Renderers: the terminal report, the gate section, markdown and the Chrome trace.

Every function returns lines or a document; writing them is the caller's business (the plugin writes
under ``write_sep("=", "opperf")``, the CLI prints). The stat table is the reference report's:
total/avg/max/min/count in ms, nested kernel stats indented under their parent, and ``share`` = the
stat's total as a share of executor time (``ExecutorRunTimer``: conv2d_grad 18104.7 / 37099.9 =
48.8 %), shown for the stats the executor ran.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tabulate import tabulate

from ..comparison.metrics import steady, steady_python_shares, steady_steps
from ..comparison.verdict import Drift, DriftRow, Verdict, Violation
from ..core.stats import Samples
from ..explain.diff import Explanation
from ..results import SCHEMA, ResultSet, RunResult
from ..stattree import SORT_KEYS, Shares, short_name
from ..workcounts.workcount import COUNTERS, LABELS, OUTSIDE
from .gpu_report import device_host_lines, steady_lines
from .layout import clean, md_code, md_text, middle, run_group, table, wrap

__all__ = ["SORT_KEYS", "chrome_trace", "drift_lines", "drift_section", "explanation", "gate_lines",
           "gate_section", "markdown", "op_table_lines", "run_lines", "terminal_lines",
           "verdict_line", "verdict_lines", "why_texts", "work_lines"]

DRIFT_ROWS = 10  # the drift table's rows in the terminal (the markdown shows twice as many)

def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return str(v) if isinstance(v, float) and not math.isfinite(v) else f"{v:.6g}"


def _rate(amount: float | None, ms: float, unit: float) -> str:
    return f"{amount / (ms / 1e3) / unit:.4g}" if amount and ms > 0 else ""


def _stat_rows(run: RunResult, sort: str, indent: str) -> tuple[list[str], list[list[str]]]:
    tree = run.stats
    with_flops = any(s.flops for s in tree)
    with_bytes = any(s.bytes for s in tree)
    headers = ["name", "total", "avg", "max", "min", "count", "share"]
    work = run.work.stats if run.work is not None else None
    headers += ["bytecodes"] * (work is not None)
    headers += ["GFLOP/s"] * with_flops + ["GB/s"] * with_bytes
    rows = []
    for depth, s in tree.ordered(sort):
        share = ""
        if (depth == 0 and s.name != run.executor_stat and run.executor_ms > 0
                and tree.in_executor(s.name, run.executor_stat)):
            share = f"{s.total_ms / run.executor_ms * 100:.1f}%"
        row = [indent * depth + (short_name(s.name) if depth else s.name), f"{s.total_ms:.2f}",
               f"{s.avg_ms:.3f}", f"{s.max_ms:.3f}", f"{s.min_ms:.3f}", str(s.count), share]
        if work is not None:
            row.append(f"{work[s.name]['bytecodes']:,}" if work.get(s.name, {}).get("bytecodes")
                       else "")
        if with_flops:
            row.append(_rate(s.flops, s.total_ms, 1e9))
        if with_bytes:
            row.append(_rate(s.bytes, s.total_ms, 1e9))
        rows.append(row)
    return headers, rows


def _shares_line(run: RunResult) -> str:
    return Shares(run.python_share, run.framework_share, run.kernel_share).line(_outside(run))


def _outside(run: RunResult) -> str:
    """The name of the time outside the executor: ``untimed`` where no executor stat encloses
    the steps (it is then the time inside no top-level timer, startup included)."""
    return "Python" if run.executor_stat else "untimed"


def _steady_shares(run: RunResult) -> list[str]:
    """The shares of the steps after warm-up, each the median of its per-step values (the
    gate's Python share); empty for a run without a warm-up step."""
    python, steps = steady_python_shares(run), steady_steps(run)
    if not run.warmup_steps or not steps or len(python) != len(steps):
        return []
    roots = [t.samples_ms for t in run.stats.kernel_roots]
    kernels = [steady(run, x) for x in roots if x and len(x) == len(run.step_ms)]
    kernel = [sum(k) / w for w, *k in zip(steps, *kernels, strict=True)]
    framework = [max(0.0, 1 - p - k) for p, k in zip(python, kernel, strict=True)]
    p, f, k = (f"{Samples(x).median:.2%}" for x in (python, framework, kernel))
    return [f"steady state: {_outside(run)} {p} | framework overhead {f} | kernels {k} "
            "(medians per step)"]


def _run_header(run: RunResult) -> list[str]:
    return [f"{run.id}  device={run.device} timing={run.timing}",
            f"Total examples: {run.examples}, total time: {run.wall_s:.5f} sec",
            f"{run.examples_per_sec:.5f} examples/sec, {run.sec_per_batch:.5f} sec/batch"]


def work_lines(run: RunResult) -> list[str]:
    """The counting pass's work per step: the totals, the work outside every timed region and
    the stats that do most of it (by bytecodes, self counts); CPU instructions when counted."""
    work = run.work
    if work is None:
        return []
    totals = " | ".join(f"{work.total(c):,} {LABELS[c]}" for c in COUNTERS)
    bytecodes = work.total("bytecodes")
    outside = work.stats.get(OUTSIDE, {}).get("bytecodes", 0)
    where = "outside every timed region" if run.executor_stat else "untimed (outside every op)"
    lines = [f"work per step (counting pass: {work.steps} steps, {work.pass_s:.1f} s): {totals}; "
             f"{where}: {outside:,} bytecodes ({outside / bytecodes:.1%})" if bytecodes else
             f"work per step (counting pass: {work.steps} steps, {work.pass_s:.1f} s): {totals}"]
    top = sorted(((c.get("bytecodes", 0), name) for name, c in work.stats.items()
                  if name != OUTSIDE and c.get("bytecodes")), reverse=True)[:5]
    if top and bytecodes:
        lines.append("most bytecodes per step (self): " + " | ".join(
            f"{name} {n / bytecodes:.1%}" for n, name in top))
    if work.instructions is not None:
        lines.append(f"CPU instructions per step: {work.instructions:,} (valgrind, on "
                     f"{work.instructions_cpu or 'an unknown CPU'})")
    return lines


def _clock_note(run: RunResult) -> list[str]:
    return ["clock: kernel stats on the device clock (events), other timers on the host clock"
            ] if any(s.clock == "device" for s in run.stats) else []


def _prose(lines: Sequence[str], width: int) -> list[str]:
    """Text lines cleaned and wrapped to ``width`` (tables are fitted instead); a line that fits
    is kept as it is (its spacing, e.g. a table row of a suite's section)."""
    cleaned = (clean(line) for line in lines)
    return [part for line in cleaned for part in ([line] if len(line) <= width
                                                    else wrap(line, width))]


def _right(n: int, left: int = 1) -> tuple[str, ...]:
    return ("left",) * left + ("right",) * (n - left)


def run_lines(run: RunResult, sort: str = "total", width: int = 100) -> list[str]:
    """One e2e run in the reference report's shape, the steady state beside the whole
    window's figures; ``width``: see :func:`pytest_opperf.reports.layout.table`."""
    headers, rows = _stat_rows(run, sort, "  ")
    rows = [[clean(c) for c in row] for row in rows]  # before fitting: a name keeps to its row
    lines = _prose(_run_header(run) + steady_lines(run) + ["unit: ms"], width)
    lines += table(rows, headers, _right(len(headers)), width,
                   droppable=_WORK_COLUMNS) if rows else []
    device = device_host_lines(run)  # device span vs host enqueue: a heading and a table
    lines += _prose([_shares_line(run), *_steady_shares(run), *work_lines(run), *_clock_note(run),
                     *device[:1]], width)
    return lines + [*map(clean, device[1:]), *_prose([f"note: {n}" for n in run.notes], width)]


def _op_row(run: RunResult) -> list[str]:
    s = run.stats[0] if run.stats else None
    if s is None:
        return [run.id, run.kind, "", "", "", "", "", "", ""]
    samples = Samples(s.samples_ms) if s.samples_ms else None
    return [run.id, run.kind, str(run.batches), f"{samples.median:.4f}" if samples else "",
            f"{s.avg_ms:.4f}", f"{s.min_ms:.4f}", f"{s.max_ms:.4f}",
            _rate(s.flops, s.total_ms, 1e9), _rate(s.bytes, s.total_ms, 1e9)]


_OP_HEADERS = ["run", "kind", "rounds", "median", "mean", "min", "max", "GFLOP/s", "GB/s"]
# a table too wide for the terminal leaves these out before it breaks names onto lines of their own
_WORK_COLUMNS = ("bytecodes", "GFLOP/s", "GB/s")  # droppable, the last first


def op_table_lines(runs: Sequence[RunResult], tablefmt: str = "plain",
                   escape: Callable[[str], str] = str, width: int | None = None) -> list[str]:
    """The compact table of per-op benchmark runs (unit: ms per call). With a ``width`` (the
    terminal), runs are grouped under a glob of their test and their kind, each row named
    by the rest of its id, and the table fitted to ``width``."""
    if not runs:
        return []
    rows = [[escape(c) for c in _op_row(r)] for r in runs]
    keep = [i for i, h in enumerate(_OP_HEADERS)
            if h not in ("GFLOP/s", "GB/s") or any(r[i] for r in rows)]
    headers = [_OP_HEADERS[i] for i in keep]
    rows = [[r[i] for i in keep] for r in rows]
    devices = sorted({f"device={r.device} timing={r.timing}" for r in runs})
    head = [f"per-op benchmarks ({', '.join(devices)}), unit: ms per call"]
    if width is None:
        return head + tabulate(rows, headers, tablefmt=tablefmt, disable_numparse=True,
                               colalign=_right(len(headers), 2)).splitlines()
    groups: dict[tuple[str, str], list[int]] = {}  # in order of first appearance
    for i, r in enumerate(runs):
        groups.setdefault((run_group(r.id)[0], r.kind), []).append(i)
    headings = [middle(escape(f"{g} ({kind})"), width) if i == members[0] else ""
                for (g, kind), members in groups.items() for i in members]
    cells = [["  " + escape(run_group(runs[i].id)[1]), *rows[i][2:]]
             for ms in groups.values() for i in ms]
    return head + table(cells, headers[:1] + headers[2:], _right(len(headers) - 1), width, headings,
                        droppable=_WORK_COLUMNS)


def _verdict_detail(verdict: Verdict) -> str:
    where = [f"{what} {name}" for what, name in (("baseline", verdict.baseline),
                                                  ("thresholds", verdict.thresholds)) if name]
    checks = f"{verdict.checks} checks" if not verdict.violations else (
        f"{len(verdict.violations)} violation(s) in {verdict.checks} checks")
    undecided = f"; {undecided_detail(verdict)}" if verdict.undecided else ""
    detail = f"{checks}; {', '.join(where) if where else 'no baseline, no thresholds'}{undecided}"
    return f"{verdict.incomplete}; {detail}" if verdict.incomplete is not None else detail


def undecided_detail(verdict: Verdict, named: int = 3) -> str:
    """``A/B: 5 undecided (2 inconclusive): run::metric, run::metric, run::metric, +2 more``:
    how many A/B metrics were left undecided and which, inconclusive first."""
    names = verdict.undecided_metrics
    shown = ", ".join(names[:named]) + (f", +{len(names) - named} more" if len(names) > named
                                        else "")
    inconclusive = f" ({verdict.inconclusive} inconclusive)" if verdict.inconclusive else ""
    return f"A/B: {verdict.undecided} undecided{inconclusive}" + (f": {shown}" if shown else "")


def _verdict_word(verdict: Verdict) -> str:
    """PASSED, FAILED, or INCOMPLETE for a session that did not run to its end (never a pass)."""
    if verdict.violations:
        return "FAILED"
    return "INCOMPLETE" if verdict.incomplete is not None else "PASSED"


def verdict_line(verdict: Verdict | None) -> str:
    if verdict is None:
        return "gate: not run"
    return f"gate: {_verdict_word(verdict)} ({_verdict_detail(verdict)})"


def gate_lines(verdict: Verdict, width: int = 100) -> list[str]:
    """The ``opperf gate`` section: every violation on a short ``FAIL run metric`` line, then its
    message, value, limit, baseline and statistic, wrapped to ``width``."""
    values = "value {}, limit {}, baseline {}; {}"
    return [line for v in verdict.violations for text in (
        f"FAIL {v.run} {v.metric}", f"     {v.message}",
        "     " + values.format(_num(v.value), _num(v.limit), _num(v.baseline), v.statistic),
        *[f"     {why}" for why in why_texts(v)])
        for line in wrap(clean(text), width, " " * 5)]


def explanation(v: Violation) -> Explanation | None:
    """A violation's explanation (:mod:`pytest_opperf.explain`), read from its ``explain``
    object; None without one, or with one that does not read (a hand-edited gate file)."""
    if v.explain is None:
        return None
    try:
        return Explanation.from_dict(v.explain, f"{v.run} {v.metric}")
    except ValueError:
        return None


def why_texts(v: Violation, limit: int = 3) -> list[str]:
    """A violation's explanation in short: its class, then its first ``limit`` functions, each
    with its delta per step and ``path:line``, the first ``limit`` stats inside it that changed,
    then its changed lines; none when it has none."""
    e = explanation(v)
    if e is None:
        return []
    inside = e.inside[:limit]
    return [f"why it got slower: {e.cls}", *e.top(limit),
            *([f"inside: {'; '.join(inside)}"] if inside else []),
            *([f"changed lines: {', '.join(e.changed)}"] if e.changed else [])]


def _drift_title(drift: Drift) -> str:
    how = ("gated: time = \"gate\"" if drift.gating
           else "advisory: time is gated in A/B only, or with time = \"gate\"")
    return f"drift against the baseline ({how})"


def _drift_head(drift: Drift) -> str:
    beyond = len(drift.beyond)
    rule = (f"; {beyond} metric(s) beyond the regression rule" if beyond
            else "; none beyond the regression rule")
    return f"{drift.factor_text()}{rule}; furthest from that factor first:"


def _drift_cells(r: DriftRow) -> list[str]:
    if r.kind == "share":
        return [f"{r.value:.2%}", f"{r.baseline:.2%}", f"{(r.difference or 0) * 100:+.2f} pt", "",
                "yes" if r.beyond else ""]
    slow = f"{r.slowdown:.3f}x" if r.slowdown is not None else "-"
    rel = f"{r.relative:.3f}x" if r.relative is not None else "-"
    return [f"{r.value:.4g}", f"{r.baseline:.4g}", slow, rel, "yes" if r.beyond else ""]


_DRIFT_HEADERS = ["run / metric", "value", "baseline", "slowdown", "vs machine", "beyond"]


def drift_lines(drift: Drift, width: int = 100, rows: int = DRIFT_ROWS) -> list[str]:
    """The drift table for the terminal: the machine factor, then the ``rows`` metrics furthest
    from it (``slowdown``: how many times longer the work took; ``vs machine``: that over the
    factor), each under its run."""
    shown = drift.rows[:rows]
    lines = wrap(clean(_drift_head(drift)), width)
    if not shown:
        return lines
    headings, cells, last = [], [], None
    for r in shown:
        headings.append(middle(clean(r.run), width) if r.run != last else "")
        last = r.run
        cells.append(["  " + clean(r.metric), *_drift_cells(r)])
    lines += table(cells, _DRIFT_HEADERS, ["left"] + ["right"] * 5, width, headings)
    if len(drift.rows) > rows:
        lines += wrap(f"... and {len(drift.rows) - rows} more metric(s) in the results JSON "
                      "(gate.drift)", width)
    return lines


def gate_section(verdict: Verdict, width: int = 100) -> list[str]:
    """The ``opperf gate`` section of a failed verdict, as the commands print it."""
    return ["=" * 30 + " opperf gate " + "=" * 30, *gate_lines(verdict, width)]


def verdict_lines(verdict: Verdict, width: int = 100) -> list[str]:
    """A verdict as the commands (``compare``, ``gate``) print it: the drift table, the verdict
    line, its warnings and notes (escaped: run ids come from files) and, when it failed, the gate
    section."""
    lines = drift_section(verdict.drift, width) if verdict.drift is not None else []
    lines.append(clean(verdict_line(verdict)))
    lines += [clean(f"warning: {w}") for w in verdict.warnings]
    lines += [clean(f"note: {n}") for n in verdict.notes]
    return lines + ([] if verdict.passed else gate_section(verdict, width))


def drift_section(drift: Drift, width: int = 100) -> list[str]:
    """The drift table under its ``--- drift against the baseline (...) ---`` title."""
    return [*_prose([f"--- {_drift_title(drift)} ---"], width), *drift_lines(drift, width)]


def terminal_lines(results: ResultSet, verdict: Verdict | None, sort: str = "total",
                   notes: Sequence[str] = (), sections: Sequence[tuple[str, Sequence[str]]] = (),
                   width: int = 100) -> list[str]:
    """The whole ``opperf`` terminal section, text (but the verdict line) wrapped and tables
    fitted to ``width``; extra ``(title, lines)`` sections come after the runs, each under a
    ``--- title ---`` line (their lines as given, a line wider than ``width`` wrapped), and the
    verdict last."""
    session = results.session or {}
    head = " ".join(f"{k}={session[k]}" for k in ("device", "timing", "workload") if session.get(k))
    lines = _prose([f"session: {head}"] * bool(head) + [f"note: {n}" for n in notes]
                   + ["no measured runs"] * (not results.runs), width)
    for run in (r for r in results.runs if r.kind == "e2e"):
        lines += ["", *run_lines(run, sort, width)]
    ops = [r for r in results.runs if r.kind != "e2e"]
    if ops:
        table_lines = op_table_lines(ops, escape=clean, width=width)
        lines += ["", *_prose(table_lines[:1], width), *table_lines[1:]]
    for title, section in sections:  # a line wider than the terminal wraps; tables that fit stay
        lines += ["", *_prose([f"--- {title} ---"], width), *_prose(section, width)]
    if verdict is not None and verdict.drift is not None:
        lines += ["", *drift_section(verdict.drift, width)]
    ends = [f"warning: {w}" for w in verdict.warnings] if verdict else []
    ends += [f"note: {n}" for n in verdict.notes] if verdict else []
    return lines + ["", clean(verdict_line(verdict))] + _prose(ends, width)  # a line tools grep


# --- markdown -----------------------------------------------------------------------


def markdown(results: ResultSet, verdict: Verdict | None, sort: str = "total",
             sections: Sequence[tuple[str, Sequence[str]]] = ()) -> str:
    """The report as GitHub-flavoured markdown: the verdict first, then the
    tables, then extra ``(title, lines)`` sections as preformatted blocks."""
    out = ["## opperf", "", "**Gate: not run**" if verdict is None
           else f"**Gate: {_verdict_word(verdict)}** ({md_text(_verdict_detail(verdict))})"]
    if verdict is not None and verdict.violations:
        explained = any(why_texts(v) for v in verdict.violations)  # a column only then
        rows = [[md_text(v.run), md_text(v.metric), _num(v.value), _num(v.limit), _num(v.baseline),
                 md_text(v.message), md_text(v.statistic),
                 *["<br>".join(md_text(t) for t in why_texts(v))][:explained]]
                for v in verdict.violations]
        out.append("")
        names = ["run", "metric", "value", "limit", "baseline", "message", "statistic",
                 *["why it got slower"][:explained]]
        out += tabulate(rows, names, tablefmt="github", disable_numparse=True).splitlines()
    if verdict is not None and (verdict.warnings or verdict.notes):
        out.append("")
        out += [f"- warning: {md_text(w)}" for w in verdict.warnings]
        out += [f"- {md_text(n)}" for n in verdict.notes]
    for run in (r for r in results.runs if r.kind == "e2e"):
        out += ["", f"### {md_code(run.id)}", ""]
        header = _run_header(run)
        out += [md_text(header[0].replace(run.id, "").strip()) + "  ", header[1] + "  ",
                header[2], ""]
        headers, rows = _stat_rows(run, sort, "&nbsp;&nbsp;")
        rows = [[md_text(c) for c in row] for row in rows]
        if rows:
            out += tabulate(rows, headers, tablefmt="github", disable_numparse=True,
                            colalign=_right(len(headers))).splitlines()
        out += ["", _shares_line(run) + "  ", *_steady_shares(run)]  # "  ": a line break
        out += [f"- {md_text(n)}" for n in work_lines(run) + _clock_note(run) + steady_lines(run)
                + run.notes]
        device = device_host_lines(run)  # device span vs host enqueue, on a device clock
        if device:
            out += ["", "```", *device, "```"]
    ops = [r for r in results.runs if r.kind != "e2e"]
    if ops:
        lines = op_table_lines(ops, tablefmt="github", escape=md_text)
        out += ["", f"### {md_text(lines[0])}", ""] + lines[1:]
    for title, section in sections:
        out += ["", f"### {md_text(title)}", "", "```", *section, "```"]
    if verdict is not None and verdict.drift is not None:
        out += _drift_markdown(verdict.drift)
    return "\n".join(out) + "\n"


def _drift_markdown(drift: Drift, rows: int = 2 * DRIFT_ROWS) -> list[str]:
    drift_title = _drift_title(drift)
    heading = md_text(drift_title[0].upper() + drift_title[1:])
    out = ["", f"### {heading}", "", md_text(_drift_head(drift))]
    cells = [[md_text(r.run), md_text(r.metric), *_drift_cells(r)] for r in drift.rows[:rows]]
    if cells:
        out.append("")
        out += tabulate(cells, ["run", "metric", *_DRIFT_HEADERS[1:]], tablefmt="github",
                        disable_numparse=True, colalign=["left", "left"] + ["right"] * 5
                        ).splitlines()
    if len(drift.rows) > rows:
        out += ["", f"... and {len(drift.rows) - rows} more metric(s) in the results JSON "
                "(`gate.drift`)."]
    return out


# --- Chrome trace ---------------------------------------------------------------------


def chrome_trace(results: ResultSet) -> dict[str, Any]:
    """One measured step per run as Chrome trace complete events ("ph": "X").

    Each run is a process (named by its id) with one thread; the step is an enclosing event, and
    regions nest by time as they did in the step, which is what chrome://tracing and Perfetto use to
    draw the nesting. Times are host-clock microseconds from the start of the step.
    """
    events: list[dict[str, Any]] = []
    pid = 0
    for run in results.runs:
        trace = run.trace
        if not trace:
            continue
        pid += 1
        dur_ns = int(trace["dur_ns"])
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 1,
                       "args": {"name": run.id}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1,
                       "args": {"name": f"step {trace['step']}"}})
        events.append({"name": f"step {trace['step']}", "cat": "step", "ph": "X", "ts": 0.0,
                       "dur": dur_ns / 1e3, "pid": pid, "tid": 1})
        regions = [tuple(e) for e in trace["events"]]
        for name, start, dur, depth in sorted(regions, key=lambda e: (e[1], -e[2], e[3])):
            if start < 0 or start + dur > dur_ns:
                continue  # opened before the traced step began
            events.append({"name": name, "cat": run.stats.trace_category(name), "ph": "X",
                           "ts": start / 1e3, "dur": dur / 1e3, "pid": pid, "tid": 1,
                           "args": {"depth": depth + 1}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "pytest-opperf", "schema": SCHEMA, "clock": "host"}}
