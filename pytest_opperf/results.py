"""Run results (schema ``opperf/1``): the records a session measured, and their writing.

A :class:`ResultSet` is what a session measured; :func:`write_results` writes it atomically
(:mod:`.atomic`: a killed writer never leaves a truncated file where a baseline was), one run
per line. Reading and checking a file is :mod:`.results_reader` (the strict JSON) over
:mod:`.results_checks` (the schema's bounds, a record per run); the machine and commit a
session records are :mod:`.machine`.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .records import atomic
from .stattree import StatResult, StatTree
from .workcounts.workcount import WorkCounts

__all__ = ["RUN_KINDS", "SCHEMA", "ResultSet", "ResultsError", "RunResult", "StatResult",
           "baseline_file", "dumps_results", "is_sha", "json_problem", "warmup_rule",
           "write_results"]

SCHEMA = "opperf/1"
RUN_KINDS = ("e2e", "op", "overhead")
BY_RULE = -1  # RunResult.warmup_steps: not given, the warm-up rule decides


def warmup_rule(steps: int) -> int:
    """How many of a run's ``steps`` (``run.step()`` calls) are warm-up: the first, when there
    are at least two (it holds model building, startup and first compiles). The one warm-up
    rule: a run applies it once, when it is recorded or read from a file that does not say
    (:attr:`RunResult.warmup_steps`); every steady-state value is
    :mod:`pytest_opperf.comparison.metrics`'."""
    return 1 if steps >= 2 else 0
_SHA = re.compile(r"[0-9a-fA-F]{1,64}")


def is_sha(value: Any) -> bool:
    """A git object name as git prints it: hexadecimal digits (a file's sha goes to git as data)."""
    return isinstance(value, str) and _SHA.fullmatch(value) is not None


class ResultsError(Exception):
    """A results file that cannot be used; the message is one line naming the file."""


@dataclass(slots=True)
class RunResult:
    """One measured run (a test's measured window, or one per-op benchmark).

    Slotted: a results file of many small runs holds one of these per run, and an instance
    dictionary would be a fifth of each."""

    id: str
    kind: str
    config: dict[str, Any]
    device: str
    timing: str
    wall_s: float
    examples: int
    batches: int
    examples_per_sec: float
    sec_per_batch: float
    python_share: float
    stats: StatTree  # a list of StatResult given here or assigned later is built into one
    counts: dict[str, int]
    framework_share: float = 0.0
    kernel_share: float = 0.0
    executor_stat: str | None = None  # None: executor time is the sum of top-level stats
    executor_ms: float = 0.0
    kernel_ms: float = 0.0
    step_ms: list[float] = field(default_factory=list)
    step_examples: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trace: dict[str, Any] | None = None  # one step's events; kept out of results files
    work: WorkCounts | None = None  # the counting pass's work counts per step (run.counting_pass)
    # how many leading steps are warm-up (as many as there are steps or more: all of them);
    # BY_RULE (not given): warmup_rule's count, set at construction
    warmup_steps: int = BY_RULE

    def __post_init__(self) -> None:
        if self.warmup_steps == BY_RULE:
            self.warmup_steps = warmup_rule(len(self.step_ms))
        elif self.warmup_steps < 0:
            raise ValueError(f"run {self.id!r}: warmup_steps must be >= 0, got {self.warmup_steps}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "stats" and not isinstance(value, StatTree):
            value = StatTree(value)  # validated here, once: every reader trusts the tree
        object.__setattr__(self, name, value)  # (slots: the class is rebuilt, no bare super())

    def stat(self, name: str) -> StatResult | None:
        return self.stats.get(name)

    def stat_map(self) -> dict[str, StatResult]:
        return {s.name: s for s in self.stats}

    def step_python_shares(self) -> list[float] | None:
        """Each step's share of wall time outside the executor (all steps; None if unknown)."""
        executor = self.stats.executor_samples(self.executor_stat)
        if not executor or len(executor) != len(self.step_ms):
            return None
        return [(w - e) / w if w > 0 else 0.0 for w, e in zip(self.step_ms, executor, strict=True)]

    def to_dict(self, with_trace: bool = False) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("stats", "trace", "work")}
        d["stats"] = [s.to_dict() for s in self.stats]
        if self.work is not None:
            d["work"] = self.work.to_dict()
        if with_trace and self.trace is not None:
            d["trace"] = self.trace
        return d


@dataclass
class ResultSet:
    """A session's results: runs plus where and from what they were measured."""

    runs: list[RunResult] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    commit: dict[str, Any] | None = None
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    session: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None  # A/B: the CompareResult (pytest_opperf.ab.paired)

    def run(self, run_id: str) -> RunResult | None:
        """The run ``run_id`` (a scan: for a lookup per run, take :meth:`by_id` once)."""
        for r in self.runs:
            if r.id == run_id:
                return r
        return None

    def by_id(self) -> dict[str, RunResult]:
        """The runs by id, for lookups that stay linear in the number of runs."""
        return {r.id: r for r in self.runs}

    def to_dict(self, with_trace: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {"schema": SCHEMA, "created": self.created, "machine": self.machine,
                             "commit": self.commit, "session": self.session,
                             "runs": [r.to_dict(with_trace) for r in self.runs]}
        if self.gate is not None:
            d["gate"] = self.gate
        if self.compare is not None:
            d["compare"] = self.compare
        return d


def json_problem(value: Any, where: str, depth: int = 0) -> str | None:
    """Why ``value`` cannot go into a results file as it is (``where`` names it), or None.

    JSON has no NaN or Infinity, and its objects have string keys; anything
    but str, int, float, bool, None, lists and dicts would not be written."""
    if depth > 100:
        return f"{where} is nested more than 100 levels deep"
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return f"{where} is {value!r}, which JSON cannot hold (give a finite number)"
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            problem = json_problem(item, f"{where}[{i}]", depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has the key {key!r} ({type(key).__name__}); JSON keys are strings"
            problem = json_problem(item, f"{where}[{key!r}]", depth + 1)
            if problem:
                return problem
        return None
    return (f"{where} is {type(value).__name__} {value!r:.60}, which JSON cannot hold "
            "(give str, int, float, bool, None, a list or a dict)")


def dumps_results(results: ResultSet) -> str:
    """The results document with one run per line: diffs of a baseline in git show
    which runs changed, and the C encoder stays in use (``indent`` would not)."""
    doc = results.to_dict()
    runs = doc.pop("runs")
    head = json.dumps(doc, allow_nan=False)[:-1]
    body = ",\n".join(json.dumps(r, allow_nan=False) for r in runs)
    return f'{head}, "runs": [\n{body}\n]}}\n' if runs else f'{head}, "runs": []}}\n'


def write_results(path: str | os.PathLike[str], results: ResultSet) -> None:
    atomic.write_text_atomic(path, dumps_results(results))


def baseline_file(directory: str | os.PathLike[str], device_class: str, workload: str,
                  variant: str = "") -> Path:
    """Where a baseline directory keeps the results of one hardware class and workload (and
    measurement variant, e.g. ``sync``: see
    :func:`pytest_opperf.core.identity.baseline_variant`)."""
    return Path(directory) / f"{device_class}-{workload}{'-' + variant if variant else ''}.json"
