"""Run results and the results JSON (schema ``opperf/1``): records, files, machine and commit.

A :class:`ResultSet` is what a session measured; it is written with :func:`write_results`
(atomically: a temp file in the same directory, fsync, rename, so a killed writer never leaves a
truncated file where a baseline was) and read back with :func:`read_results`, which refuses unknown
schemas and malformed files with a one-line :class:`ResultsError`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import re
import secrets
import stat
import subprocess
import sys
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from .stats import after_warmup
from .stattree import StatResult, StatTree, StatTreeError
from .workcount import COUNTERS, WorkCounts

__all__ = ["KINDS", "SCHEMA", "ResultSet", "ResultsError", "RunResult", "StatResult",
           "baseline_file", "commit_info", "dumps_results", "hardware_facts", "is_sha",
           "json_problem", "machine_info", "read_results", "same_hardware", "utf8_text",
           "write_json_atomic", "write_results", "write_text_atomic"]

SCHEMA = "opperf/1"
KINDS = ("e2e", "op", "overhead")
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

    def steady_python_shares(self) -> list[float]:
        """The step shares after warm-up, what the gate decides on (empty if unknown)."""
        shares = self.step_python_shares()
        return after_warmup(shares) if shares and all(w > 0 for w in self.step_ms) else []

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

    @classmethod
    def from_dict(cls, data: Any, source: str = "<data>") -> ResultSet:
        """Validate and load a results document (raises :class:`ResultsError`)."""
        return _load(data, source)


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


# --- reading -------------------------------------------------------------------

MAX_COUNT = 2 ** 63 - 1  # counts are integers in [0, 2**63)
MAX_TIME = 1e12  # times, in ms or s: over 30 years either way
MAX_NUMBER = 1e30  # the magnitude of any other number (rates, flops, bytes, the gate's values)
# the keys of a run's work object and the counters of its stats this version reads
_WORK_KEYS = frozenset(("steps", "pass_s", "versions", "stats", "varies", "instructions",
                        "instructions_cpu"))


def _need(cond: bool, source: str, what: str) -> None:
    if not cond:
        raise ResultsError(f"{source}: malformed results file: {what}")


def shown(v: Any) -> str:
    """``v`` for a one-line message: a long integer by its first and last digits and length."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10 ** 24:
        try:
            text = str(abs(v))
        except ValueError:  # more digits than Python converts to text
            return f"an integer of about {int(abs(v).bit_length() * 0.30103) + 1} digits"
        return f"{'-' if v < 0 else ''}{text[:6]}...{text[-3:]} ({len(text)} digits)"
    return f"{v!r:.60}"


def _is_num(v: Any) -> bool:
    """A finite number a float can hold (JSON's 1e999 and 400-digit integers are not)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _number(v: Any) -> bool:
    """An int, or a finite float (JSON's 1e999 is not); the bounds are checked apart, by name."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return isinstance(v, int) or math.isfinite(v)


def _num_list(v: Any) -> bool:
    return isinstance(v, list) and all(_number(x) for x in v)


def _count(v: Any) -> bool:
    """A whole number >= 0 (an int, or a float with no fraction as older writers gave)."""
    return _number(v) and v >= 0 and (isinstance(v, int) or v.is_integer())


def _within(v: Any, what: str, source: str, bound: float = MAX_TIME, unit: str = "") -> None:
    """A number ``v`` (checked by the caller) is within its bound: times at most
    :data:`MAX_TIME`, counts below 2**63, any other number of magnitude :data:`MAX_NUMBER`."""
    if bound == MAX_COUNT:
        _need(v <= MAX_COUNT, source, f"{what} must be below 2**63, got {shown(v)}")
    elif bound == MAX_NUMBER:
        _need(-MAX_NUMBER <= v <= MAX_NUMBER, source,
              f"{what} must be within +-1e30, got {shown(v)}")
    else:
        _need(v <= bound, source, f"{what} must be at most {bound:g}{unit}, got {shown(v)}")


def _within_all(values: Any, what: str, source: str, bound: float, unit: str = "") -> None:
    """Every item of a list (or array) of numbers >= 0 is at most ``bound``."""
    if values is not None and len(values) and max(values) > bound:
        i = next(i for i, x in enumerate(values) if x > bound)
        _within(values[i], f"{what}[{i}]", source, bound, unit)


def _float(v: float) -> float:
    """``v`` as a float; 0 and 1, which most runs give for their shares, as one object each."""
    f = float(v)
    return _ZERO if f == 0 else _ONE if f == 1 else f


_ZERO, _ONE = 0.0, 1.0


def _load_stat(d: Any, where: str, source: str, memo: dict[str, str]) -> StatResult:
    _need(isinstance(d, dict), source, f"{where} is not an object")
    _need(isinstance(d.get("name"), str), source, f"{where}.name is missing or not a string")
    where = f"{where} ({d['name']!r:.80})"
    _need(d.get("parent") is None or isinstance(d["parent"], str), source,
          f"{where}.parent is not a string or null")
    _need(isinstance(d.get("count"), int) and not isinstance(d["count"], bool), source,
          f"{where}.count is missing or not an integer")
    _need(_count(d["count"]), source,
          f"{where}.count must be an integer >= 0, got {shown(d['count'])}")
    _within(d["count"], f"{where}.count", source, MAX_COUNT)
    for key in ("total_ms", "avg_ms", "min_ms", "max_ms"):
        _need(_number(d.get(key)), source, f"{where}.{key} is missing or not a finite number")
        _need(d[key] >= 0, source, f"{where}.{key} must not be negative, got {shown(d[key])}")
        _within(d[key], f"{where}.{key}", source, MAX_TIME, " ms")
    samples = d.get("samples_ms")
    if isinstance(samples, array):  # packed while parsing (_object): floats, finite ones checked
        _need(not samples or (min(samples) >= 0 and max(samples) < math.inf), source,
              f"{where}.samples_ms is not a list of finite numbers >= 0")
    else:
        _need(samples is None or (_num_list(samples) and all(x >= 0 for x in samples)), source,
              f"{where}.samples_ms is not a list of finite numbers >= 0")
        samples = array("d", samples) if samples is not None else None
    _within_all(samples, f"{where}.samples_ms", source, MAX_TIME, " ms")
    for key in ("flops", "bytes", "host_ms"):
        value = d.get(key)
        _need(value is None or (_number(value) and value >= 0), source,
              f"{where}.{key} is not a finite number >= 0")
        if value is not None:
            _within(value, f"{where}.{key}", source, *((MAX_TIME, " ms") if key == "host_ms"
                                                      else (MAX_NUMBER,)))
    name, parent = d["name"], d.get("parent")
    return StatResult(
        name=memo.setdefault(name, name), parent=memo.setdefault(parent, parent)
        if parent is not None else None, count=d["count"], total_ms=_float(d["total_ms"]),
        avg_ms=_float(d["avg_ms"]), min_ms=_float(d["min_ms"]), max_ms=_float(d["max_ms"]),
        samples_ms=samples,
        kernel=bool(d.get("kernel", False)), clock=_interned(str(d.get("clock", "host")), memo),
        flops=d.get("flops"), bytes=d.get("bytes"),
        host_ms=_float(d["host_ms"]) if d.get("host_ms") is not None else None)


def _interned(text: str, memo: dict[str, str]) -> str:
    """One string object for the names and values every run repeats (kind, device, stat names),
    so that a file of many runs holds each once."""
    return memo.setdefault(text, text)


def _load_work(work: Any, where: str, source: str) -> WorkCounts:
    """A run's ``work`` object: keys and counters this version does not know are ignored (objects
    are open), the counts bounded."""
    if isinstance(work, dict):
        work = {k: v for k, v in work.items() if k in _WORK_KEYS}
        stats = work.get("stats")
        if isinstance(stats, dict):
            known = {name: {c: n for c, n in counts.items() if c in COUNTERS}
                     if isinstance(counts, dict) and counts else counts
                     for name, counts in stats.items()}
            # a stat whose counters are all unknown has no count this version reads
            work["stats"] = {name: c for name, c in known.items() if c != {} or not stats[name]}
        # the bounds first: WorkCounts takes any int, and a float of a 400-digit one overflows
        for key, bound, unit in (("steps", MAX_COUNT, ""), ("pass_s", MAX_TIME, " s"),
                                 ("instructions", MAX_COUNT, "")):
            if _number(work.get(key)) and work[key] >= 0:
                _within(work[key], f"{where}: work: {key}", source, bound, unit)
        for name, counts in work.get("stats", {}).items() if isinstance(stats, dict) else ():
            for counter, n in counts.items() if isinstance(counts, dict) else ():
                if _number(n) and n >= 0:
                    _within(n, f"{where}: work: stats[{name!r:.80}][{counter!r}]", source,
                            MAX_COUNT)
    try:
        return WorkCounts.from_dict(work, where)
    except ValueError as exc:
        raise ResultsError(f"{source}: malformed results file: {exc}") from None


def _load_run(d: Any, i: int, source: str, memo: dict[str, str] | None = None) -> RunResult:
    memo = {} if memo is None else memo
    where = f"runs[{i}]"
    _need(isinstance(d, dict), source, f"{where} is not an object")
    _need(isinstance(d.get("id"), str), source, f"{where}.id is missing or not a string")
    where = f"run {d['id']!r:.200}"
    _need(d.get("kind") in KINDS, source,
          f"{where}: kind must be one of {'|'.join(KINDS)}, got {shown(d.get('kind'))}")
    for key in ("wall_s", "examples_per_sec", "sec_per_batch", "python_share"):
        _need(_number(d.get(key)), source, f"{where}: {key} is missing or not a finite number")
        _need(d[key] >= 0, source, f"{where}: {key} must not be negative, got {shown(d[key])}")
    _need(d["python_share"] <= 1, source,
          f"{where}: python_share is a share and must be in [0, 1], got {shown(d['python_share'])}")
    _within(d["wall_s"], f"{where}: wall_s", source, MAX_TIME, " s")
    _within(d["sec_per_batch"], f"{where}: sec_per_batch", source, MAX_TIME, " s")
    _within(d["examples_per_sec"], f"{where}: examples_per_sec", source, MAX_NUMBER)
    for key in ("examples", "batches"):
        _need(_number(d.get(key)), source, f"{where}: {key} is missing or not a finite number")
        _need(_count(d[key]), source,
              f"{where}: {key} must be a whole number >= 0, got {shown(d[key])}")
        _within(d[key], f"{where}: {key}", source, MAX_COUNT)
    _need(isinstance(d.get("stats"), list), source, f"{where}: stats is missing or not a list")
    counts = d.get("counts", {})
    whole = isinstance(counts, dict) and all(
        isinstance(v, int) and not isinstance(v, bool) and _count(v) for v in counts.values())
    _need(whole, source, f"{where}: counts is not an object of integers >= 0")
    for name, n in counts.items():
        _within(n, f"{where}: counts[{name!r:.80}]", source, MAX_COUNT)
    config = d.get("config", {})
    _need(isinstance(config, dict), source, f"{where}: config is not an object")
    for key in ("step_ms", "step_examples"):
        values = d.get(key, [])
        _need(_num_list(values) and all(x >= 0 for x in values), source,
              f"{where}: {key} is not a list of finite numbers >= 0")
    _need(all(_count(x) for x in d.get("step_examples", [])), source,
          f"{where}: step_examples is not a list of whole numbers")
    _within_all(d.get("step_ms"), f"{where}: step_ms", source, MAX_TIME, " ms")
    _within_all(d.get("step_examples"), f"{where}: step_examples", source, MAX_COUNT)
    notes = d.get("notes", [])
    _need(isinstance(notes, list) and all(isinstance(n, str) for n in notes), source,
          f"{where}: notes is not a list of strings")
    try:
        stats = StatTree(_load_stat(s, f"{where}: stats[{j}]", source, memo)
                         for j, s in enumerate(d["stats"]))
    except StatTreeError as exc:
        raise ResultsError(f"{source}: malformed results file: {where}: {exc}") from None
    keys = ("framework_share", "kernel_share", "executor_ms", "kernel_ms")
    optional = {k: d[k] for k in keys if _number(d.get(k))}
    for key, value in optional.items():
        if key.endswith("_ms"):
            _need(value >= -MAX_TIME, source,
                  f"{where}: {key} must be at least -1e+12 ms, got {shown(value)}")
            _within(value, f"{where}: {key}", source, MAX_TIME, " ms")
        else:
            _within(value, f"{where}: {key}", source, MAX_NUMBER)
    work = _load_work(d["work"], where, source) if d.get("work") is not None else None
    executor_stat = d.get("executor_stat")
    return RunResult(
        id=d["id"], kind=_interned(d["kind"], memo), config=config,
        device=_interned(str(d.get("device", "")), memo),
        timing=_interned(str(d.get("timing", "host")), memo), wall_s=_float(d["wall_s"]),
        examples=int(d["examples"]), batches=int(d["batches"]),
        examples_per_sec=_float(d["examples_per_sec"]), sec_per_batch=_float(d["sec_per_batch"]),
        python_share=_float(d["python_share"]), stats=stats,
        counts={_interned(k, memo): v for k, v in counts.items()},
        executor_stat=_interned(executor_stat, memo) if isinstance(executor_stat, str) else None,
        step_ms=[float(x) for x in d.get("step_ms", [])],
        step_examples=[int(x) for x in d.get("step_examples", [])], notes=list(notes),
        trace=d.get("trace") if isinstance(d.get("trace"), dict) else None, work=work,
        **{k: _float(v) for k, v in optional.items()})


def _check_gate(gate: dict[str, Any], source: str) -> None:
    """The stored verdict, as ``show`` renders it."""
    _need(isinstance(gate.get("passed", False), bool), source, "gate.passed is not a boolean")
    violations = gate.get("violations", [])
    _need(isinstance(violations, list) and all(isinstance(v, dict) for v in violations), source,
          "gate.violations is not a list of objects")
    for i, v in enumerate(violations):
        for key in ("value", "limit", "baseline"):
            _need(v.get(key) is None or _number(v[key]), source,
                  f"gate.violations[{i}].{key} is not a number")
            if v.get(key) is not None:
                _within(v[key], f"gate.violations[{i}].{key}", source, MAX_NUMBER)
    for key in ("warnings", "notes"):
        values = gate.get(key, [])
        _need(isinstance(values, list) and all(isinstance(x, str) for x in values), source,
              f"gate.{key} is not a list of strings")
    for key in ("checks", "undecided"):
        n = gate.get(key, 0)
        _need(isinstance(n, int) and not isinstance(n, bool) and _count(n), source,
              f"gate.{key} is not an integer >= 0")
        _within(n, f"gate.{key}", source, MAX_COUNT)
    for key in ("baseline", "thresholds", "incomplete"):
        _need(gate.get(key) is None or isinstance(gate[key], str), source,
              f"gate.{key} is not a string or null")


def _check_commit(commit: dict[str, Any], source: str) -> None:
    """The commit as git described it: its sha goes to git (``history import``), so it must be
    hexadecimal; branch a string, dirty a boolean (each may be null)."""
    sha = commit.get("sha")
    _need(sha is None or is_sha(sha), source,
          f"commit.sha must be a hexadecimal commit id, got {sha!r:.60}")
    _need(commit.get("branch") is None or isinstance(commit["branch"], str), source,
          "commit.branch is not a string or null")
    _need(commit.get("dirty") is None or isinstance(commit["dirty"], bool), source,
          "commit.dirty is not a boolean or null")


def _check_schema(data: Mapping[str, Any], source: str) -> None:
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ResultsError(f"{source}: unknown results schema {shown(schema)} "
                           f"(this version reads {SCHEMA!r})")


def _unique_ids(runs: list[RunResult], source: str) -> None:
    seen: set[str] = set()
    for r in runs:
        _need(r.id not in seen, source,
              f"run {r.id!r:.200} appears twice (run ids must be unique)")
        seen.add(r.id)


def _finish(data: Mapping[str, Any], runs: list[RunResult], source: str) -> ResultSet:
    """The result set of a document's top-level members other than ``runs`` and its runs."""
    _unique_ids(runs, source)
    machine = data.get("machine") or {}
    _need(isinstance(machine, dict), source, "machine is not an object")
    commit = data.get("commit")
    _need(commit is None or isinstance(commit, dict), source, "commit is not an object or null")
    if commit is not None:
        _check_commit(commit, source)
    gate = data.get("gate")
    _need(gate is None or isinstance(gate, dict), source, "gate is not an object")
    if gate is not None:
        _check_gate(gate, source)
    session = data.get("session") or {}
    _need(isinstance(session, dict), source, "session is not an object")
    compare = data.get("compare")
    _need(compare is None or isinstance(compare, dict), source, "compare is not an object")
    created = str(data.get("created", ""))
    return ResultSet(runs=runs, machine=machine, commit=commit, created=created, session=session,
                     gate=gate, compare=compare)


def _load(data: Any, source: str) -> ResultSet:
    _need(isinstance(data, dict), source, "the top level is not an object")
    _check_schema(data, source)
    _need(isinstance(data.get("runs"), list), source, "runs is missing or not a list")
    memo: dict[str, str] = {}
    return _finish(data, [_load_run(r, i, source, memo) for i, r in enumerate(data["runs"])],
                   source)


def read_text(path: str | os.PathLike[str], error: type[Exception], expected: str) -> str:
    """A text file's contents; any problem is ``error`` with one line naming the file.

    Only regular files are read (a FIFO would block forever), and a broken or
    looping symbolic link is said to be one."""
    if os.path.islink(path) and not os.path.exists(path):
        try:
            os.stat(path)
        except OSError as exc:
            raise error(f"{path}: is a broken symbolic link "
                        f"(to {os.readlink(path)!r}: {exc.strerror})") from None
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc}") from None
    if stat.S_ISDIR(mode):
        raise error(f"{path}: is a directory, expected {expected}")
    if not stat.S_ISREG(mode):
        raise error(f"{path}: is not a regular file (a FIFO, device or socket), "
                    f"expected {expected}")
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, expected {expected}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read: {exc}") from None


def read_results(path: str | os.PathLike[str]) -> ResultSet:
    """Read a results file; any problem is a :class:`ResultsError` naming the file.

    The document is parsed one run at a time, each run's parsed object dropped once its
    :class:`RunResult` is built: what stays is the records, about the file's size (a
    file of many small runs a few times its size), never the records, the parsed objects and
    the text all at once."""
    source = str(path)
    text = read_text(path, ResultsError, "a results file")
    return _Document(text, source).read()


class _Duplicate(Exception):
    """A key that appears twice in one object (raised while parsing; located afterwards)."""


class _Constant(ValueError):
    """NaN, Infinity or -Infinity: Python's json takes them, JSON has no such numbers."""


def _no_constant(name: str) -> Any:
    raise _Constant(f"{name} is not a number JSON allows")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A parsed JSON object: a key given twice is refused (json would keep the last silently:
    ``"passed": false, "passed": true`` would read as passed). A stat's samples are packed as an
    ``array('d')`` (8 bytes a sample, where a list of floats takes 32), so a file's samples never
    exist as lists all at once. Only lists of floats are packed; anything else is left for the
    reader's checks to name."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    samples = obj.get("samples_ms")
    if type(samples) is list and all(type(x) is float for x in samples):
        obj["samples_ms"] = array("d", samples)
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_no_constant)
_SPACE = re.compile(r"[ \t\n\r]*")
# the tokens of JSON text for the second look at a value that failed (_locate)
_TOKEN = re.compile(r'[ \t\n\r]*(?:("[^"\\]*(?:\\.[^"\\]*)*")|([{}\[\]:,])|([^ \t\n\r{}\[\]:,"]+))',
                    re.DOTALL)
_MAX_DIGITS = 4300  # Python's limit for converting digits to an int (sys.get_int_max_str_digits)


def _position(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line} column {pos - text.rfind(chr(10), 0, pos)}"


def _path(base: str, stack: list[list[Any]]) -> str:
    parts = [base]
    for _, _, at in stack[:-1]:
        if isinstance(at, int):
            parts.append(f"[{at}]")
        elif at is not None:
            parts.append(f".{at}" if at.isidentifier() else f"[{at!r:.60}]")
    return "".join(parts).lstrip(".") or "the top level"


def _locate(text: str, start: int, base: str) -> str | None:
    """Where in the JSON value at ``start`` the parser's refusal lies, read a second time token
    by token (only after a refusal: the first read is json's, in C): the first key given twice
    in its object, NaN or Infinity, or an integer of more digits than Python reads. ``base``
    names the value (``runs[3]``). None when none is found."""
    stack: list[list[Any]] = []  # [is object, keys seen, the key or index now]
    key_next = False
    for m in _TOKEN.finditer(text, start):
        string, mark, bare = m.groups()
        if mark is not None:
            if mark in "{[":
                stack.append([mark == "{", set(), None if mark == "{" else 0])
                key_next = mark == "{"
            elif mark in "}]":
                stack.pop()
                if not stack:
                    return None
            elif mark == ",":
                top = stack[-1] if stack else None
                if top is not None and top[0]:
                    key_next = True
                elif top is not None:
                    top[2] += 1
            continue
        pos = m.start(1 if string is not None else 3)
        if string is not None:
            if stack and stack[-1][0] and key_next:
                key = json.loads(string)
                top = stack[-1]
                if key in top[1]:
                    where = _path(base, stack)
                    return (f"malformed results file: the key {key!r:.60} appears twice in "
                            f"{where} at {_position(text, pos)} (a key may appear once in an "
                            "object)")
                top[1].add(key)
                top[2] = key
                key_next = False
        elif bare in ("NaN", "Infinity", "-Infinity"):
            return f"not valid JSON: {bare} is not a number JSON allows at {_position(text, pos)}"
        elif len(bare.lstrip("-")) > _MAX_DIGITS and bare.lstrip("-").isdigit():
            return (f"not valid JSON: an integer of {len(bare.lstrip('-'))} digits at "
                    f"{_position(text, pos)} (Python reads at most {_MAX_DIGITS})")
        if not stack:
            return None
    return None


class _Document:
    """A results document parsed member by member, and its ``runs`` one run at a time."""

    def __init__(self, text: str, source: str) -> None:
        self.text, self.source = text, source
        self.memo: dict[str, str] = {}

    def fail(self, message: str, pos: int) -> ResultsError:
        return ResultsError(f"{self.source}: not valid JSON: {message} at "
                            f"{_position(self.text, pos)}")

    def space(self, pos: int) -> int:
        return _SPACE.match(self.text, pos).end()  # type: ignore[union-attr]

    def value(self, pos: int, where: str) -> tuple[Any, int]:
        """The JSON value at ``pos`` and the position after it."""
        try:
            return _DECODER.raw_decode(self.text, pos)
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{self.source}: not valid JSON: {exc.msg} at line {exc.lineno} "
                               f"column {exc.colno}") from None
        except RecursionError:
            raise ResultsError(f"{self.source}: not a results file: nested too deeply") from None
        except (_Duplicate, ValueError) as exc:  # a key twice, NaN, too many digits
            found = _locate(self.text, pos, where)
            if found is None:
                found = (f"malformed results file: the key {str(exc)!r:.60} appears twice in "
                         f"{where}" if isinstance(exc, _Duplicate) else f"not valid JSON: {exc}")
            raise ResultsError(f"{self.source}: {found}") from None

    def read(self) -> ResultSet:
        text = self.text
        pos = self.space(0)
        if not text.startswith("{", pos):  # not an object: the whole document is refused
            return _load(loads_strict(text, self.source), self.source)
        head: dict[str, Any] = {}
        runs: list[RunResult] | None = None
        refusal: ResultsError | None = None  # a bad run, raised once the schema is known good
        pos = self.space(pos + 1)
        if text.startswith("}", pos):
            pos += 1
        else:
            while True:
                key, pos = self.key(pos, head, runs is not None)
                if key == "schema":
                    head[key], pos = self.value(pos, key)
                    _check_schema(head, self.source)
                elif key == "runs" and text.startswith("[", pos):
                    runs, pos, refusal = self.runs(pos, "schema" in head)
                else:
                    head[key], pos = self.value(pos, key if key.isidentifier() else repr(key))
                pos = self.space(pos)
                if text.startswith(",", pos):
                    pos = self.space(pos + 1)
                elif text.startswith("}", pos):
                    pos += 1
                    break
                else:
                    raise self.fail("Expecting ',' delimiter", pos)
        end = self.space(pos)
        if end != len(text):
            raise self.fail("Extra data", end)
        _check_schema(head, self.source)
        if refusal is not None:
            raise refusal
        _need(runs is not None or isinstance(head.get("runs"), list), self.source,
              "runs is missing or not a list")
        return _finish(head, runs if runs is not None else [], self.source)

    def key(self, pos: int, head: dict[str, Any], runs_read: bool) -> tuple[str, int]:
        """A top-level member's key at ``pos`` (refused when given before) and where its value
        starts."""
        text = self.text
        if not text.startswith('"', pos):
            raise self.fail("Expecting property name enclosed in double quotes", pos)
        try:
            key, end = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{self.source}: not valid JSON: {exc.msg} at line {exc.lineno} "
                               f"column {exc.colno}") from None
        if key in head or (key == "runs" and runs_read):
            raise ResultsError(
                f"{self.source}: malformed results file: the key {key!r:.60} appears twice in "
                f"the top level at {_position(text, pos)} (a key may appear once in an object)")
        end = self.space(end)
        if not text.startswith(":", end):
            raise self.fail("Expecting ':' delimiter", end)
        return key, self.space(end + 1)

    def runs(self, pos: int, schema_known: bool) -> tuple[list[RunResult], int,
                                                          ResultsError | None]:
        """The runs of the array at ``pos``, each built as soon as it is parsed. A bad run's
        refusal is returned, not raised, while the schema is still unknown (a document of
        another schema is refused for that first); later runs are then parsed, not built."""
        text, runs = self.text, list[RunResult]()
        refusal: ResultsError | None = None
        pos = self.space(pos + 1)
        if text.startswith("]", pos):
            return runs, pos + 1, None
        i = 0
        while True:
            run, pos = self.value(pos, f"runs[{i}]")
            if refusal is None:
                try:
                    runs.append(_load_run(run, i, self.source, self.memo))
                except ResultsError as exc:
                    if schema_known:
                        raise
                    refusal = exc
            del run
            i += 1
            pos = self.space(pos)
            if text.startswith(",", pos):
                pos = self.space(pos + 1)
                continue
            if not text.startswith("]", pos):
                raise self.fail("Expecting ',' delimiter", pos)
            return runs, pos + 1, refusal


def loads_strict(text: str, source: str) -> Any:
    """Parse a results document: NaN and Infinity (which Python's json accepts) are errors, as
    are keys given twice in an object and documents nested too deeply to check (each named
    with its line). Samples are packed (:func:`_object`)."""
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} "
                           f"column {exc.colno}") from None
    except RecursionError:
        raise ResultsError(f"{source}: not a results file: nested too deeply") from None
    except (_Duplicate, ValueError) as exc:  # a key twice, NaN/Infinity, too many digits
        found = _locate(text, _SPACE.match(text).end(), "")  # type: ignore[union-attr]
        if found is None:
            found = (f"malformed results file: the key {str(exc)!r:.60} appears twice"
                     if isinstance(exc, _Duplicate) else f"not valid JSON: {exc}")
        raise ResultsError(f"{source}: {found}") from None


# --- writing -------------------------------------------------------------------


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` so that readers see the old file or the new one.

    The data goes to a temp file in the same directory (so the rename cannot
    cross file systems), is fsynced, and replaces ``path`` in one rename; on
    any error the temp file is removed and ``path`` is untouched.
    """
    write_text_atomic(path, json.dumps(obj, allow_nan=False) + "\n")


def _temp_beside(target: Path) -> tuple[int, str]:
    """A new temp file next to ``target``, created with mode 0o666 so that the
    umask applies as for any new file (mkstemp's would stay private, 0o600)."""
    while True:
        tmp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), str(tmp)
        except FileExistsError:
            continue


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process
        return True
    return True


def remove_stale_temps(target: Path) -> int:
    """Remove the temp files that writers of ``target`` killed mid-write left
    behind (named by a process that no longer runs); returns how many."""
    prefix = f".{target.name}."
    try:
        names = os.listdir(target.parent)
    except OSError:
        return 0
    removed = 0
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        parts = name[len(prefix):-len(".tmp")].split(".")
        pid = int(parts[0]) if len(parts) == 2 and parts[0].isdigit() else None
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        try:
            os.unlink(target.parent / name)
            removed += 1
        except OSError:
            pass
    return removed


def utf8_text(text: str) -> str:
    """``text`` as UTF-8 can encode it. Under a file-system encoding that is not
    UTF-8 (``LC_ALL=C``) Python decodes a non-ASCII file name, and so a test's node
    id, with surrogate escapes (``test_\\udcc3\\udca9.py``), which no UTF-8 writer
    takes: their bytes are decoded as UTF-8 again (``test_é.py``); bytes that are no
    UTF-8, and lone surrogates, become ``\\x``/``\\u`` escapes. Text without
    surrogates is returned as it is."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that escapes no byte (from "\\ud800" in JSON)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`write_json_atomic`).

    A symbolic link is written through: its target is replaced and the link stays. A path that is
    not a regular file (``/dev/null``, a FIFO) is written to in place, as a shell redirection would,
    never replaced by a file. Temp files of killed earlier writers are removed first. Text UTF-8
    cannot encode (file names under a non-UTF-8 locale) is written as :func:`utf8_text` gives it."""
    text = utf8_text(text)
    target = Path(path)
    if os.path.islink(target):
        target = Path(os.path.realpath(target))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        return
    remove_stale_temps(target)
    fd, tmp = _temp_beside(target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def dumps_results(results: ResultSet) -> str:
    """The results document with one run per line: diffs of a baseline in git show
    which runs changed, and the C encoder stays in use (``indent`` would not)."""
    doc = results.to_dict()
    runs = doc.pop("runs")
    head = json.dumps(doc, allow_nan=False)[:-1]
    body = ",\n".join(json.dumps(r, allow_nan=False) for r in runs)
    return f'{head}, "runs": [\n{body}\n]}}\n' if runs else f'{head}, "runs": []}}\n'


def write_results(path: str | os.PathLike[str], results: ResultSet) -> None:
    write_text_atomic(path, dumps_results(results))


def baseline_file(directory: str | os.PathLike[str], device_class: str, workload: str,
                  variant: str = "") -> Path:
    """Where a baseline directory keeps the results of one hardware class and workload (and
    measurement variant, e.g. ``sync``: see :func:`pytest_opperf.identity.baseline_variant`)."""
    return Path(directory) / f"{device_class}-{workload}{'-' + variant if variant else ''}.json"


# --- machine and commit ----------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str, *distributions: str) -> str | None:
    """The installed version of ``module``, without importing it."""
    loaded = sys.modules.get(module)
    if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
        return loaded.__version__
    if importlib.util.find_spec(module) is None:  # cheap; metadata lookups scan every path entry
        return None
    for name in distributions or (module,):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _blas() -> str | None:
    """numpy's BLAS, read only when numpy is already imported (never imported for this)."""
    np = sys.modules.get("numpy")
    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]  # type: ignore[union-attr]
        return f"{blas.get('name')} {blas.get('version', '')}".strip()
    except Exception:  # no numpy, or an older numpy without CONFIG
        return None


def machine_info(device: Any = None) -> dict[str, Any]:
    """Facts about this machine for the results file (``device`` is a DeviceInfo)."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "system": platform.system(),
        "python": platform.python_version(), "numpy": _version("numpy"),
        "cupy": _version("cupy", "cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x", "cupy"),
        "blas": _blas(), "gpu": None}
    if device is not None:
        info["device"] = device.name
        info["device_class"] = device.device_class
        if device.is_gpu:
            info["gpu"] = {"model": device.gpu_model, "driver": device.driver, "cuda": device.cuda}
    return info


def _git(args: Iterable[str], cwd: str | os.PathLike[str]) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def commit_info(cwd: str | os.PathLike[str] = ".") -> dict[str, Any] | None:
    """The git commit of ``cwd``: sha, dirty flag (tracked files), branch; ``None`` without git."""
    # one subprocess: porcelain v2 headers carry the sha and branch, the other lines are changes
    out = _git(["status", "--porcelain=v2", "--branch", "--untracked-files=no"], cwd)
    if out is None:
        return None
    sha = branch = None
    dirty = False
    for line in out.splitlines():
        if line.startswith("# branch.oid "):
            sha = line.split()[2]
        elif line.startswith("# branch.head "):
            branch = line.split(maxsplit=2)[2]
        elif line and not line.startswith("#"):
            dirty = True
    if sha is None or sha == "(initial)":
        return None
    return {"sha": sha, "dirty": dirty, "branch": None if branch == "(detached)" else branch}


def hardware_facts(machine: Mapping[str, Any]) -> dict[str, Any]:
    gpu = machine.get("gpu")
    facts = {"device_class": machine.get("device_class"), "cpu": machine.get("cpu"),
             "gpu": gpu.get("model") if isinstance(gpu, dict) else None}
    # A GPU's driver and clock settings change its speed as much as another model does.
    from .gpu_env import settings_of

    facts["gpu driver"] = gpu.get("driver") if isinstance(gpu, dict) else None
    facts.update(settings_of(machine))
    return facts


def same_hardware(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """``None`` when two machine records describe the same hardware, else how they differ
    (a fact missing from either record is not a difference)."""
    ha, hb = hardware_facts(a), hardware_facts(b)
    diffs = [f"{key} {ha[key]!r} vs {hb[key]!r}" for key in ha
             if ha[key] is not None and hb[key] is not None and ha[key] != hb[key]]
    return "; ".join(diffs) or None
