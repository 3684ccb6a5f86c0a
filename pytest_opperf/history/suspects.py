"""Suspected regressions: where a metric of the history stepped for the worse and stayed there.

Time that drifts across commits is the history's to judge, not a gate's: on pushes to ``main``
the CI job lists, in its summary and as warnings, each metric whose per-commit series has a change
point (:func:`pytest_opperf.history.trends.find_changes`) for the worse within the last commits, the
new level holding for at least ``HOLD`` commits (work counts too: more work per step is worse).
One outlying commit is no segment, so it names nothing; a step names the commit range it happened
in (the last commit before it and the first at the new level) and its size, and the command that
bisects that range (:func:`bisect_command`). Pure: the history command and the CI script print the
lines.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ..reports.layout import clean, md_code, md_text
from .trends import (
    HIGHER_IS_BETTER,
    SHARES,
    Group,
    find_changes,
    is_work,
    version_change,
)

__all__ = ["HOLD", "Suspect", "bisect_command", "find", "markdown_lines", "text_lines"]

HOLD = 2  # commits a new level must hold (and the level before it) to count as a step


@dataclass(frozen=True)
class Suspect:
    """One metric that stepped for the worse between ``before`` and ``first`` (commit labels)."""

    group: str
    run: str
    metric: str
    before: str  # the last commit at the old level
    first: str  # the first commit at the new level
    old: float
    new: float
    held: int  # commits at the new level so far
    versions: str | None = None  # a work count's: the versions that changed with the step

    @property
    def change(self) -> float:
        """Relative change of the value (``+0.10``: 10 % higher)."""
        return self.new / self.old - 1.0 if self.old else float("inf")

    def describe(self) -> str:
        return (f"{self.group}: {self.run} {self.metric} stepped {self.change:+.1%} between "
                f"{self.before} and {self.first} ({_fmt(self.metric, self.old)} -> "
                f"{_fmt(self.metric, self.new)}, held for {self.held} commit(s)"
                + (f"; counted with other versions: {self.versions})" if self.versions else ")"))


def _fmt(metric: str, value: float) -> str:
    if is_work(metric):
        return f"{value:,.0f}"
    return f"{value:.2%}" if metric in SHARES else f"{value:.4g}"


def find(groups: Sequence[Group], last: int = 10, hold: int = HOLD,
         stat_glob: str | None = None) -> list[Suspect]:
    """The worse steps of every series (of the stats ``stat_glob`` matches, if given) whose new
    level starts within the last ``last`` commits of its group and holds for ``hold`` commits or
    more, the largest first."""
    out = []
    for g in groups:
        first_recent = max(0, len(g.commits) - last)
        for s in g.series:
            if stat_glob is not None and not fnmatch.fnmatchcase(s.stat, stat_glob):
                continue
            for c in find_changes(s.metric, s.values, min_size=hold):
                worse = (c.after < c.before) if s.metric in HIGHER_IS_BETTER else (
                    c.after > c.before)
                commit = s.points[c.index]
                if not worse or commit < first_recent or c.index == 0:
                    continue
                held = sum(1 for p in s.points if p >= commit)
                previous = s.points[c.index - 1]
                versions = version_change(g, s.run, previous, commit) if is_work(s.metric) else None
                out.append(Suspect(g.title, s.run, s.metric, g.commits[previous].label,
                                   g.commits[commit].label, c.before, c.after, held, versions))
    return sorted(out, key=lambda x: -abs(x.change))


def bisect_command(s: Suspect) -> str | None:
    """The command that finds the commit of ``s``'s step (docs/bisect.md); None when a label is
    no clean commit (a session of a dirty tree, or one without a sha)."""
    if not all(re.fullmatch(r"[0-9a-f]{7,40}", label) for label in (s.before, s.first)):
        return None
    device, _, workload = s.group.partition(" / ")
    args = [s.run, f"--opperf-workload={workload}",
            f"--opperf-device={'cpu' if device == 'cpu' else 'gpu'}"]
    return (f"python -m pytest_opperf bisect {s.before} {s.first} -- "
            + " ".join(shlex.quote(clean(a)) for a in args))


def text_lines(suspects: Sequence[Suspect], last: int) -> list[str]:
    """``warning: suspected regression: ...`` per suspect (stored text escaped: a run id cannot
    add lines), each followed by the command that bisects its range, or one line saying there is
    none."""
    if not suspects:
        return [f"suspected regressions in the last {last} commit(s): none"]
    out = []
    for s in suspects:
        command = bisect_command(s)
        out += [clean(f"warning: suspected regression: {s.describe()}")]
        out += [f"  bisect it: {command}"] if command else []
    return out


def markdown_lines(suspects: Sequence[Suspect], last: int) -> list[str]:
    """The job summary's section: a warning, never a failure."""
    out = ["## opperf history: suspected regressions", ""]
    if not suspects:
        return out + [f"No metric stepped for the worse in the last {last} commit(s)."]
    out += [f"{len(suspects)} metric(s) stepped for the worse in the last {last} commit(s) and "
            f"held for at least {HOLD} commits (a warning: drift across commits is not gated; "
            "bisect the range, or run A/B with `--opperf-compare` on it):", "",
            "| group | run | metric | commits | change | before | after |",
            "|---|---|---|---|---:|---:|---:|"]
    for s in suspects:
        metric = md_text(s.metric) + (f" (counted with other versions: {md_text(s.versions)})"
                                      if s.versions else "")
        out.append(f"| {md_text(s.group)} | {md_text(s.run)} | {metric} | "
                   f"{md_text(s.before)}..{md_text(s.first)} | {s.change:+.1%} | "
                   f"{_fmt(s.metric, s.old)} | {_fmt(s.metric, s.new)} |")
    commands = [c for c in map(bisect_command, suspects) if c]
    return out + (["", "Find the commit of each step:", ""] if commands else []) + [
        f"- {md_code(c)}" for c in commands]
