"""Join the results files of a session's parts (``python -m pytest_opperf merge OUT IN...``).

The parts are the shards of ``--opperf-shard=K/N`` (each records ``session.shard``: its index,
count and ``selection``, the name of the whole selection it is a part of) and files of whole
selections (no ``shard``, e.g. a matrix's e2e job). :func:`merge` refuses, with one line naming
it, a run id in two files, a shard given twice or missing, parts of other device classes,
workloads, timing, commits or A/B bases, and a mix of parts with and without A/B. The joined file
has every run; each part's machine when the parts ran on different machines (``session.merged``,
and a note on each run of a part whose machine differs from the first part's); the parts' stored
verdicts joined (``gate``: their violations, warnings, notes, checks, and why a part did not run to
its end); and their A/B comparisons joined (``compare``: every decision, every test's cost).
``python -m pytest_opperf gate`` then gives the whole its verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..ab.paired import CompareResult
from ..results import ResultsError, ResultSet

__all__ = ["MergeError", "Part", "merge"]

_VOLATILE = ("gpu_env", "workers")  # machine facts that differ between two runs of one machine
_SAME = ("device_class", "workload", "timing", "l2_flush")  # session facts every part shares


class MergeError(ResultsError):
    """Parts that cannot be joined (one line, naming the run, the shard or the file; exit 4)."""


@dataclass(frozen=True)
class Part:
    """One results file to join: its name (for messages) and its contents."""

    name: str
    results: ResultSet

    @property
    def shard(self) -> Mapping[str, Any] | None:
        value = self.results.session.get("shard")
        return value if isinstance(value, Mapping) else None

    @property
    def label(self) -> str:
        s = self.shard
        return f"shard {s.get('index')}/{s.get('count')}" if s is not None else "whole selection"


def _machine(results: ResultSet) -> dict[str, Any]:
    return {k: v for k, v in results.machine.items() if k not in _VOLATILE}


def _machine_text(machine: Mapping[str, Any]) -> str:
    gpu = machine.get("gpu")
    model = gpu.get("model") if isinstance(gpu, Mapping) else None
    facts = [str(machine.get("cpu") or "unknown CPU"), f"{machine.get('cores')} cores",
             f"Python {machine.get('python')}"] + ([str(model)] if model else [])
    return ", ".join(facts)


def _check_same(parts: Sequence[Part]) -> None:
    first = parts[0]
    for part in parts[1:]:
        for key in _SAME:
            a, b = first.results.session.get(key), part.results.session.get(key)
            if a != b:
                raise MergeError(f"{part.name} has {key} {b!r}, {first.name} {a!r}: the parts "
                                 "are not of one session")
        sha_a = (first.results.commit or {}).get("sha")
        sha_b = (part.results.commit or {}).get("sha")
        if sha_a and sha_b and sha_a != sha_b:
            raise MergeError(f"{part.name} is of commit {sha_b}, {first.name} of {sha_a}: the "
                             "parts are not of one session")
        if (first.results.compare is None) != (part.results.compare is None):
            with_ab, without = (first, part) if part.results.compare is None else (part, first)
            raise MergeError(f"{with_ab.name} has an A/B comparison and {without.name} has none: "
                             "the parts are not of one session")


def _check_shards(parts: Sequence[Part]) -> None:
    """Every shard of each selection once."""
    groups: dict[str, dict[int, Part]] = {}
    counts: dict[str, tuple[int, Part]] = {}
    for part in parts:
        s = part.shard
        if s is None:
            continue
        selection, index, count = str(s.get("selection")), s.get("index"), s.get("count")
        if not (isinstance(index, int) and isinstance(count, int) and 1 <= index <= count):
            raise MergeError(f"{part.name}: session.shard is not an index of a count: {dict(s)!r}")
        if selection in counts and counts[selection][0] != count:
            other = counts[selection][1]
            raise MergeError(f"{part.name} is shard {index}/{count} and {other.name} "
                             f"{other.label} of selection {selection}: other shard counts")
        counts.setdefault(selection, (count, part))
        group = groups.setdefault(selection, {})
        if index in group:
            raise MergeError(f"shard {index}/{count} (selection {selection}) is given twice: "
                             f"{group[index].name} and {part.name}")
        group[index] = part
    for selection, group in groups.items():
        count = counts[selection][0]
        missing = [i for i in range(1, count + 1) if i not in group]
        if missing:
            given = ", ".join(f"{i}/{count}" for i in sorted(group))
            raise MergeError(f"shard {missing[0]}/{count} (selection {selection}) is missing"
                             f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}: "
                             f"given {given}")


def _runs(parts: Sequence[Part]) -> list[Any]:
    seen: dict[str, str] = {}
    runs = []
    differ = any(_machine(p.results) != _machine(parts[0].results) for p in parts)
    for part in parts:
        for run in part.results.runs:
            if run.id in seen:
                raise MergeError(f"run {run.id!r} is in both {seen[run.id]} and {part.name}")
            seen[run.id] = part.name
            if differ:
                run.notes = [*run.notes, f"measured on {_machine_text(part.results.machine)} "
                             f"({part.label}, {part.name}): the parts ran on different machines"]
            runs.append(run)
    return runs


def _gate(parts: Sequence[Part]) -> dict[str, Any] | None:
    """The parts' stored verdicts, joined (the whole's own verdict: ``gate``)."""
    gates = [(p, p.results.gate) for p in parts if p.results.gate is not None]
    if not gates:
        return None

    def unique(key: str) -> list[Any]:
        return list(dict.fromkeys(x for _, g in gates for x in g.get(key, [])))

    incomplete = [f"{p.label}: {g['incomplete']}" for p, g in gates if g.get("incomplete")]
    joined: dict[str, Any] = {
        "passed": all(bool(g.get("passed")) for _, g in gates),
        "violations": [v for _, g in gates for v in g.get("violations", [])],
        "warnings": unique("warnings"), "notes": unique("notes"),
        "checks": sum(int(g.get("checks", 0)) for _, g in gates),
        "baseline": gates[0][1].get("baseline"), "thresholds": gates[0][1].get("thresholds"),
        "undecided": sum(int(g.get("undecided", 0)) for _, g in gates)}
    if incomplete:
        joined["incomplete"] = "; ".join(incomplete)
    return joined


def _compare(parts: Sequence[Part]) -> dict[str, Any] | None:
    if parts[0].results.compare is None:
        return None
    results = [(p, CompareResult.from_dict(p.results.compare, p.name)) for p in parts]
    first = results[0][1]
    for part, c in results[1:]:
        if c.base != first.base:
            raise MergeError(f"{part.name} compared against {c.base}, {parts[0].name} against "
                             f"{first.base}: the parts are not of one A/B session")
    joined = CompareResult(
        first.base, first.head, [d for _, c in results for d in c.decisions],
        [a for _, c in results for a in c.added], [r for _, c in results for r in c.removed],
        sum(c.pairs for _, c in results), max(c.elapsed_s for _, c in results),
        any(c.budget_exhausted for _, c in results),
        [f"{p.label}: {n}" for p, c in results for n in c.notes], first.interpreters,
        cost=sorted((row for _, c in results for row in c.cost),
                    key=lambda row: (-row.seconds, row.test)))
    return joined.to_dict()


def merge(parts: Sequence[Part]) -> ResultSet:
    """The whole session of ``parts`` (raises :class:`MergeError`)."""
    if not parts:
        raise MergeError("no results file to merge")
    _check_same(parts)
    _check_shards(parts)
    runs = _runs(parts)
    first = parts[0].results
    session = {k: v for k, v in first.session.items() if k != "shard"}
    differ = any(_machine(p.results) != _machine(first) for p in parts)
    session["merged"] = [
        {"shard": f"{p.shard.get('index')}/{p.shard.get('count')}" if p.shard else None,
         "selection": p.shard.get("selection") if p.shard else None,
         "runs": len(p.results.runs), "machine": p.results.machine if differ else None}
        for p in parts]
    return ResultSet(runs=runs, machine=dict(first.machine), commit=first.commit,
                     session=session, gate=_gate(parts), compare=_compare(parts))
