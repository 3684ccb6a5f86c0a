"""Per-function work counts: each stat's self counts split by the Python function that did the work.

The counting pass (:mod:`.workcount`) counts, per stat, the work of each Python function: the
bytecodes executed in it (its own frames, not the functions it calls), how often it was entered
(``py_calls``), the C functions it called (``c_calls``) and those C calls by callee. A function is
named by its file, first line and qualified name (:class:`FunctionCounts`); its file is relative to
the checkout the session ran in, or to the ``sys.path`` entry it was imported from (site-packages,
the standard library), so that the same code in two checkouts, or two virtual environments, has
the same name.

Bounded: of a stat's functions, those holding 99 % (:data:`KEPT_SHARE`) of any of its counts are
kept, largest first, the rest summed into one row named :data:`OTHER`; of a function's callees
likewise. The sums over a stat's rows are the stat's counts, exactly.

In the results file the rows are one ``work.functions`` object: a table of every run's rows packed
as compact JSON, deflated and base64-encoded (:func:`encode`, :func:`decode`), so that a results
file grows by a few per cent (the same ops' tables repeat across runs, and compress to little).
Pure: no pytest, no tracing.
"""

from __future__ import annotations

import base64
import json
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FUNCTIONS_FORMAT", "KEPT_SHARE", "OTHER", "FunctionCounts", "bounded", "decode",
           "encode", "merged", "relative_file"]

FUNCTIONS_FORMAT = "opperf-functions/1"  # the packed rows' format name
KEPT_SHARE = 0.99  # the share of each of a stat's counts that its kept functions hold at least
OTHER = "(other)"  # the row of the functions (or callees) past the kept ones
COUNTS = ("bytecodes", "py_calls", "c_calls")


@dataclass
class FunctionCounts:
    """One function's self counts per step in one stat: ``file`` (relative: :func:`relative_file`;
    empty for :data:`OTHER`), ``line`` (its first line; 0 for :data:`OTHER`), ``name`` (its
    qualified name), the three counts, and ``callees``: its C calls by the callee's name
    (``len``, ``list.append``, ``numpy.core._multiarray_umath.dot``)."""

    file: str
    line: int
    name: str
    bytecodes: int = 0
    py_calls: int = 0
    c_calls: int = 0
    callees: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int, str]:
        return self.file, self.line, self.name

    def count(self, counter: str) -> int:
        """One of :data:`COUNTS`."""
        if counter not in COUNTS:
            raise ValueError(f"no function count {counter!r}: expected one of {list(COUNTS)}")
        value: int = getattr(self, counter)
        return value

    def where(self) -> str:
        """``reference_framework/ops/conv.py:88``, or ``(other)``."""
        return f"{self.file}:{self.line}" if self.file else self.name


def relative_file(path: str, root: str | None, lib_dirs: Sequence[str] = ()) -> str:
    """``path`` relative to ``root`` (the checkout) when it lies under it, else relative to the
    longest of ``lib_dirs`` (``sys.path`` entries) it lies under, else as given (``<string>``,
    ``<frozen ...>``); with ``/`` as the separator."""
    if not path or path.startswith("<"):
        return path
    full = os.path.abspath(path)
    for base in ([root] if root else []) + sorted(lib_dirs, key=len, reverse=True):
        if not base:
            continue
        base = os.path.abspath(base)
        if full.startswith(base.rstrip(os.sep) + os.sep):
            return os.path.relpath(full, base).replace(os.sep, "/")
    return full.replace(os.sep, "/")


def _kept(items: Sequence[tuple[Any, Sequence[int]]], share: float) -> set[int]:
    """The indices of ``items`` (a key and its counts) that hold ``share`` of any count, taking
    the largest of each count first."""
    kept: set[int] = set()
    width = len(items[0][1]) if items else 0
    for k in range(width):
        total = sum(c[k] for _, c in items)
        if not total:
            continue
        order = sorted(range(len(items)), key=lambda i: (-items[i][1][k], str(items[i][0])))
        held = 0
        for i in order:
            if held >= share * total or not items[i][1][k]:
                break
            kept.add(i)
            held += items[i][1][k]
    return kept


def _bounded_callees(callees: Mapping[str, int], share: float) -> dict[str, int]:
    items = sorted(callees.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = _kept([(name, (n,)) for name, n in items], share)
    out = {name: n for i, (name, n) in enumerate(items) if i in kept}
    rest = sum(n for i, (_, n) in enumerate(items) if i not in kept)
    if rest:
        out[OTHER] = out.get(OTHER, 0) + rest
    return out


def merged(rows: Iterable[FunctionCounts]) -> list[FunctionCounts]:
    """``rows`` with those of the same key added up (two code objects of one function: a module
    compiled twice), in first-seen order."""
    out: dict[tuple[str, int, str], FunctionCounts] = {}
    for r in rows:
        m = out.get(r.key)
        if m is None:
            out[r.key] = FunctionCounts(r.file, r.line, r.name, r.bytecodes, r.py_calls,
                                        r.c_calls, dict(r.callees))
            continue
        m.bytecodes += r.bytecodes
        m.py_calls += r.py_calls
        m.c_calls += r.c_calls
        for name, n in r.callees.items():
            m.callees[name] = m.callees.get(name, 0) + n
    return list(out.values())


def bounded(rows: Iterable[FunctionCounts], share: float = KEPT_SHARE) -> list[FunctionCounts]:
    """A stat's rows, bounded: the functions holding ``share`` of any count (the largest of each
    first), largest bytecodes first, then one :data:`OTHER` row with the rest (none when nothing
    is left); each function's callees bounded alike. Rows with no count are dropped."""
    items = [r for r in merged(rows) if r.bytecodes or r.py_calls or r.c_calls]
    kept = _kept([(r.key, (r.bytecodes, r.py_calls, r.c_calls)) for r in items], share)
    out = [FunctionCounts(r.file, r.line, r.name, r.bytecodes, r.py_calls, r.c_calls,
                          _bounded_callees(r.callees, share))
           for i, r in enumerate(items) if i in kept]
    out.sort(key=lambda r: (-r.bytecodes, -r.c_calls, -r.py_calls, r.key))
    rest = [r for i, r in enumerate(items) if i not in kept]
    if rest:
        callees: dict[str, int] = {}
        for r in rest:
            for name, n in r.callees.items():
                callees[name] = callees.get(name, 0) + n
        out.append(FunctionCounts("", 0, OTHER, sum(r.bytecodes for r in rest),
                                  sum(r.py_calls for r in rest), sum(r.c_calls for r in rest),
                                  _bounded_callees(callees, share)))
    return out


def encode(stats: Mapping[str, Sequence[FunctionCounts]]) -> dict[str, Any]:
    """The results' ``work.functions`` object of one run: ``{"format": FUNCTIONS_FORMAT, "data":
    ...}``, its data the base64 of the deflated compact JSON ``{"files": [file, ...], "stats":
    {stat: [[file index, line, name, bytecodes, py_calls, c_calls, [[callee, c_calls], ...]],
    ...]}}``."""
    files: dict[str, int] = {}
    packed: dict[str, list[list[Any]]] = {}
    for stat, rows in stats.items():
        packed[stat] = [[files.setdefault(r.file, len(files)), r.line, r.name, r.bytecodes,
                         r.py_calls, r.c_calls, [[k, v] for k, v in r.callees.items()]]
                        for r in rows]
    text = json.dumps({"files": list(files), "stats": packed}, separators=(",", ":"))
    data = base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")
    return {"format": FUNCTIONS_FORMAT, "data": data}


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2 ** 63:
        raise ValueError(f"{what} must be an int in [0, 2**63), got {value!r}")
    return value


def decode(obj: Any, where: str) -> dict[str, list[FunctionCounts]]:
    """:func:`encode`'s object read back (raises ValueError naming ``where`` and the field)."""
    def fail(problem: str) -> ValueError:
        return ValueError(f"{where}: work.functions: {problem}")

    if not isinstance(obj, Mapping):
        raise fail(f"must be an object, got {type(obj).__name__}")
    if obj.get("format") != FUNCTIONS_FORMAT:
        raise fail(f"format must be {FUNCTIONS_FORMAT!r}, got {obj.get('format')!r}")
    data = obj.get("data")
    if not isinstance(data, str):
        raise fail(f"data must be a base64 string, got {type(data).__name__}")
    try:
        doc = json.loads(zlib.decompress(base64.b64decode(data, validate=True)))
    except (ValueError, zlib.error) as exc:
        raise fail(f"data is not base64 of deflated JSON: {exc}") from None
    files, stats = (doc.get("files"), doc.get("stats")) if isinstance(doc, dict) else (None, None)
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise fail("data: files must be a list of strings")
    if not isinstance(stats, dict):
        raise fail("data: stats must be an object")
    out: dict[str, list[FunctionCounts]] = {}
    for stat, rows in stats.items():
        if not isinstance(rows, list):
            raise fail(f"data: stats[{stat!r}] must be a list of rows")
        parsed = []
        for i, row in enumerate(rows):
            what = f"data: stats[{stat!r}][{i}]"
            if not isinstance(row, list) or len(row) != 7:
                raise fail(f"{what} must be a list of 7 items, got {row!r:.80}")
            try:
                fi = _int(row[0], "its file index")
                if fi >= len(files):
                    raise ValueError(f"its file index {fi} is past the {len(files)} files")
                if not isinstance(row[2], str) or not isinstance(row[6], list):
                    raise ValueError("its name must be a string and its callees a list")
                callees = {}
                for pair in row[6]:
                    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                        raise ValueError(f"a callee must be [name, count], got {pair!r:.60}")
                    callees[pair[0]] = _int(pair[1], f"callee {pair[0]!r}'s count")
                parsed.append(FunctionCounts(files[fi], _int(row[1], "its line"), row[2],
                                             _int(row[3], "bytecodes"), _int(row[4], "py_calls"),
                                             _int(row[5], "c_calls"), callees))
            except ValueError as exc:
                raise fail(f"{what}: {exc}") from None
        out[str(stat)] = parsed
    return out
