"""The A/B section of the reports: terminal lines and markdown, from a CompareResult (pure).

Both list every metric with base, head, the ratio (or difference) with its corrected interval and
the verdict, regressed first, then undecided (inconclusive ones first, named so: their estimate is
past the threshold), improved and unchanged; unchanged metrics show their interval too, so the
reader sees how fine the check was (``+-1.2%``: half the interval's width).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..reports.layout import clean, common_prefix, fit, md_code, md_text, middle, table
from .paired import VERDICTS, CompareResult, Decision

__all__ = ["markdown", "terminal_lines"]


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
    """The corrected interval and its half-width: ``[0.992, 1.016] +-1.2%``."""
    if d.kind == "count":
        return "exact"
    if not math.isfinite(d.estimate):
        return "none"
    hw = d.half_width
    if not math.isfinite(hw):
        return "unbounded"
    if d.ratio:
        return f"[{d.low:.3f}, {d.high:.3f}] +-{hw * 100:.1f}%"
    return f"[{d.low * 100:+.2f}, {d.high * 100:+.2f}]pt +-{hw * 100:.2f}pt"


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
    for title, ids in (("added on the head side (not compared)", result.added),
                       ("removed on the head side (not compared)", result.removed)):
        if ids:
            lines.append(f"{title}: {len(ids)}")
            lines.extend("  " + middle(clean(i)[len(prefix):], width - 2) for i in ids)
    lines.extend(f"note: {clean(n)}" for n in result.notes)
    return [fit(line, width) for line in lines]  # cells and text cleaned before fitting


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
    for title, ids in (("Added on the head side (not compared)", result.added),
                       ("Removed on the head side (not compared)", result.removed)):
        if ids:
            out += [f"{title}:", ""] + [f"- {md_code(i)}" for i in ids] + [""]
    out += [f"- note: {md_text(n)}" for n in result.notes]
    return "\n".join(out).rstrip("\n") + "\n"
