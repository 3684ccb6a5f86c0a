"""What the history keeps of a session and reads back: the stored records
(:class:`StoredSession`, :class:`StoredRun`, :class:`StoredStat`, :class:`History`) and the values
derived on the way in (a stat's per-step value, a run's steady state, a commit's time, the
session's fingerprint, the bounded samples), all steady-state values through
:mod:`pytest_opperf.comparison.metrics`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..comparison.metrics import steady, steady_examples_per_sec, steady_python_shares
from ..core.stats import median
from ..results import ResultSet, RunResult, StatResult, is_sha
from ..workcounts.workcount import WorkCounts

__all__ = ["SAMPLES_KEPT", "History", "StoredRun", "StoredSession", "StoredStat",
           "bounded_samples", "commit_time", "dumps", "fingerprint", "steady_run_values",
           "step_value", "utc"]

SAMPLES_KEPT = 16  # per stat: enough to see a distribution, small for 1,000 sessions of 170 runs


def utc(stamp: str | None) -> str | None:
    """An ISO-8601 time in UTC, so that stored times sort as text; unparsable ones as given."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).isoformat(timespec="seconds")


def commit_time(sha: str | None, cwd: str | os.PathLike[str] = ".") -> str | None:
    """The committer time of ``sha`` in the git repository at ``cwd`` (UTC), or ``None`` (no sha,
    no git, a commit this repository does not hold).

    ``sha`` comes from a results file: only a hexadecimal object name is given to git, and after
    ``--end-of-options``, so that no file can make git read it as an option (``--output=PATH``)."""
    if not sha or not is_sha(sha):
        return None
    try:
        done = subprocess.run(["git", "show", "-s", "--format=%cI", "--end-of-options", sha],
                              cwd=cwd, capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return utc(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def step_value(run: RunResult, stat: StatResult) -> float | None:
    """The stat's steady-state median, as the gate takes it
    (:func:`pytest_opperf.comparison.metrics.steady`: e2e, the per-step totals after warm-up) or
    per-call median (per-op benchmarks); without samples the mean."""
    samples = steady(run, stat.samples_ms)
    if samples:
        return median(samples)
    if run.kind == "e2e":
        return stat.total_ms / run.batches if run.batches else None
    return stat.avg_ms


def steady_run_values(run: RunResult) -> tuple[float | None, float | None]:
    """The run's steady-state examples/sec
    (:func:`pytest_opperf.comparison.metrics.steady_examples_per_sec`) and Python share (the median
    of its steps' shares after warm-up, as the gate compares them); each None where the run has
    none."""
    shares = steady_python_shares(run)
    return steady_examples_per_sec(run), median(shares) if shares else None


def bounded_samples(samples: Sequence[float] | None) -> str | None:
    """At most :data:`SAMPLES_KEPT` samples as JSON (5 significant digits), or ``None``."""
    if not samples:
        return None
    n = len(samples)
    if n > SAMPLES_KEPT:  # evenly spaced, first and last kept
        samples = [samples[round(i * (n - 1) / (SAMPLES_KEPT - 1))] for i in range(SAMPLES_KEPT)]
    return json.dumps([float(f"{x:.5g}") for x in samples])


def dumps(obj: Any) -> str:
    """Canonical JSON (sorted keys, no NaN) as the store keeps objects."""
    return json.dumps(obj, sort_keys=True, allow_nan=False, default=str)


def fingerprint(results: ResultSet, compare: Any = None) -> str:
    """Identifies a session's results: importing the same file twice stores it once. (Every
    fact but the samples: hashing those would cost more than storing the session.)"""
    runs: list[list[Any]] = [
        [r.id, r.kind, r.wall_s, r.examples, r.examples_per_sec, r.python_share,
         [(s.name, s.count, s.total_ms, s.min_ms, s.max_ms) for s in r.stats]]
        for r in results.runs]
    for run, row in zip(results.runs, runs, strict=True):
        if run.work is not None:  # only then: a file without work counts keeps its fingerprint
            row.append(run.work.to_dict())
    doc = [results.created, results.commit, results.session, results.machine, results.gate, compare,
           runs]
    return hashlib.sha256(dumps(doc).encode()).hexdigest()


@dataclass(frozen=True)
class StoredSession:
    id: int
    created: str
    source: str
    sha: str | None
    branch: str | None
    dirty: bool | None
    commit_time: str | None
    device: str | None
    device_class: str
    workload: str
    timing: str | None
    gate_passed: bool | None
    compare: Any
    runs: int

    @property
    def when(self) -> str:
        """The time the trends order by: the commit's when known, else the session's."""
        return self.commit_time or self.created


@dataclass(frozen=True)
class StoredRun:
    """A stored run; ``work`` its work counts per step (None: the run had none, or was stored
    before the store kept them).

    ``examples_per_sec`` and ``python_share`` are the steady state, as the gate names them
    (:func:`steady_run_values`; None: the run has none, or was stored before the store kept
    it); ``window_examples_per_sec`` and ``window_python_share`` are the whole window's,
    warm-up included (the run's ``examples_per_sec`` and ``python_share`` in a results file)."""

    session_id: int
    run: str
    kind: str
    window_examples_per_sec: float
    window_python_share: float
    framework_share: float
    kernel_share: float
    wall_s: float
    work: WorkCounts | None = None
    examples_per_sec: float | None = None
    python_share: float | None = None


@dataclass(frozen=True)
class StoredStat:
    session_id: int
    run: str
    name: str
    parent: str | None
    kernel: bool
    value: float | None  # per-step (e2e) or per-call (op) median, ms
    step_count: int | None
    total_ms: float


@dataclass
class History:
    """What a store holds, in time order (sessions by :attr:`StoredSession.when`)."""

    sessions: list[StoredSession] = field(default_factory=list)
    runs: list[StoredRun] = field(default_factory=list)
    stats: list[StoredStat] = field(default_factory=list)
