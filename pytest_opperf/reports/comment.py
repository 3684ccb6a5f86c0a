"""The pull request comment: a results file's verdict as one short markdown page (pure).

:func:`render_comment` writes, after a hidden marker (:data:`MARKER`, by which the comment
workflow finds the comment it edits): the verdict; every failed check (for an A/B metric its
estimate head/base and interval); the A/B metrics left undecided, with theirs; the op table's
largest changes (the per-op A/B metrics furthest from 1, or without A/B the drift rows furthest
from the machine factor); links to the full report and the dashboard. GitHub refuses a comment
over 65,536 characters (:data:`LIMIT`): the longest cuttable table loses rows first, and a line
says how many and where they are; the failed checks are never cut: once the other tables are
empty they are shortened (the message, then the run ids' common prefix left out; one line each;
one line per metric), and only failed checks that do not fit even so go over the limit. Run ids
and metrics are code spans; every other text from ids and messages is made inert
(:func:`~pytest_opperf.reports.layout.md_inert`): a ``@name`` in a test id notifies no one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..ab.paired import CompareResult, Decision
from ..ab.render import change, interval
from ..comparison.verdict import DriftRow, Verdict, Violation
from ..results import ResultSet
from .layout import common_prefix, md_code, md_inert, md_text
from .report import explanation, verdict_line

__all__ = ["LIMIT", "MARKER", "render_comment"]

# the hidden first line by which .github/workflows/opperf-comment.yml finds the comment it edits
MARKER = "<!-- pytest-opperf gate comment -->"
LIMIT = 65536  # GitHub's limit on an issue or pull request comment, in characters
LARGEST = 15  # rows of the op table's largest changes
EXPLAINED = 3  # functions a failed check's explanation names


@dataclass
class _Table:
    """A markdown table that may lose rows (from the end) to fit the limit."""

    title: str
    headers: Sequence[str]
    rows: list[list[str]]
    total: int = 0  # rows before any cut
    cut: bool = False

    def lines(self) -> list[str]:
        if not self.rows and not self.total:
            return []
        out = ["", f"### {self.title}", ""]
        if self.rows and self.headers:
            out += ["| " + " | ".join(self.headers) + " |",
                    "|" + "|".join("---" for _ in self.headers) + "|"]
            out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in self.rows]
        else:  # a list
            out += ["- " + " ".join(row) for row in self.rows]
        if self.cut:
            left = self.total - len(self.rows)
            out += ["", f"*{left} more row(s) cut to stay under GitHub's {LIMIT:,}-character "
                        "limit: see the full report.*"]
        return out

    def size(self) -> int:
        return sum(len(line) + 1 for line in self.lines())


def _cell(text: str) -> str:
    """A table cell: a ``|``, also in a code span, escaped once (GitHub splits cells on it)."""
    return text.replace("\\|", "|").replace("|", "\\|")


def _decisions(compare: CompareResult | None) -> dict[tuple[str, str], Decision]:
    return {(d.key.run, d.key.metric): d for d in compare.decisions} if compare else {}


def _num(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4g}"


def _failed(violations: Sequence[Violation], decisions: dict[tuple[str, str], Decision],
            level: int) -> _Table:
    """The failed checks, shorter at each level: 0 every column; 1 no message; 2 the run ids
    without their common prefix; 3 one line each; 4 one line per metric."""
    prefix = common_prefix(v.run for v in violations) if level >= 2 else ""
    title = f"Failed checks ({len(violations)})"
    if prefix:
        title += f": runs {md_code(prefix)}..."
    rows = []
    for v in violations:
        d = decisions.get((v.run, v.metric))
        estimate = change(d) if d else _num(v.value)
        if level >= 3:
            bounds = (f"[{d.low:.3g}, {d.high:.3g}]" if d and d.ratio and math.isfinite(
                d.low + d.high) else interval(d) if d else f"limit {_num(v.limit)}")
        else:
            bounds = interval(d) if d else f"limit {_num(v.limit)}, baseline {_num(v.baseline)}"
        rows.append([md_code(v.run[len(prefix):]), md_code(v.metric), md_text(estimate),
                     md_text(bounds), md_inert(v.message), _why(v)])
    if level == 4:
        by_metric: dict[str, list[str]] = {}
        for run, metric, estimate, *_ in rows:
            by_metric.setdefault(metric, []).append(f"{run} {estimate}")
        return _Table(title, (), [[f"{metric} ({len(runs)}): {', '.join(runs)}"]
                                  for metric, runs in by_metric.items()], len(rows))
    if level == 3:
        return _Table(title, (), [row[:4] for row in rows], len(rows))
    headers = ["run", "metric", "value or head/base", "interval or limit"]
    explained = any(v.explain for v in violations)  # a column only where there is one
    if level == 0:
        return _Table(title, [*headers, "why", *["why it got slower"][:explained]],
                      [row[:5 + explained] for row in rows], len(rows))
    if level == 1 and explained:  # the explanation is kept longer than the message
        return _Table(title, [*headers, "why it got slower"], [row[:4] + row[5:] for row in rows],
                      len(rows))
    return _Table(title, headers, [row[:4] for row in rows], len(rows))


def _why(v: Violation) -> str:
    """A failed check's explanation (:mod:`pytest_opperf.explain`): its class and at most
    ``EXPLAINED`` functions, each with its delta and ``path:line`` (with none, as many stats
    inside it that changed); empty when none."""
    e = explanation(v)
    if e is None:
        return ""
    texts = e.top(EXPLAINED) or [f"inside: {t}" for t in e.inside[:EXPLAINED]]
    return md_inert("; ".join([e.cls, *texts])).replace(";", ";<br>")


def _decision_rows(decisions: Sequence[Decision]) -> list[list[str]]:
    return [[md_code(d.key.run), md_code(d.key.metric), md_text(_num(d.base)),
             md_text(_num(d.head)), md_text(change(d)), md_text(interval(d)), str(d.pairs)]
            for d in decisions]


_DECISION_HEADERS = ("run", "metric", "base", "head", "head/base", "interval", "pairs")


def _largest(compare: CompareResult | None, verdict: Verdict) -> _Table:
    """The per-op A/B metrics furthest from 1; without A/B, the drift rows furthest from the
    machine factor (advisory)."""
    if compare is not None:
        ops = [d for d in compare.decisions if d.kind == "time" and d.key.metric.startswith(
            "call_ms") and math.isfinite(d.estimate) and d.estimate > 0]
        ops.sort(key=lambda d: (-abs(math.log(d.estimate)), d.key.run, d.key.metric))
        rows = _decision_rows(ops[:LARGEST])
        return _Table("Largest changes in the op table (A/B, head/base)", _DECISION_HEADERS, rows,
                      len(rows))
    drift = verdict.drift
    found: list[DriftRow] = [r for r in (drift.rows if drift else [])
                             if r.relative is not None and r.relative > 0]
    found.sort(key=lambda r: (-abs(math.log(r.relative or 1.0)), r.run, r.metric))
    rows = [[md_code(r.run), md_code(r.metric), md_text(_num(r.baseline)),
             md_text(_num(r.value)), md_text(f"{r.slowdown:.3f}" if r.slowdown else "-"),
             md_text(f"{r.relative:.3f}" if r.relative else "-"), "yes" if r.beyond else "no"]
            for r in found[:LARGEST]]
    return _Table("Largest drift against the baseline (advisory)",
                  ("run", "metric", "baseline", "value", "slowdown", "over the machine factor",
                   "beyond the rule"), rows, len(rows))


def _head(results: ResultSet, verdict: Verdict, compare: CompareResult | None,
          report_url: str | None, dashboard_url: str | None) -> list[str]:
    word = "PASSED" if verdict.passed else "INCOMPLETE" if verdict.incomplete else "FAILED"
    commit = (results.commit or {}).get("sha")
    out = [MARKER, f"## opperf gate: {word}", "", md_inert(verdict_line(verdict))]
    if commit:
        out += ["", f"Commit {md_code(str(commit)[:12])}, {len(results.runs)} run(s)."]
    if compare is not None:
        out += ["", f"A/B against {md_inert(compare.base)}: {md_inert(compare.summary())}."]
    links = [f"[{name}]({url})" for name, url in (("full report", report_url),
                                                  ("dashboard", dashboard_url)) if url]
    if links:
        out += ["", " · ".join(links)]
    return out


def render_comment(results: ResultSet, verdict: Verdict, compare: CompareResult | None = None,
                   report_url: str | None = None, dashboard_url: str | None = None,
                   limit: int = LIMIT) -> str:
    """The comment's markdown, at most ``limit`` characters while the failed checks fit."""
    head = _head(results, verdict, compare, report_url, dashboard_url)
    decisions = _decisions(compare)
    undecided = [d for d in (compare.decisions if compare else []) if d.verdict == "undecided"]
    undecided.sort(key=lambda d: (not d.inconclusive,
                                  -(d.half_width if math.isfinite(d.half_width) else 1e9),
                                  d.key.run, d.key.metric))
    cuttable = [_Table("Undecided A/B metrics (not a pass: see docs/ab.md)", _DECISION_HEADERS,
                       _decision_rows(undecided), len(undecided)),
                _largest(compare, verdict)]
    cuttable.append(_Table("Warnings", (), [[md_inert(w)] for w in verdict.warnings],
                           len(verdict.warnings)))
    level = 0

    def text() -> str:
        lines = list(head) + _failed(verdict.violations, decisions, level).lines()
        for table in cuttable:
            lines += table.lines()
        return "\n".join(lines) + "\n"

    body = text()
    while len(body) > limit:
        longest = max(cuttable, key=lambda t: (bool(t.rows), t.size()))
        if longest.rows:  # the longest table first, as many rows as the excess needs
            per_row = max(1, longest.size() // len(longest.rows))
            drop = min(len(longest.rows), math.ceil((len(body) - limit) / per_row))
            longest.rows = longest.rows[: len(longest.rows) - max(1, drop)]
            longest.cut = True
        elif level < 4:  # then the failed checks, shorter: never fewer
            level += 1
        else:
            break  # the failed checks alone, as short as they get, are over the limit
        body = text()
    return body
