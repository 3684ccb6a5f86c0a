"""The A/B section of the reports: terminal lines and markdown, from a CompareResult (pure).

Both list every metric with base, head, the ratio (or difference) with its corrected interval and
the verdict, regressed first, then undecided (inconclusive ones first, named so: their slowdown
may be past the threshold), improved and unchanged; unchanged metrics show their interval too, so
the reader sees how fine the check was (``+-1.2%``: half the interval's width), and each metric the
one-sided bound on the regression's side that "unchanged" is ruled on (``bound 1.011``). What the
tests cost (:mod:`.cost`): one line in the terminal (the costliest tests), a short table in the
markdown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..explain.diff import KEPT, Explanation
from ..reports.layout import clean, common_prefix, fit, md_code, md_text, middle, table
from .cost import Cost
from .paired import VERDICTS, CompareResult, Decision

__all__ = ["cost_line", "cost_table", "explain_lines", "markdown", "terminal_lines"]

COSTLIEST_SHOWN = 2  # tests the terminal's cost line names
COST_ROWS = 5  # tests the markdown's cost table lists; the rest are counted


_FORMATS = {"time": "{:.4g} ms", "rate": "{:.4g}/s", "share": "{:.2%}"}  # else a count


def _value(d: Decision, v: float) -> str:
    return _FORMATS.get(d.kind, "{:g}").format(v) if math.isfinite(v) else "-"


def _cells(d: Decision) -> list[str]:
    """base, head, head/base, interval and pairs: the values of a decision's row."""
    return [_value(d, d.base), _value(d, d.head), change(d), interval(d), f"{d.pairs}"]


def change(d: Decision) -> str:
    """The estimate: a ratio head/base, points of share, or a count difference."""
    if not math.isfinite(d.estimate):
        return "-"
    if d.ratio:
        return f"{d.estimate:.3f}"
    if d.kind == "share":
        return f"{d.estimate * 100:+.2f}pt"
    return f"{d.estimate:+g}"


def interval(d: Decision) -> str:
    """The corrected interval and its half-width, and the one-sided bound "unchanged" is ruled on
    when known: ``[0.992, 1.016] +-1.2%, bound 1.011``."""
    if d.kind == "count":
        return "exact"
    if not math.isfinite(d.estimate):
        return "none"
    hw = d.half_width
    bound = d.bound
    if d.ratio:
        shown = f", bound {bound:.3f}" if math.isfinite(bound) and bound > 0 else ""
    else:
        shown = f", bound {bound * 100:+.2f}pt" if math.isfinite(bound) else ""
    if not math.isfinite(hw):
        return "unbounded" + shown
    if d.ratio:
        return f"[{d.low:.3f}, {d.high:.3f}] +-{hw * 100:.1f}%{shown}"
    return f"[{d.low * 100:+.2f}, {d.high * 100:+.2f}]pt +-{hw * 100:.2f}pt{shown}"


def ordered(decisions: Sequence[Decision]) -> list[tuple[str, list[tuple[str, list[Decision]]]]]:
    """Decisions by verdict (regressed, undecided, improved, unchanged), then by run in
    order of appearance, inconclusive ones first among the undecided:
    ``[(verdict, [(run, [decision, ...]), ...]), ...]``."""
    out = []
    inconclusive_first = sorted(decisions, key=lambda d: not d.inconclusive)
    for verdict in VERDICTS:
        runs: dict[str, list[Decision]] = {}
        for d in inconclusive_first:
            if d.verdict == verdict:
                runs.setdefault(d.key.run, []).append(d)
        if runs:
            out.append((verdict, list(runs.items())))
    return out


def _group_title(verdict: str, groups: list[tuple[str, list[Decision]]]) -> str:
    """``undecided (12, 2 inconclusive)``: a verdict's heading."""
    ds = [d for _, members in groups for d in members]
    inconclusive = sum(1 for d in ds if d.inconclusive)
    return f"{verdict} ({len(ds)}{f', {inconclusive} inconclusive' if inconclusive else ''})"


def _header(result: CompareResult) -> str:
    spent = "; time budget spent" if result.budget_exhausted else ""
    return f"{result.pairs} pairs in {result.elapsed_s:.1f} s{spent}"


def _title(result: CompareResult, width: int) -> list[str]:
    base, head = clean(result.base), clean(result.head)
    one = f"A/B: base {base}; head {head}"
    return [one] if len(one) <= width else [middle(f"A/B base: {base}", width),
                                            middle(f"A/B head: {head}", width)]


def _seconds(rows: Sequence[Cost]) -> str:
    return f"{sum(c.seconds for c in rows):.1f} s"


def cost_line(result: CompareResult, width: int = 100, prefix: str = "") -> str | None:
    """``cost: 52 test(s), 212.4 s of visits; costliest test_e2e 96.1 s/27 pairs, ...``: the
    terminal's one line on what the tests cost (None: no cost known), within ``width``: the
    ``COSTLIEST_SHOWN`` costliest tests, fewer where their names do not fit (the names lose
    ``prefix``, then their middle)."""
    rows = result.cost
    if not rows:
        return None
    head = f"cost: {len(rows)} test(s), {_seconds(rows)} of visits; costliest "
    for k in range(min(COSTLIEST_SHOWN, len(rows)), 0, -1):
        shown = rows[:k]
        more = f", +{len(rows) - k} more" if len(rows) > k else ""
        values = [f" {c.seconds:.1f} s/{c.pairs} pairs" for c in shown]
        room = (width - len(head) - len(more) - sum(len(v) + 2 for v in values)) // k
        if room >= 12 or k == 1:
            names = [middle(clean(c.test).removeprefix(prefix) or clean(c.test), max(12, room))
                     for c in shown]
            break
    return fit(head + ", ".join(n + v for n, v in zip(names, values, strict=True)) + more, width)


def cost_table(result: CompareResult) -> list[str]:
    """The markdown's lines on what the tests cost: the ``COST_ROWS`` costliest tests with their
    metrics, pairs, visits and seconds, and the rest counted (none: no cost known)."""
    rows = result.cost
    if not rows:
        return []
    out = [f"Cost per test, the most expensive first ({_seconds(rows)} in the visits of "
           f"{len(rows)} test(s), both sides, of the session's {result.elapsed_s:.1f} s; a "
           "metric's seconds are its test's):", "",
           "| test | metrics | pairs | visits | seconds |", "|---|---:|---:|---:|---:|"]
    for c in rows[:COST_ROWS]:
        test = md_code(c.test).replace("|", "\\|")
        out.append(f"| {test} | {c.metrics} | {c.pairs} | {c.visits} | {c.seconds:.1f} |")
    rest = rows[COST_ROWS:]
    if rest:
        out.append(f"| +{len(rest)} more | {sum(c.metrics for c in rest)} | | "
                   f"{sum(c.visits for c in rest)} | {sum(c.seconds for c in rest):.1f} |")
    return out + [""]


def terminal_lines(result: CompareResult, width: int = 100) -> list[str]:
    """The A/B section for the terminal; no line is longer than ``width`` (at least 40).

    A metric whose name does not fit its column gets a line of its own, its values on the next; long
    run ids lose their common prefix (named once), then their middle."""
    width = max(width, 40)
    runs = [d.key.run for d in result.decisions] + list(result.added) + list(result.removed)
    prefix = common_prefix(map(clean, runs))  # text from the sides: control characters escaped
    summary = clean(result.summary())
    lines = _title(result, width)
    lines += [summary] if len(summary) <= width else [part.strip() for part in summary.split(";")]
    lines.append(_header(result))
    if prefix:
        lines.append(middle(f"runs below are under {prefix}", width))
    cost = cost_line(result, width, prefix)
    lines += [cost] if cost is not None else []
    rows, headings, above = [], [], []  # above: the verdict and run lines before a row
    for verdict, groups in ordered(result.decisions):
        above.append(_group_title(verdict, groups))
        for run, decisions in groups:
            above.append("  " + middle(clean(run)[len(prefix):], width - 2))
            for d in decisions:
                rows.append(["    " + clean(d.key.metric), *_cells(d)])
                headings.append("\n".join(above))
                above = []
    if rows:
        lines += table(rows, ["    metric", "base", "head", "head/base", "interval", "pairs"],
                       ("left", "right", "right", "right", "left", "right"), width, headings)
    lines += explain_lines(result, prefix, width)
    for title, ids in (("added on the head side (not compared)", result.added),
                       ("removed on the head side (not compared)", result.removed)):
        if ids:
            lines.append(f"{title}: {len(ids)}")
            lines.extend("  " + middle(clean(i)[len(prefix):], width - 2) for i in ids)
    lines.extend(f"note: {clean(n)}" for n in result.notes)
    return [fit(line, width) for line in lines]  # cells and text cleaned before fitting


def _explained(result: CompareResult) -> list[tuple[Decision, Explanation]]:
    """The decisions with an explanation, in the report's order."""
    return [(d, result.explain[d.key]) for _, groups in ordered(result.decisions)
            for _, members in groups for d in members if d.key in result.explain]


def explain_lines(result: CompareResult, prefix: str = "", width: int = 100) -> list[str]:
    """``why it got slower:`` and, per regressed or inconclusive metric, its run and metric, its
    class and sentence, its top functions, the changed lines and the command that reruns it
    (:meth:`pytest_opperf.explain.diff.Explanation.lines`); none without explanations."""
    found = _explained(result)
    if not found:
        return []
    out = ["why it got slower (work counts per step, head - base):"]
    for d, e in found:
        out.append("  " + middle(f"{clean(d.key.run)[len(prefix):]} {clean(d.key.metric)}",
                                 width - 2))
        out += ["    " + clean(line) for line in e.lines()]
    return out


def markdown(result: CompareResult) -> str:
    """The A/B section of the markdown summary (full run ids, one table)."""
    out = ["### A/B comparison", "", f"**{md_text(result.summary())}**", "",
           f"base: {md_text(result.base)}; head: {md_text(result.head)}; {_header(result)}", ""]
    if result.decisions:
        out += ["| verdict | run | metric | base | head | head/base | interval | pairs |",
                "|---|---|---|---|---|---:|---|---:|"]
        for verdict, groups in ordered(result.decisions):
            for run, decisions in groups:
                for d in decisions:
                    shown = "inconclusive" if d.inconclusive else verdict
                    cells = [shown, md_code(run).replace("|", "\\|"), md_text(d.key.metric),
                             *_cells(d)]
                    out.append(f"| {' | '.join(cells)} |")
        out.append("")
    found = _explained(result)
    if found:
        out += ["#### Why it got slower", ""]
        for d, e in found:
            lines = e.lines(KEPT)
            out.append(f"- {md_code(d.key.run)} {md_code(d.key.metric)}: **{md_text(e.cls)}**: "
                       f"{md_text(lines[0].partition(': ')[2])}")
            out += [f"  - {md_text(line.strip())}" for line in lines[1:]]
        out.append("")
    out += cost_table(result)
    for title, ids in (("Added on the head side (not compared)", result.added),
                       ("Removed on the head side (not compared)", result.removed)):
        if ids:
            out += [f"{title}:", ""] + [f"- {md_code(i)}" for i in ids] + [""]
    out += [f"- note: {md_text(n)}" for n in result.notes]
    return "\n".join(out).rstrip("\n") + "\n"
