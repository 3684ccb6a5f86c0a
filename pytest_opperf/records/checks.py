"""A results document checked against the schema and built into records, one run at a time.

Every number is bounded (counts below 2**63, times at most 1e12 ms or s, others at most 1e30),
every list and object typed; unknown keys of open objects (``work`` included) are ignored. Each
problem is one :class:`~pytest_opperf.results.ResultsError` line naming the file and the run.
Strings every run repeats (kinds, devices, stat names) are interned, and equal op counts and empty
lists are one read-only object (:mod:`.readonly`), so that a file of many runs holds each once.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from typing import Any

from ..results import (
    BY_RULE,
    RUN_KINDS,
    SCHEMA,
    ResultsError,
    ResultSet,
    RunResult,
    is_sha,
)
from ..stattree import StatResult, StatTree, StatTreeError
from ..workcounts.workcount import COUNTERS, WorkCounts
from .readonly import shared_dict, shared_list

__all__ = ["MAX_COUNT", "MAX_NUMBER", "MAX_TIME", "check_schema", "finish", "is_num",
           "results_from_dict", "load_run", "need", "shown"]

MAX_COUNT = 2 ** 63 - 1  # counts are integers in [0, 2**63)
MAX_TIME = 1e12  # times, in ms or s: over 30 years either way
MAX_NUMBER = 1e30  # the magnitude of any other number (rates, flops, bytes, the gate's values)
# the keys of a run's work object and the counters of its stats this version reads
_WORK_KEYS = frozenset(("steps", "pass_s", "versions", "stats", "varies", "instructions",
                        "instructions_cpu", "functions"))


def need(cond: bool, source: str, what: str) -> None:
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


def is_num(v: Any) -> bool:
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
        need(v <= MAX_COUNT, source, f"{what} must be below 2**63, got {shown(v)}")
    elif bound == MAX_NUMBER:
        need(-MAX_NUMBER <= v <= MAX_NUMBER, source,
              f"{what} must be within +-1e30, got {shown(v)}")
    else:
        need(v <= bound, source, f"{what} must be at most {bound:g}{unit}, got {shown(v)}")


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


def _load_stat(d: Any, where: str, source: str, memo: dict[Any, Any]) -> StatResult:
    need(isinstance(d, dict), source, f"{where} is not an object")
    need(isinstance(d.get("name"), str), source, f"{where}.name is missing or not a string")
    where = f"{where} ({d['name']!r:.80})"
    need(d.get("parent") is None or isinstance(d["parent"], str), source,
          f"{where}.parent is not a string or null")
    need(isinstance(d.get("count"), int) and not isinstance(d["count"], bool), source,
          f"{where}.count is missing or not an integer")
    need(_count(d["count"]), source,
          f"{where}.count must be an integer >= 0, got {shown(d['count'])}")
    _within(d["count"], f"{where}.count", source, MAX_COUNT)
    for key in ("total_ms", "avg_ms", "min_ms", "max_ms"):
        need(_number(d.get(key)), source, f"{where}.{key} is missing or not a finite number")
        need(d[key] >= 0, source, f"{where}.{key} must not be negative, got {shown(d[key])}")
        _within(d[key], f"{where}.{key}", source, MAX_TIME, " ms")
    samples = d.get("samples_ms")
    if isinstance(samples, array):  # packed while parsing (_object): floats, finite ones checked
        need(not samples or (min(samples) >= 0 and max(samples) < math.inf), source,
              f"{where}.samples_ms is not a list of finite numbers >= 0")
    else:
        need(samples is None or (_num_list(samples) and all(x >= 0 for x in samples)), source,
              f"{where}.samples_ms is not a list of finite numbers >= 0")
        samples = array("d", samples) if samples is not None else None
    _within_all(samples, f"{where}.samples_ms", source, MAX_TIME, " ms")
    for key in ("flops", "bytes", "host_ms"):
        value = d.get(key)
        need(value is None or (_number(value) and value >= 0), source,
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


def _interned(text: str, memo: dict[Any, Any]) -> str:
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


def load_run(d: Any, i: int, source: str, memo: dict[Any, Any] | None = None) -> RunResult:
    memo = {} if memo is None else memo
    where = f"runs[{i}]"
    need(isinstance(d, dict), source, f"{where} is not an object")
    need(isinstance(d.get("id"), str), source, f"{where}.id is missing or not a string")
    where = f"run {d['id']!r:.200}"
    need(d.get("kind") in RUN_KINDS, source,
          f"{where}: kind must be one of {'|'.join(RUN_KINDS)}, got {shown(d.get('kind'))}")
    for key in ("wall_s", "examples_per_sec", "sec_per_batch", "python_share"):
        need(_number(d.get(key)), source, f"{where}: {key} is missing or not a finite number")
        need(d[key] >= 0, source, f"{where}: {key} must not be negative, got {shown(d[key])}")
    need(d["python_share"] <= 1, source,
          f"{where}: python_share is a share and must be in [0, 1], got {shown(d['python_share'])}")
    _within(d["wall_s"], f"{where}: wall_s", source, MAX_TIME, " s")
    _within(d["sec_per_batch"], f"{where}: sec_per_batch", source, MAX_TIME, " s")
    _within(d["examples_per_sec"], f"{where}: examples_per_sec", source, MAX_NUMBER)
    for key in ("examples", "batches"):
        need(_number(d.get(key)), source, f"{where}: {key} is missing or not a finite number")
        need(_count(d[key]), source,
              f"{where}: {key} must be a whole number >= 0, got {shown(d[key])}")
        _within(d[key], f"{where}: {key}", source, MAX_COUNT)
    need(isinstance(d.get("stats"), list), source, f"{where}: stats is missing or not a list")
    counts = d.get("counts", {})
    whole = isinstance(counts, dict) and all(
        isinstance(v, int) and not isinstance(v, bool) and _count(v) for v in counts.values())
    need(whole, source, f"{where}: counts is not an object of integers >= 0")
    for name, n in counts.items():
        _within(n, f"{where}: counts[{name!r:.80}]", source, MAX_COUNT)
    config = d.get("config", {})
    need(isinstance(config, dict), source, f"{where}: config is not an object")
    for key in ("step_ms", "step_examples"):
        values = d.get(key, [])
        need(_num_list(values) and all(x >= 0 for x in values), source,
              f"{where}: {key} is not a list of finite numbers >= 0")
    need(all(_count(x) for x in d.get("step_examples", [])), source,
          f"{where}: step_examples is not a list of whole numbers")
    _within_all(d.get("step_ms"), f"{where}: step_ms", source, MAX_TIME, " ms")
    _within_all(d.get("step_examples"), f"{where}: step_examples", source, MAX_COUNT)
    warmup = d.get("warmup_steps", BY_RULE)  # files before it: the warm-up rule decides
    need("warmup_steps" not in d or _count(warmup), source,
         f"{where}: warmup_steps must be a whole number >= 0, got {shown(warmup)}")
    _within(warmup, f"{where}: warmup_steps", source, MAX_COUNT)
    notes = d.get("notes", [])
    need(isinstance(notes, list) and all(isinstance(n, str) for n in notes), source,
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
            need(value >= -MAX_TIME, source,
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
        counts=shared_dict({_interned(k, memo): v for k, v in counts.items()}, memo),
        executor_stat=_interned(executor_stat, memo) if isinstance(executor_stat, str) else None,
        step_ms=shared_list([float(x) for x in d.get("step_ms", [])]),
        step_examples=shared_list([int(x) for x in d.get("step_examples", [])]),
        notes=shared_list(list(notes)),
        trace=d.get("trace") if isinstance(d.get("trace"), dict) else None, work=work,
        warmup_steps=int(warmup),
        **{k: _float(v) for k, v in optional.items()})


def _check_gate(gate: dict[str, Any], source: str) -> None:
    """The stored verdict, as ``show`` renders it."""
    need(isinstance(gate.get("passed", False), bool), source, "gate.passed is not a boolean")
    violations = gate.get("violations", [])
    need(isinstance(violations, list) and all(isinstance(v, dict) for v in violations), source,
          "gate.violations is not a list of objects")
    for i, v in enumerate(violations):
        for key in ("value", "limit", "baseline"):
            need(v.get(key) is None or _number(v[key]), source,
                  f"gate.violations[{i}].{key} is not a number")
            if v.get(key) is not None:
                _within(v[key], f"gate.violations[{i}].{key}", source, MAX_NUMBER)
    for key in ("warnings", "notes", "undecided_metrics"):
        values = gate.get(key, [])
        need(isinstance(values, list) and all(isinstance(x, str) for x in values), source,
              f"gate.{key} is not a list of strings")
    for key in ("checks", "undecided", "inconclusive"):
        n = gate.get(key, 0)
        need(isinstance(n, int) and not isinstance(n, bool) and _count(n), source,
              f"gate.{key} is not an integer >= 0")
        _within(n, f"gate.{key}", source, MAX_COUNT)
    for key in ("baseline", "thresholds", "incomplete"):
        need(gate.get(key) is None or isinstance(gate[key], str), source,
              f"gate.{key} is not a string or null")


def _check_commit(commit: dict[str, Any], source: str) -> None:
    """The commit as git described it: its sha goes to git (``history import``), so it must be
    hexadecimal; branch a string, dirty a boolean (each may be null)."""
    sha = commit.get("sha")
    need(sha is None or is_sha(sha), source,
          f"commit.sha must be a hexadecimal commit id, got {sha!r:.60}")
    need(commit.get("branch") is None or isinstance(commit["branch"], str), source,
          "commit.branch is not a string or null")
    need(commit.get("dirty") is None or isinstance(commit["dirty"], bool), source,
          "commit.dirty is not a boolean or null")


def check_schema(data: Mapping[str, Any], source: str) -> None:
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ResultsError(f"{source}: unknown results schema {shown(schema)} "
                           f"(this version reads {SCHEMA!r})")


def _unique_ids(runs: list[RunResult], source: str) -> None:
    seen: set[str] = set()
    for r in runs:
        need(r.id not in seen, source,
              f"run {r.id!r:.200} appears twice (run ids must be unique)")
        seen.add(r.id)


def finish(data: Mapping[str, Any], runs: list[RunResult], source: str) -> ResultSet:
    """The result set of a document's top-level members other than ``runs`` and its runs."""
    _unique_ids(runs, source)
    machine = data.get("machine") or {}
    need(isinstance(machine, dict), source, "machine is not an object")
    commit = data.get("commit")
    need(commit is None or isinstance(commit, dict), source, "commit is not an object or null")
    if commit is not None:
        _check_commit(commit, source)
    gate = data.get("gate")
    need(gate is None or isinstance(gate, dict), source, "gate is not an object")
    if gate is not None:
        _check_gate(gate, source)
    session = data.get("session") or {}
    need(isinstance(session, dict), source, "session is not an object")
    compare = data.get("compare")
    need(compare is None or isinstance(compare, dict), source, "compare is not an object")
    created = str(data.get("created", ""))
    return ResultSet(runs=runs, machine=machine, commit=commit, created=created, session=session,
                     gate=gate, compare=compare)


def results_from_dict(data: Any, source: str = "<data>") -> ResultSet:
    """Validate and load a parsed results document (raises :class:`ResultsError`)."""
    need(isinstance(data, dict), source, "the top level is not an object")
    check_schema(data, source)
    need(isinstance(data.get("runs"), list), source, "runs is missing or not a list")
    memo: dict[Any, Any] = {}
    return finish(data, [load_run(r, i, source, memo) for i, r in enumerate(data["runs"])],
                   source)
