"""An A/B session's explanations and differential profile, from the runs both sides measured.

:func:`explain_compare` gives every regressed or inconclusive metric of a
:class:`~pytest_opperf.ab.paired.CompareResult` its :class:`~.diff.Explanation` (a metric of a
run without work counts on both sides, such as a per-op benchmark, is "not in the counted code"),
the changed lines its added work runs through (:mod:`.changes`) and the command that reruns its
test's A/B. :func:`profile_files` makes ``explain.pb.gz`` and the folded stacks of the runs with
an explanation (:mod:`.profile`); :func:`write_files` writes them. No pytest.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..ab.cost import node_of
from ..ab.paired import CompareResult, Decision
from ..records import atomic
from ..results import RunResult
from ..workcounts.workcount import COUNTERS
from .changes import Changes, ChangesError
from .diff import KEPT, MORE, NOT_COUNTED, Explanation, explain
from .profile import BASE_LABEL, ProfileRow, folded, profile_bytes, rows_of

__all__ = ["PROFILE", "RERUN_FLAGS", "RERUN_OPTIONS", "explain_ab", "explain_compare",
           "explain_metric", "explained", "inside", "profile_files", "rerun_command",
           "rerun_options", "write_files"]

PROFILE = "explain.pb.gz"


def explained(d: Decision) -> bool:
    """Whether ``d`` gets an explanation: regressed, or inconclusive."""
    return d.verdict == "regressed" or d.inconclusive


def explain_compare(result: CompareResult, runs: Mapping[str, tuple[RunResult, RunResult]],
                    changes: Changes | None = None, changes_note: str | None = None,
                    command: Callable[[str], str] | None = None) -> None:
    """Fill ``result.explain``: each regressed or inconclusive metric's explanation from
    ``runs`` (run id -> the base's and the head's run of its first visit); with more work, the
    hunks of ``changes`` it runs through (or ``changes_note``: why there are none to read);
    ``command(test)``, the command that reruns a test's A/B."""
    for d in result.decisions:
        if not explained(d):
            continue
        e = explain_metric(d.key.metric, runs.get(d.key.run), changes, changes_note)
        if command is not None:
            e.command = command(node_of(d.key.run))
        e.inside = inside(d, e, result.decisions)
        result.explain[d.key] = e


def explain_metric(metric: str, pair: tuple[RunResult, RunResult] | None,
                   changes: Changes | None, changes_note: str | None) -> Explanation:
    """``metric``'s explanation between the base's and the head's run of ``pair`` (None: a run
    without work counts on both sides); with more work, the hunks of ``changes`` it runs through,
    or ``changes_note``, why there are none to read."""
    if pair is None:
        return Explanation(NOT_COUNTED, "the run has no work counts on both sides (a per-op "
                           "benchmark runs no counting pass)")
    e = explain(metric, *pair)
    if e.cls == MORE and e.functions:
        if changes is not None:
            changes.apply(e)
        else:
            e.changed_note = changes_note
    return e


TIMES = ("step_ms", "call_ms", "avg_ms", "total_ms")  # a stat's time metrics


def inside(d: Decision, e: Explanation, decisions: Sequence[Decision]) -> list[str]:
    """The stats inside ``d``'s scope (the stats nested in its stat; every stat of the run for a
    run-level metric) whose count changed, or whose time regressed or is inconclusive, by the
    session's own decisions: counts first, then times, the largest first; at most
    :data:`~.diff.KEPT`. ``aten::convolution 1.213x [1.150, 1.281]``, ``aten::add count 4 per
    step, base 2``."""
    _, sep, own = d.key.metric.partition(":")
    scope = set(e.stats[1:]) if sep else None
    counts, times = [], []
    for o in decisions:
        kind, sep, stat = o.key.metric.partition(":")
        if (o.key.run != d.key.run or not sep or stat == own
                or (scope is not None and stat not in scope)):
            continue
        if kind == "count" and o.base != o.head:
            counts.append((-abs(o.head - o.base), f"{stat} count {o.head:g} per step, base "
                                                  f"{o.base:g}"))
        elif kind in TIMES and explained(o):
            size = o.estimate if math.isfinite(o.estimate) else 0.0
            times.append((-size, f"{stat} {o.estimate:.3f}x [{o.low:.3f}, {o.high:.3f}]"))
    return [t for _, t in sorted(counts) + sorted(times)][:KEPT]


def profile_files(result: CompareResult, runs: Mapping[str, tuple[RunResult, RunResult]]
                  ) -> dict[str, bytes]:
    """``explain.pb.gz`` and ``explain-<count>.folded`` of the runs with an explanation whose
    two sides have per-function counts; none when there are no such runs."""
    rows: list[ProfileRow] = []
    for run in dict.fromkeys(k.run for k in result.explain):
        pair = runs.get(run)
        tables = [r.work.functions if r.work is not None else None for r in pair or ()]
        if len(tables) != 2 or tables[0] is None or tables[1] is None:
            continue  # a side without per-function counts: its rows would be the whole diff
        rows += rows_of(run, "base", tables[0]) + rows_of(run, "head", tables[1])
    if not rows:
        return {}
    files = {PROFILE: profile_bytes(rows)}
    for counter in COUNTERS:
        files[f"explain-{counter}.folded"] = folded(rows, counter).encode()
    return files


def write_files(directory: Path, files: Mapping[str, bytes]) -> list[Path]:
    """Write ``files`` into ``directory`` (made when missing), each atomically; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, data in files.items():
        atomic.write_bytes_atomic(directory / name, data)
        out.append(directory / name)
    return out


RERUN_OPTIONS = ("--opperf-device", "--opperf-workload", "--opperf-timing",
                 "--opperf-count-steps", "--opperf-count-timeout")
RERUN_FLAGS = ("--opperf-instructions",)


def rerun_options(args: Sequence[str]) -> list[str]:
    """The options of a session's command line ``args`` that its rerun keeps (what it measured
    and how: :data:`RERUN_OPTIONS`, given as ``--name=value`` or ``--name value``, and
    :data:`RERUN_FLAGS`), each as ``--name=value``."""
    out, it = [], iter(args)
    for a in it:
        name, eq, value = a.partition("=")
        if name in RERUN_FLAGS and not eq:
            out.append(a)
        elif name in RERUN_OPTIONS:
            if not eq:
                value = next(it, "")
                if not value:
                    continue
            out.append(f"{name}={value}")
    return out


def rerun_command(test: str, base: str, options: Sequence[str] = ()) -> str:
    """The one command that reruns ``test``'s A/B against ``base`` with the session's
    ``options`` (device, workload...): its report explains what got slower."""
    return shlex.join(["python", "-m", "pytest", test, "--opperf", f"--opperf-compare={base}",
                       *options])


def explain_ab(result: CompareResult, runs: Mapping[str, tuple[RunResult, RunResult]],
               root: Path, base_commit: str | None, base_label: str, out_dir: Path,
               command: Callable[[str], str] | None = None) -> None:
    """An A/B session's explanations (:func:`explain_compare`; the changed lines from the
    working tree ``root``'s diff against ``base_commit``, the base's revision, None when the base
    is a directory) and, with any, the differential profile written into ``out_dir``
    (:func:`profile_files`); notes in ``result.notes`` say what was written or why not."""
    changes, note = None, None
    if base_commit is None:
        note = f"the base {base_label} is a directory, not a revision of this checkout"
    else:
        try:
            changes = Changes.from_git(root, base_commit)
        except ChangesError as exc:
            note = f"the diff against the base could not be read: {exc}"
    explain_compare(result, runs, changes, note, command)
    files = profile_files(result, runs)
    if not files:
        return
    try:
        paths = write_files(out_dir, files)
    except OSError as exc:
        result.notes.append(f"explain: the differential profile was not written into {out_dir}: "
                            f"{exc}")
        return
    result.notes.append(f"explain: differential profile {paths[0]} (pprof: base negated, "
                        f"labelled {BASE_LABEL}=true) and folded stacks "
                        f"{', '.join(p.name for p in paths[1:])} beside it")
