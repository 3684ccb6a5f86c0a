"""Trends: stored sessions turned into per-metric series over commits, with change points (pure).

Sessions are grouped by device class and workload (numbers from different hardware or sizes are
never on one line). Within a group, the points of a series are commits in time order: sessions of
one clean commit are one point (the median of their values); a session of a dirty tree, or without
git, is a point of its own. Metrics are named as the gate names them (listed in
docs/history.md): ``step_ms:<stat>`` is the per-step median after warm-up, ``call_ms:<stat>`` per
call, ``examples_per_sec`` and ``python_share`` the steady state; the whole window's values
(warm-up included) are ``window_examples_per_sec`` and ``window_python_share``.

A run with work counts (:mod:`pytest_opperf.workcounts.workcount`) adds its work per step as series
too: the step's totals ``bytecodes``, ``py_calls``, ``c_calls`` and, where counted, ``instructions``
(CPU instructions), and each stat's self bytecodes ``bytecodes:<stat>`` (``bytecodes:(outside)``:
the work outside every timed region). Counts are exact, so their change points are sought at a finer
resolution than times' (:data:`WORK_DETECT`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field

from tabulate import tabulate

from ..comparison import metrics
from ..core.stats import median
from ..reports.layout import clean
from ..workcounts.workcount import COUNTERS, OUTSIDE, WorkCounts
from .changepoints import ChangePoint, detect
from .records import History, StoredRun, StoredSession

__all__ = ["Commit", "Group", "Series", "build", "find_changes", "history_lines", "is_work",
           "metric_name", "run_metrics", "version_change", "work_metrics"]

# the steady state (as the gate names it), then the whole window's (warm-up included)
RUN_METRICS = (metrics.EXAMPLES_PER_SEC, metrics.PYTHON_SHARE, metrics.WINDOW_EXAMPLES_PER_SEC,
               metrics.WINDOW_PYTHON_SHARE)
HIGHER_IS_BETTER = (metrics.EXAMPLES_PER_SEC, metrics.WINDOW_EXAMPLES_PER_SEC)
SHARES = (metrics.PYTHON_SHARE, metrics.WINDOW_PYTHON_SHARE)
DEFAULT_TOP = 10  # step_ms rows per e2e run in the history command without --stat
INSTRUCTIONS = metrics.INSTRUCTIONS
WORK_TOTALS = (*COUNTERS, INSTRUCTIONS)  # a step's work counts, in the order they are listed
STAT_COUNTER = "bytecodes"  # the counter kept per stat as a series (the finest of the three)
# detect()'s (min_change, min_sigma) for work counts: the counters are exact (a 0.2 % step is work
# that was added, not noise); CPU instructions are nearly so, and get a wider floor
WORK_DETECT: dict[str, tuple[float, float]] = {"counter": (0.002, 1e-4),
                                               INSTRUCTIONS: (0.005, 5e-4)}


@dataclass(frozen=True)
class Commit:
    """One point on a group's time axis."""

    key: str
    label: str  # short sha, "abc12345*" for a dirty tree, "#12" for a session without git
    sha: str | None
    branch: str | None
    when: str
    sessions: tuple[int, ...]


@dataclass
class Series:
    run: str
    kind: str
    metric: str
    points: list[int] = field(default_factory=list)  # indices into the group's commits
    values: list[float] = field(default_factory=list)
    changes: list[ChangePoint] = field(default_factory=list)  # ChangePoint.index indexes values

    @property
    def stat(self) -> str:
        return self.metric.split(":", 1)[1] if ":" in self.metric else self.metric

    @property
    def latest(self) -> float | None:
        return self.values[-1] if self.values else None


@dataclass
class Group:
    """``versions``: the versions a run's work counts were counted with, by (run, commit index)
    (those of the commit's last session)."""

    device_class: str
    workload: str
    sessions: list[StoredSession]
    commits: list[Commit]
    series: list[Series]
    versions: dict[tuple[str, int], dict[str, str]] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"{self.device_class} / {self.workload}"


def metric_name(kind: str, stat: str) -> str:
    """A stat's metric in the history: per step for e2e runs, per call for per-op runs."""
    return metrics.metric(metrics.STEP if kind == "e2e" else metrics.CALL, stat)


def is_work(metric: str) -> bool:
    """Whether ``metric`` is a work count (``bytecodes``, ``instructions``,
    ``bytecodes:(outside)``...)."""
    return metric == INSTRUCTIONS or metric.partition(":")[0] in COUNTERS


def work_metrics(work: WorkCounts) -> list[tuple[str, float]]:
    """A run's work counts as the history's metrics: the step's totals (``instructions`` only
    where counted), then the self bytecodes of each stat the counts name."""
    out: list[tuple[str, float]] = [(c, float(work.total(c))) for c in COUNTERS]
    if work.instructions is not None:
        out.append((INSTRUCTIONS, float(work.instructions)))
    out += [(metrics.metric(STAT_COUNTER, name), float(counts.get(STAT_COUNTER, 0)))
            for name, counts in work.stats.items()]
    return out


def run_metrics(run: StoredRun) -> list[tuple[str, float | None]]:
    """An e2e run's :data:`RUN_METRICS` and their values (None: the store has none)."""
    return list(zip(RUN_METRICS, (run.examples_per_sec, run.python_share,
                                  run.window_examples_per_sec, run.window_python_share),
                    strict=True))


def find_changes(metric: str, values: Sequence[float], min_size: int = 3) -> list[ChangePoint]:
    """The change points of one metric's series: :func:`~.changepoints.detect` with its
    defaults (tuned to timing noise), finer for work counts (:data:`WORK_DETECT`)."""
    if not is_work(metric):
        return detect(values, min_size)
    min_change, min_sigma = WORK_DETECT[INSTRUCTIONS if metric == INSTRUCTIONS else "counter"]
    return detect(values, min_size, min_change=min_change, min_sigma=min_sigma)


def _order(s: Series) -> tuple[str, int, float, str]:
    """A run's rows: run metrics (in :data:`RUN_METRICS`' order), times (the largest first), the
    work totals (in :data:`WORK_TOTALS`' order), each stat's work (the largest first)."""
    if s.metric in RUN_METRICS:
        return s.run, 0, RUN_METRICS.index(s.metric), s.metric
    if not is_work(s.metric):
        rank = 1
    elif s.metric in WORK_TOTALS:
        return s.run, 2, WORK_TOTALS.index(s.metric), s.metric
    else:
        rank = 3
    return s.run, rank, -(s.latest or 0), s.metric


def _commit_key(s: StoredSession) -> tuple[str, str]:
    if s.sha and s.dirty is False:
        return s.sha, s.sha[:8]
    if s.sha:
        return f"session {s.id}", f"{s.sha[:8]}*"
    return f"session {s.id}", f"#{s.id}"


def build(history: History, last: int | None = None) -> list[Group]:
    """Every group's commits and series, change points found over the whole history;
    ``last`` keeps the last N commits of each group afterwards."""
    by_group: dict[tuple[str, str], list[StoredSession]] = {}
    for s in history.sessions:  # already in time order
        by_group.setdefault((s.device_class, s.workload), []).append(s)
    values: dict[tuple[int, str], list[tuple[str, str, float]]] = {}  # (session, run) -> values
    for r in history.runs:
        if r.kind == "e2e":
            values.setdefault((r.session_id, r.run), []).extend(
                (r.kind, m, v) for m, v in run_metrics(r) if v is not None)
        if r.work is not None:
            values.setdefault((r.session_id, r.run), []).extend(
                (r.kind, m, v) for m, v in work_metrics(r.work))
    kinds = {(r.session_id, r.run): r.kind for r in history.runs}
    counted_with: dict[int, list[tuple[str, dict[str, str]]]] = {}  # session -> (run, versions)
    for r in history.runs:
        if r.work is not None:
            counted_with.setdefault(r.session_id, []).append((r.run, r.work.versions))
    for st in history.stats:
        kind = kinds.get((st.session_id, st.run))
        if kind is not None and st.value is not None:
            item = (kind, metric_name(kind, st.name), st.value)
            values.setdefault((st.session_id, st.run), []).append(item)
    by_session: dict[int, list[tuple[str, str, str, float]]] = {}
    for (sid, run), items in values.items():
        by_session.setdefault(sid, []).extend((run, k, m, v) for k, m, v in items)

    groups = []
    for (device_class, workload), sessions in sorted(by_group.items()):
        commits: list[Commit] = []
        index: dict[str, int] = {}
        members: list[list[int]] = []
        for s in sessions:
            key, label = _commit_key(s)
            if key not in index:
                index[key] = len(commits)
                commits.append(Commit(key, label, s.sha, s.branch, s.when, ()))
                members.append([])
            members[index[key]].append(s.id)
        commits = [Commit(c.key, c.label, c.sha, c.branch, c.when, tuple(m))
                   for c, m in zip(commits, members, strict=True)]
        gathered: dict[tuple[str, str], tuple[str, dict[int, list[float]]]] = {}
        versions: dict[tuple[str, int], dict[str, str]] = {}
        for i, commit in enumerate(commits):
            for sid in commit.sessions:
                versions.update(((run, i), v) for run, v in counted_with.get(sid, ()))
                for run, kind, metric, value in by_session.get(sid, ()):
                    by_commit = gathered.setdefault((run, metric), (kind, {}))[1]
                    by_commit.setdefault(i, []).append(value)
        series = []
        for (run, metric), (kind, per_commit) in gathered.items():
            line = Series(run, kind, metric)
            for i in sorted(per_commit):
                line.points.append(i)
                line.values.append(median(per_commit[i]))
            line.changes = find_changes(metric, line.values)
            series.append(line)
        series.sort(key=_order)
        group = Group(device_class, workload, sessions, commits, series, versions)
        groups.append(_last(group, last) if last else group)
    return groups


def _last(group: Group, n: int) -> Group:
    """The group's last ``n`` commits; series and change points cut to them."""
    first = max(0, len(group.commits) - n)
    keep = {sid for c in group.commits[first:] for sid in c.sessions}
    series = []
    for s in group.series:
        cut = next((j for j, p in enumerate(s.points) if p >= first), len(s.points))
        if cut == len(s.points):
            continue
        series.append(Series(s.run, s.kind, s.metric, [p - first for p in s.points[cut:]],
                             s.values[cut:], [ChangePoint(c.index - cut, c.before, c.after)
                                              for c in s.changes if c.index >= cut]))
    return Group(group.device_class, group.workload, [s for s in group.sessions if s.id in keep],
                 group.commits[first:], series,
                 {(run, i - first): v for (run, i), v in group.versions.items() if i >= first})


def version_change(group: Group, run: str, before: int, after: int) -> str | None:
    """What changed between the versions ``run``'s work counts were counted with at commit
    ``before`` and at ``after`` (``python 3.11.9 -> 3.12.1``), or None: a step in a work count
    where a version changed may be the library's work rather than the code's."""
    old = group.versions.get((run, before))
    new = group.versions.get((run, after))
    if old is None or new is None or old == new:
        return None
    return ", ".join(f"{name} {old.get(name, '-')} -> {new.get(name, '-')}"
                     for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name))


# --- the history command's text ------------------------------------------------------------------


def _fmt(metric: str, value: float | None) -> str:
    if value is None:
        return ""
    if metric in SHARES:
        return f"{value:.2%}"
    if is_work(metric):  # exact counts: every digit of a small step shows
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _select(series: Sequence[Series], stat_glob: str | None) -> list[Series]:
    if stat_glob is not None:
        return [s for s in series if fnmatch.fnmatchcase(s.stat, stat_glob)]
    chosen: list[Series] = []
    per_run: dict[str, int] = {}
    outside = metrics.metric(STAT_COUNTER, OUTSIDE)
    for s in series:  # in _order: run metrics, times by latest value (descending), work
        if s.kind != "e2e" or s.metric in RUN_METRICS or s.metric in (*WORK_TOTALS, outside):
            chosen.append(s)
        elif is_work(s.metric):
            continue  # a stat's work: with --stat
        elif per_run.setdefault(s.run, 0) < DEFAULT_TOP:
            per_run[s.run] += 1
            chosen.append(s)
    return chosen


def change_line(group: Group, s: Series, c: ChangePoint) -> str:
    commit = group.commits[s.points[c.index]]
    worse = (c.after < c.before) if s.metric in HIGHER_IS_BETTER else (c.after > c.before)
    word = "worse" if worse else "better"
    return (f"{s.run} {s.metric}: stepped at {commit.label} ({commit.when}): "
            f"{_fmt(s.metric, c.before)} -> {_fmt(s.metric, c.after)} ({c.change:+.1%}, {word})")


def session_rows(sessions: Sequence[StoredSession]) -> list[list[str]]:
    rows = []
    for s in sessions:
        gate = "-" if s.gate_passed is None else ("passed" if s.gate_passed else "FAILED")
        rows.append([str(s.id), s.created, (s.sha or "")[:8] + ("*" if s.dirty else ""),
                     s.branch or "", s.device_class, s.workload, s.timing or "", str(s.runs), gate,
                     "yes" if s.compare is not None else ""])
    return rows


SESSION_HEADERS = ["id", "created", "commit", "branch", "device class", "workload", "timing",
                   "runs", "gate", "A/B"]


def _clean_rows(rows: Sequence[Sequence[str]]) -> list[list[str]]:
    return [[clean(cell) for cell in row] for row in rows]


def history_lines(label: str, groups: Sequence[Group], stat_glob: str | None = None,
                  columns: int = 10) -> list[str]:
    """The history command's report: sessions, per group a trend table over the last
    ``columns`` commits (``*`` after a value: a change point there), and the change points.
    Without ``stat_glob`` the table has the run metrics, each e2e run's top stats and its work
    counts per step (the totals and the bytecodes outside every region); a stat's own work
    counts are listed when ``stat_glob`` matches it.
    Text from the store (run ids, stat names, branches, device classes) is printed with control
    characters escaped (``\\n``, ``\\x1b``): a stored value cannot add or rewrite lines."""
    total = sum(len(g.sessions) for g in groups)
    lines = [f"history {clean(label)}: {total} session(s) in {len(groups)} group(s) "
             "(device class / workload)"]
    if not groups:
        return lines
    for g in groups:
        lines += ["", f"== {clean(g.title)}: {len(g.sessions)} session(s), "
                      f"{len(g.commits)} commit(s) ==", "sessions:"]
        lines += tabulate(_clean_rows(session_rows(g.sessions[-columns:])), SESSION_HEADERS,
                          tablefmt="plain").splitlines()
        chosen = _select(g.series, stat_glob)
        if not chosen:
            lines += ["no metric matches" + (f" --stat {clean(stat_glob)}" if stat_glob else "")]
            continue
        first = max(0, len(g.commits) - columns)
        shown = g.commits[first:]
        rows = []
        for s in chosen:
            cells = [""] * len(shown)
            marks = {s.points[c.index] for c in s.changes}
            for p, v in zip(s.points, s.values, strict=True):
                if p >= first:
                    cells[p - first] = _fmt(s.metric, v) + ("*" if p in marks else "")
            rows.append([clean(s.run), clean(s.metric), *cells])
        lines += ["", f"trend over the last {len(shown)} commit(s) (examples/sec, share, ms "
                      "per step/call, or work counts per step; * = change point):"]
        labels = [clean(c.label) for c in shown]
        lines += tabulate(rows, ["run", "metric", *labels], tablefmt="plain",
                          disable_numparse=True).splitlines()
        found = [(s, c) for s in chosen for c in s.changes if s.points[c.index] >= first]
        lines += ["", f"change points in the last {len(shown)} commit(s): {len(found) or 'none'}"]
        lines += ["  " + clean(change_line(g, s, c)) for s, c in found]
    return lines
