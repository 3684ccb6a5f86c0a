"""Why a metric got slower, from the two sides' work counts (pure: no pytest, no git).

Work counts are exact: for the same code and libraries every step executes the same Python, so a
per-function diff of them needs no statistics. :func:`explain` reads a metric's scope (its stat
and the stats nested in it; the whole step for a run-level metric such as examples/sec), adds up
the counts of each side's functions there (:mod:`pytest_opperf.workcounts.functions`: their files
are relative to each side's checkout, so the same function has the same name on both sides) and
puts the metric in one of four classes (:data:`CLASSES`):

* ``more work``: a count of the scope grew; the functions whose counts changed, the largest
  growth first, each with its ``path:line`` and its delta per step;
* ``same work, slower``: every count of the scope (and the CPU instructions, when both sides
  counted them) is unchanged: the cost is per unit of work (a kernel, memory, threads, the
  environment), and no function is named;
* ``less work, slower``: a count fell and none grew (the functions that do less are named);
* ``not in the counted code``: a side has no work counts, or the scope has none on either side.

Whatever the class, an A/B also lists the stats inside the scope whose count or time it found
changed (:attr:`Explanation.inside`: the child ops and kernels of a torch or Paddle run, the ops
of a step), so that "same work, slower" says where the time went.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..results import RunResult
from ..workcounts.functions import FunctionCounts
from ..workcounts.workcount import COUNTERS, LABELS, WorkCounts

__all__ = ["CLASSES", "MORE", "NOT_COUNTED", "SAME", "FEWER", "Explanation", "FunctionDelta",
           "explain", "function_deltas", "scope"]

MORE, SAME, FEWER, NOT_COUNTED = ("more work", "same work, slower", "less work, slower",
                                  "not in the counted code")
CLASSES: tuple[str, ...] = (MORE, SAME, FEWER, NOT_COUNTED)
FUNCTIONS_SHOWN = 3  # functions named per metric in the short forms (the comment, the terminal)
KEPT = 20  # functions kept per metric in an explanation (the gate JSON, the markdown)


@dataclass(frozen=True)
class FunctionDelta:
    """One function's counts per step on both sides, over a metric's scope: ``base`` and
    ``head`` in :data:`COUNTERS` order; ``callees``: the change of its C calls by callee, the
    largest first (those that changed)."""

    file: str
    line: int
    name: str
    base: tuple[int, int, int]
    head: tuple[int, int, int]
    callees: tuple[tuple[str, int], ...] = ()

    def delta(self, counter: str) -> int:
        i = COUNTERS.index(counter)
        return self.head[i] - self.base[i]

    @property
    def deltas(self) -> tuple[int, int, int]:
        b0, b1, b2 = self.base
        h0, h1, h2 = self.head
        return h0 - b0, h1 - b1, h2 - b2

    @property
    def where(self) -> str:
        """``reference_framework/ops/conv.py:88`` (empty for the ``(other)`` row)."""
        return f"{self.file}:{self.line}" if self.file else ""

    def text(self) -> str:
        """``+51,099 bytecodes, +53 Python calls in _im2col_busy
        (reference_framework/ops/conv.py:88)``: each count that changed, the C calls' two largest
        changes by callee, the function and where it starts."""
        parts = [f"{d:+,} {LABELS[c]}" for c, d in zip(COUNTERS, self.deltas, strict=True) if d]
        callees = [f"{n:+,} {name}" for name, n in self.callees[:2]]
        shown = ", ".join(parts) + (f" ({', '.join(callees)})" if callees else "")
        return f"{shown} in {self.name}" + (f" ({self.where})" if self.where else "")

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "name": self.name,
                "base": dict(zip(COUNTERS, self.base, strict=True)),
                "head": dict(zip(COUNTERS, self.head, strict=True)),
                "delta": dict(zip(COUNTERS, self.deltas, strict=True)),
                "callees": [[name, n] for name, n in self.callees], "text": self.text()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FunctionDelta:
        def counts(side: Any) -> tuple[int, int, int]:
            if not isinstance(side, Mapping):
                raise ValueError(f"a function's base and head must be objects, got {side!r:.60}")
            values = [side.get(c, 0) for c in COUNTERS]
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise ValueError(f"a function's counts must be integers, got {side!r:.60}")
            return values[0], values[1], values[2]
        file, line, name = d.get("file"), d.get("line"), d.get("name")
        if not (isinstance(file, str) and isinstance(name, str) and isinstance(line, int)):
            raise ValueError(f"a function needs file, line and name, got {dict(d)!r:.80}")
        callees = d.get("callees", [])
        if not isinstance(callees, list) or not all(
                isinstance(c, list) and len(c) == 2 and isinstance(c[0], str)
                and isinstance(c[1], int) for c in callees):
            raise ValueError(f"a function's callees must be [name, change] pairs, got "
                             f"{callees!r:.60}")
        return cls(file, line, name, counts(d.get("base")), counts(d.get("head")),
                   tuple((c[0], c[1]) for c in callees))


@dataclass
class Explanation:
    """Why one metric got slower (or may have): its class (:data:`CLASSES`), one sentence
    (``why``), the stats it compared, the functions whose counts changed (the largest growth
    first; none for "same work, slower"), and, set by the callers that can: ``changed``, the
    changed lines of the head's diff that the added work runs through (``path:a-b``; empty: none
    of them; None: not checked), ``changed_note`` (why not, when not checked) and ``command``
    (the one command that reruns the test's A/B)."""

    cls: str
    why: str
    stats: list[str] = field(default_factory=list)
    functions: list[FunctionDelta] = field(default_factory=list)
    changed: list[str] | None = None
    changed_note: str | None = None
    command: str | None = None
    # the stats inside the scope whose count or time changed, as the A/B decided them (torch's
    # and Paddle's child ops and kernels; the ops of a step): set by explain.session
    inside: list[str] = field(default_factory=list)

    def top(self, limit: int = FUNCTIONS_SHOWN) -> list[str]:
        """The first ``limit`` functions' lines."""
        return [f.text() for f in self.functions[:limit]]

    def changed_text(self) -> str | None:
        """``changed lines: reference_framework/ops/batch_norm.py:84-86`` or ``none of the changed
        lines: the work comes from elsewhere (a dependency, the environment)``; None: not
        checked."""
        if self.changed is None:
            note = self.changed_note
            return f"changed lines: not checked ({note})" if note else None
        if not self.changed:
            return ("none of the changed lines: the added work comes from elsewhere (a "
                    "dependency, the environment)")
        return "changed lines: " + ", ".join(self.changed)

    def lines(self, limit: int = FUNCTIONS_SHOWN) -> list[str]:
        """The class with its sentence, the top functions, the changed lines, the command."""
        out = [f"{self.cls}: {self.why}"]
        out += [f"  {t}" for t in self.top(limit)]
        if len(self.functions) > limit:
            out.append(f"  ... and {len(self.functions) - limit} more function(s)")
        if self.inside:
            more = len(self.inside) - limit
            out.append("  inside: " + "; ".join(self.inside[:limit])
                       + (f"; and {more} more" if more > 0 else ""))
        changed = self.changed_text()
        out += [f"  {changed}"] if changed else []
        out += [f"  rerun: {self.command}"] if self.command else []
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"class": self.cls, "why": self.why, "stats": list(self.stats),
                "functions": [f.to_dict() for f in self.functions], "changed": self.changed,
                "changed_note": self.changed_note, "command": self.command,
                "inside": list(self.inside)}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Explanation:
        """An ``explain`` object read back (raises ValueError naming ``where``)."""
        try:
            if not isinstance(d, Mapping):
                raise ValueError(f"must be an object, got {type(d).__name__}")
            if d.get("class") not in CLASSES:
                raise ValueError(f"class must be one of {list(CLASSES)}, got {d.get('class')!r}")
            why, stats, functions = d.get("why"), d.get("stats", []), d.get("functions", [])
            changed, note, command = d.get("changed"), d.get("changed_note"), d.get("command")
            inside = d.get("inside", [])
            if not isinstance(inside, list) or not all(isinstance(i, str) for i in inside):
                raise ValueError("inside must be a list of strings")
            if not isinstance(why, str):
                raise ValueError(f"why must be a string, got {why!r:.60}")
            if not isinstance(stats, list) or not all(isinstance(s, str) for s in stats):
                raise ValueError("stats must be a list of strings")
            if not isinstance(functions, list) or not all(isinstance(f, Mapping)
                                                          for f in functions):
                raise ValueError("functions must be a list of objects")
            if changed is not None and (not isinstance(changed, list)
                                        or not all(isinstance(c, str) for c in changed)):
                raise ValueError("changed must be null or a list of strings")
            for name, value in (("changed_note", note), ("command", command)):
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"{name} must be null or a string, got {value!r:.60}")
            return cls(d["class"], why, list(stats),
                       [FunctionDelta.from_dict(f) for f in functions],
                       None if changed is None else list(changed), note, command, list(inside))
        except ValueError as exc:
            raise ValueError(f"{where}: explain: {exc}") from None


def scope(metric: str, base: RunResult, head: RunResult) -> list[str] | None:
    """The stats whose counts a metric reads: a stat's metric (``step_ms:conv2d``,
    ``bytecodes:conv2d``) its stat and the stats nested in it on either side; None for a
    run-level metric (examples/sec, the step, the Python share, instructions): the whole step."""
    _, sep, stat = metric.partition(":")
    if not sep:
        return None
    children: dict[str, set[str]] = {}
    for run in (base, head):
        for s in run.stats:
            if s.parent is not None:
                children.setdefault(s.parent, set()).add(s.name)
    out, todo = [], [stat]
    while todo:
        name = todo.pop()
        if name not in out:
            out.append(name)
            todo.extend(sorted(children.get(name, ())))
    return out


def _summed(work: WorkCounts, stats: Iterable[str] | None) -> dict[tuple[str, int, str],
                                                                  FunctionCounts]:
    out: dict[tuple[str, int, str], FunctionCounts] = {}
    functions = work.functions or {}
    for stat in (functions if stats is None else stats):
        for r in functions.get(stat, ()):
            m = out.setdefault(r.key, FunctionCounts(r.file, r.line, r.name))
            m.bytecodes += r.bytecodes
            m.py_calls += r.py_calls
            m.c_calls += r.c_calls
            for name, n in r.callees.items():
                m.callees[name] = m.callees.get(name, 0) + n
    return out


def _moved(was: dict[tuple[str, int, str], FunctionCounts],
           now: dict[tuple[str, int, str], FunctionCounts]
           ) -> dict[tuple[str, int, str], FunctionCounts]:
    """``was`` with each function that only one side has at its line, and that is the one
    function of its file and name on each side, keyed by the head's line (lines added above a
    function move it without changing its work)."""
    def single(keys: Iterable[tuple[str, int, str]]) -> dict[tuple[str, str], tuple[str, int, str]]:
        found: dict[tuple[str, str], list[tuple[str, int, str]]] = {}
        for k in keys:
            found.setdefault((k[0], k[2]), []).append(k)
        return {fn: ks[0] for fn, ks in found.items() if len(ks) == 1}
    old, new = single(was), single(now)
    moved = {old[fn]: new[fn] for fn in set(old) & set(new)
             if old[fn] != new[fn] and old[fn] not in now and new[fn] not in was}
    return {moved.get(k, k): v for k, v in was.items()}


def function_deltas(base: WorkCounts, head: WorkCounts,
                    stats: Sequence[str] | None = None) -> list[FunctionDelta]:
    """Every function of ``stats`` (default: all) whose counts differ between the sides, those
    that grew most first (by bytecodes, then C calls, then Python calls), then those that fell
    (the most first). An empty list: every function's delta is 0. A function that only moved
    (its first line differs, its file and name are those of one function on each side) is
    compared with itself, under the head's line."""
    was, now = _summed(base, stats), _summed(head, stats)
    was = _moved(was, now)
    out = []
    for key in set(was) | set(now):
        b = was.get(key, FunctionCounts(*key))
        h = now.get(key, FunctionCounts(*key))
        bc, hc = (b.bytecodes, b.py_calls, b.c_calls), (h.bytecodes, h.py_calls, h.c_calls)
        if bc == hc:
            continue
        callees = sorted(((n, h.callees.get(n, 0) - b.callees.get(n, 0))
                          for n in set(b.callees) | set(h.callees)),
                         key=lambda c: (-abs(c[1]), c[0]))
        out.append(FunctionDelta(*key, bc, hc, tuple(c for c in callees if c[1])))

    def order(f: FunctionDelta) -> tuple[bool, int, int, int, str, int, str]:
        d = f.deltas
        grew = any(x > 0 for x in d)
        size = (d[0], d[2], d[1]) if grew else (-d[0], -d[2], -d[1])
        return not grew, -size[0], -size[1], -size[2], f.file, f.line, f.name
    return sorted(out, key=order)


def _totals(work: WorkCounts, stats: Sequence[str] | None) -> tuple[int, ...]:
    names = list(work.stats) if stats is None else stats
    return tuple(sum(work.stats.get(s, {}).get(c, 0) for s in names) for c in COUNTERS)


def _where(stats: Sequence[str] | None) -> str:
    if stats is None:
        return "the step"
    return stats[0] + (f" and the {len(stats) - 1} stat(s) nested in it" if len(stats) > 1 else "")


def explain(metric: str, base: RunResult, head: RunResult) -> Explanation:
    """The explanation of ``metric`` of one run measured on both sides (the module docstring)."""
    if base.work is None or head.work is None:
        sides = [n for n, r in (("base", base), ("head", head)) if r.work is None]
        return Explanation(NOT_COUNTED, f"the {' and '.join(sides)} side has no work counts (no "
                           "counting pass ran for this run)")
    stats = scope(metric, base, head)
    was, now = _totals(base.work, stats), _totals(head.work, stats)
    shown = list(stats) if stats is not None else []
    where = _where(stats)
    if not any(was) and not any(now):
        return Explanation(NOT_COUNTED, f"{where} has no Python work counted on either side: its "
                           "time is spent where the counts do not look (C code or the device, "
                           "called from outside it, or other threads)", shown)
    missing = [n for n, w in (("base", base.work), ("head", head.work)) if w.functions is None]
    # a side without per-function counts (a results file written before they were kept) names
    # no function: every function of the other side would read as added or removed
    deltas = [] if missing else function_deltas(base.work, head.work, stats)
    unnamed = (f"; the {' and '.join(missing)} side has no per-function counts, so no function "
               "is named" if missing else "")
    bi, hi = base.work.instructions, head.work.instructions
    grew = [c for c, b, h in zip(COUNTERS, was, now, strict=True) if h > b]
    fell = [c for c, b, h in zip(COUNTERS, was, now, strict=True) if h < b]
    if grew:
        sizes = ", ".join(f"{h - b:+,} {LABELS[c]}" for c, b, h in zip(COUNTERS, was, now,
                                                                        strict=True) if h != b)
        return Explanation(MORE, f"{where} does more work per step ({sizes}){unnamed}", shown,
                           [f for f in deltas if any(x > 0 for x in f.deltas)][:KEPT])
    if fell:
        sizes = ", ".join(f"{h - b:+,} {LABELS[c]}" for c, b, h in zip(COUNTERS, was, now,
                                                                        strict=True) if h != b)
        return Explanation(FEWER, f"{where} does less work per step ({sizes}) and takes longer: "
                           "the work left costs more (fewer threads or parts to split it over, "
                           f"a slower path){unnamed}", shown, deltas[:KEPT])
    instructions = ""
    if bi is not None and hi is not None:
        if hi > bi and base.work.instructions_cpu == head.work.instructions_cpu:
            return Explanation(MORE, f"{where}'s Python counts are unchanged, but the step runs "
                               f"{hi - bi:+,} CPU instructions", shown)
        instructions = f" and CPU instructions ({hi:,})"
    counted = ", ".join(f"{v:,} {LABELS[c]}" for c, v in zip(COUNTERS, now, strict=True) if v)
    return Explanation(SAME, f"the counts of {where} are unchanged ({counted}{instructions} per "
                       "step): the cost is per unit of work (a kernel, memory, threads or the "
                       "environment)", shown)
