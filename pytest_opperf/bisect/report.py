"""What a bisection shows: its progress lines, the terminal report, the markdown and the JSON.

Pure: text from a :class:`~pytest_opperf.bisect.core.Outcome`, the commits and the figures of the
run. Every name read from git or a test id goes through :func:`pytest_opperf.reports.layout.clean`
(or :func:`~pytest_opperf.reports.layout.md_text`): a subject cannot forge a line. The JSON's schema
is ``pytest_opperf/schema/opperf-bisect-1.schema.json``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..explain.diff import Explanation
from ..reports.layout import clean, md_code, md_text, table
from .core import Estimate, Outcome, Step, StepComparison
from .repo import BisectCommit

__all__ = ["FORMAT", "BisectRun", "as_json", "markdown", "progress", "shown", "terminal",
           "tests_lines"]

FORMAT = "opperf-bisect/1"
BAR = 40  # the plot's widest bar, in characters


@dataclass(frozen=True)
class BisectRun:
    """What the report says besides the outcome."""

    commits: Sequence[BisectCommit]
    selection: Sequence[str]
    budget_s: float
    elapsed_s: float
    exit_status: int
    notes: Sequence[str] = ()
    # why each culprit's metric got slower, by (culprit position, metric): bisect.runner
    explain: dict[tuple[int, str], Explanation] = field(default_factory=dict)
    # where the tests came from (--tests-from): source, label, files, imports, import_lines
    tests_from: Mapping[str, Any] | None = None


def tests_lines(run: BisectRun) -> list[str]:
    """Where the tests came from, and where each side imported the code under test from."""
    tf = run.tests_from or {}
    if tf.get("source", "commit") == "commit":
        return ["tests: each commit's own"]
    return [str(tf.get("summary") or f"tests from {tf.get('label')}"),
            *(f"imports: {line}" for line in tf.get("import_lines", []))]


def shown(kind: str, x: float) -> float:
    """A change in ``x`` units as the A/B report shows it: a ratio for times (head/base) and rates
    (head/base, below 1 worse), a difference otherwise."""
    if not math.isfinite(x):
        return x
    return math.exp(x) if kind == "time" else math.exp(-x) if kind == "rate" else x


def _num(kind: str, value: float) -> str:
    if not math.isfinite(value):
        return "?"
    return f"{value:.3f}" if kind in ("time", "rate") else f"{value:+.4g}"


def _estimate(e: Estimate) -> str:
    return f"{_num(e.kind, e.ratio)} [{_num(e.kind, e.low)}, {_num(e.kind, e.high)}]"


def _pos(run: BisectRun, i: int) -> str:
    return f"[{i}/{len(run.commits) - 1}]"


def _kinds(outcome: Outcome) -> dict[str, str]:
    kinds: dict[str, str] = {}
    for step in outcome.steps:
        kinds.update({m: e.kind for m, e in step.comparison.metrics.items()})
    return kinds


def progress(run: BisectRun, outcome: Outcome, event: str, kind: str, a: int, b: int,
             result: StepComparison | None, left_s: float) -> str:
    """One line as a step starts or ends: the commits, their positions, the estimate so far,
    the time left of the budget."""
    ca, cb = run.commits[a], run.commits[b]
    word = {"start": "starts", "more": "more pairs", "end": "ends"}.get(event, event)
    head = (f"bisect: step {len(outcome.steps) + (event != 'end')} ({kind}) {word}: "
            f"{ca.short} {_pos(run, a)} -> {cb.short} {_pos(run, b)}")
    left = f"{max(0.0, left_s):.0f} s of {run.budget_s:.0f} s left"
    if result is None:
        return clean(f"{head}; {left}")
    focus = outcome.metrics or list(result.metrics)
    changes = sorted(((m, result.metrics[m]) for m in focus if m in result.metrics),
                     key=lambda item: -abs(item[1].x) if math.isfinite(item[1].x) else 0)
    if event != "end":  # asked again: the estimate of the pairs so far
        m, e = changes[0] if changes else ("", None)
        so_far = f"; so far {m} {_estimate(e)} ({result.pairs} pairs)" if e else ""
        return clean(f"{head}{so_far}; {left}")
    if result.broken:
        what = "; ".join(f"{run.commits[c].short} skipped: {why}"
                         for c, why in result.broken.items())
    elif changes:
        m, e = changes[0]
        more = f" (+{len(changes) - 1} metric(s))" if len(changes) > 1 else ""
        what = f"{e.verdict}: {m} {_estimate(e)}{more}"
    else:
        what = "no metric measured"
    return clean(f"{head}: {what}; {result.pairs} pairs in {result.sessions} session(s); {left}")


def _culprit_line(run: BisectRun, outcome: Outcome) -> list[str]:
    lines = []
    for c in outcome.culprits:
        commit = run.commits[c.commit]
        word = "culprit" if c.verified else "culprit? (not verified)"
        lines.append(f"{word}: {commit.sha} {_pos(run, c.commit)} {commit.subject!r} "
                     f"({commit.author}, {commit.date})")
        for m, e in sorted(c.metrics.items()):
            share = c.share.get(m)
            part = f", {share:.0%} of the step" if share is not None and len(
                outcome.culprits) > 1 else ""
            lines.append(f"  {m}: {_estimate(e)} against {run.commits[c.parent].short}, "
                         f"{e.pairs} pairs{part}")
            found = run.explain.get((c.commit, m))
            lines += [f"    {line}" for line in found.lines()] if found is not None else []
    for r in outcome.ranges:
        if r.lo >= 0:
            lines.append(f"range: {run.commits[r.lo].short}..{run.commits[r.hi].short} "
                         f"{_pos(run, r.lo)}..{_pos(run, r.hi)}: {r.why}")
    for i, why in sorted(outcome.skipped.items()):
        lines.append(f"skipped: {run.commits[i].short} {_pos(run, i)}: {why}")
    return lines


def _tested(run: BisectRun, outcome: Outcome) -> list[tuple[int, dict[str, float]]]:
    """Each measured commit with each metric's change against GOOD (x units)."""
    positions = sorted({i for levels in outcome.levels.values() for i in levels})
    focus = outcome.metrics or sorted(outcome.levels)
    return [(i, {m: outcome.levels[m][i] for m in focus
                 if m in outcome.levels and i in outcome.levels[m]}) for i in positions]


def _table_rows(run: BisectRun, outcome: Outcome) -> tuple[list[list[str]], str | None]:
    kinds = _kinds(outcome)
    metric = outcome.metrics[0] if outcome.metrics else None
    culprits = {c.commit for c in outcome.culprits if c.verified}
    rows = []
    for i, levels in _tested(run, outcome):
        commit = run.commits[i]
        mark = ("GOOD" if i == 0 else "BAD" if i == len(run.commits) - 1 else
                "culprit" if i in culprits else "")
        value = (_num(kinds.get(metric, "time"), shown(kinds.get(metric, "time"), levels[metric]))
                 if metric in levels else "")
        rows.append([_pos(run, i), commit.short, mark, value, commit.subject])
    for i in sorted(outcome.skipped):
        rows.append([_pos(run, i), run.commits[i].short, "skipped", "", run.commits[i].subject])
    rows.sort(key=lambda r: int(r[0][1:].split("/")[0]))
    return rows, metric


def _figures(run: BisectRun, outcome: Outcome) -> str:
    return (f"{len(outcome.steps)} A/B step(s), {outcome.sessions} session(s), "
            f"{outcome.pairs} pairs, {run.elapsed_s:.0f} s of a {run.budget_s:.0f} s budget, "
            f"{len(run.commits) - 1} commit(s) after GOOD")


def _verdict(outcome: Outcome) -> tuple[str, str]:
    """The status and the rest of the message after it: most messages start with the status
    ("not reproduced: ..."), which is then not said twice."""
    said, status = outcome.message, outcome.status
    return status, said[len(status):] if said.startswith(status) else f": {said}"


def terminal(run: BisectRun, outcome: Outcome, width: int = 100) -> list[str]:
    """The report after the progress lines: the verdict, the ``culprit:`` lines, the table."""
    status, rest = _verdict(outcome)
    lines = [f"bisect: {status}{rest}", *_culprit_line(run, outcome)]
    rows, metric = _table_rows(run, outcome)
    if rows:
        lines.append(f"tested commits (change against GOOD of {metric}):" if metric
                     else "tested commits:")
        lines += table([[clean(cell) for cell in row] for row in rows],
                       ["pos", "commit", "", "vs GOOD", "subject"],
                       ("right", "left", "left", "right", "left"), width,
                       droppable=["subject"])
    lines += [f"bisect: {line}" for line in tests_lines(run)]
    lines.append(f"bisect: {_figures(run, outcome)}")
    lines += [f"note: {n}" for n in run.notes]
    return [clean(line) for line in lines]


def _plot(run: BisectRun, outcome: Outcome, metric: str, kind: str) -> list[str]:
    """A text plot of each measured commit's change against GOOD, one bar per commit."""
    points = [(i, levels[metric]) for i, levels in _tested(run, outcome) if metric in levels]
    if not points:
        return []
    low = min(0.0, *(x for _, x in points))
    high = max(0.0, *(x for _, x in points))
    span = (high - low) or 1.0
    culprits = {c.commit for c in outcome.culprits if c.verified}
    out = ["```text", f"change against GOOD: {metric}"]
    for i, x in points:
        bar = "#" * max(1, round(BAR * (x - low) / span))
        mark = "  <- culprit" if i in culprits else ""
        out.append(f"{_pos(run, i):>8} {run.commits[i].short} |{bar:<{BAR}} "
                   f"{_num(kind, shown(kind, x))}{mark}")
    return [*out, "```"]


def markdown(run: BisectRun, outcome: Outcome) -> str:
    """The job summary's section: the verdict, the culprits, a plot and the table."""
    good, bad = run.commits[0], run.commits[-1]
    out = ["## opperf bisect", "",
           f"{md_code(good.short)}..{md_code(bad.short)} ({len(run.commits) - 1} commits), "
           f"selection {md_code(' '.join(run.selection))}", "",
           "**{}**{}".format(*map(md_text, _verdict(outcome))), ""]
    for line in _culprit_line(run, outcome):
        out.append(("  - " if line.startswith(" ") else "- ") + md_text(line.strip()))
    kinds = _kinds(outcome)
    for name in outcome.metrics[:3]:
        out += ["", *_plot(run, outcome, name, kinds.get(name, "time"))]
    rows, metric = _table_rows(run, outcome)
    if rows:
        out += ["", f"| position | commit | | {md_text(metric or 'change')} vs GOOD | subject |",
                "|---:|---|---|---:|---|"]
        out += ["| " + " | ".join(md_text(cell) for cell in row) + " |" for row in rows]
    out += ["", md_text(_figures(run, outcome)) + "."]
    out += [f"- {md_text(line)}" for line in tests_lines(run)]
    out += [f"- {md_text(n)}" for n in run.notes]
    return "\n".join(out) + "\n"


def _metrics_json(metrics: dict[str, Estimate], share: dict[str, float] | None = None
                  ) -> list[dict[str, Any]]:
    def num(v: float) -> float | None:
        return v if math.isfinite(v) else None

    return [{"metric": m, "kind": e.kind, "verdict": e.verdict, "estimate": num(e.ratio),
             "low": num(e.low), "high": num(e.high), "pairs": e.pairs,
             **({"share": num(share[m]) if m in share else None} if share is not None else {})}
            for m, e in sorted(metrics.items())]


def _step_json(run: BisectRun, step: Step) -> dict[str, Any]:
    c = step.comparison
    return {"kind": step.kind, "base": c.a, "head": c.b, "verdict": step.verdict,
            "sessions": step.attempts, "pairs": step.pairs,
            "broken": {run.commits[i].sha: why for i, why in c.broken.items()},
            "metrics": _metrics_json(c.metrics)}


def as_json(run: BisectRun, outcome: Outcome) -> dict[str, Any]:
    """The ``--json`` document (its schema: opperf-bisect-1.schema.json)."""
    kinds = _kinds(outcome)
    return {
        "schema": FORMAT, "status": outcome.status, "message": outcome.message,
        "exit_status": run.exit_status, "selection": list(run.selection),
        "commits": [commit.to_dict() for commit in run.commits],
        "metrics": list(outcome.metrics),
        "culprits": [{"position": c.commit, "parent": c.parent, "verified": c.verified,
                      "metrics": _metrics_json(c.metrics, c.share),
                      "explain": {m: e.to_dict() for (at, m), e in sorted(run.explain.items())
                                  if at == c.commit}} for c in outcome.culprits],
        "ranges": [{"from": r.lo, "to": r.hi, "why": r.why} for r in outcome.ranges
                   if r.lo >= 0],
        "skipped": [{"position": i, "why": why} for i, why in sorted(outcome.skipped.items())],
        "tested": [{"position": i, "change": {m: shown(kinds.get(m, "time"), x)
                                              for m, x in levels.items() if math.isfinite(x)}}
                   for i, levels in _tested(run, outcome)],
        "steps": [_step_json(run, s) for s in outcome.steps],
        "ab_steps": len(outcome.steps), "sessions": outcome.sessions, "pairs": outcome.pairs,
        "elapsed_s": run.elapsed_s, "budget_s": run.budget_s, "notes": list(run.notes),
        "tests_from": _tests_json(run),
    }


def _tests_json(run: BisectRun) -> dict[str, Any]:
    tf = dict(run.tests_from or {"source": "commit", "label": "each commit's own"})
    return {"source": tf.get("source", "commit"), "commit": tf.get("commit"),
            "label": tf.get("label", ""), "files": list(tf.get("files", [])),
            "imports": list(tf.get("imports", []))}
