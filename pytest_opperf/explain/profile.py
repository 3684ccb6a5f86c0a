"""The differential profile of a session with regressions: pprof, and folded stacks per count.

``explain.pb.gz`` is a gzipped ``perftools.profiles.Profile`` (pprof's ``proto/profile.proto``),
encoded by the ``protobuf`` library from a descriptor of that schema built here at runtime (no
generated code, no encoder of ours): one sample type per count (``bytecodes``, ``py_calls``,
``c_calls``, unit ``count``), one sample per function, stat, run and side, its stack the function
under its stat under its run, labels ``run`` and ``stat``; the base's samples negated and labelled
``pprof::base=true``, so that ``pprof -diff_base``'s convention holds in one file and the sum of a
function's samples is its delta per step. ``explain-<count>.folded`` (one per count): lines
``run;stat;function base head``, the two-column form that flamegraph.pl's difffolded and inferno's
diff views read. No pytest.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ..workcounts.functions import FunctionCounts
from ..workcounts.workcount import COUNTERS

__all__ = ["BASE_LABEL", "ProfileRow", "folded", "profile_bytes", "profile_class", "rows_of"]

BASE_LABEL = "pprof::base"
_I64, _U64, _BOOL, _STR, _MSG = (descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                                 descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
                                 descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
                                 descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                                 descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
# profile.proto's messages: (field name, number, type, repeated, message type); the fields of
# pprof's proto/profile.proto that every pprof reads (tests/test_explain.py checks them
# against that file); later additions (Line.column, Profile.doc_url) are never written here
_SCHEMA: dict[str, list[tuple[str, int, int, bool, str | None]]] = {
    "Profile": [("sample_type", 1, _MSG, True, "ValueType"), ("sample", 2, _MSG, True, "Sample"),
                ("mapping", 3, _MSG, True, "Mapping"), ("location", 4, _MSG, True, "Location"),
                ("function", 5, _MSG, True, "Function"), ("string_table", 6, _STR, True, None),
                ("drop_frames", 7, _I64, False, None), ("keep_frames", 8, _I64, False, None),
                ("time_nanos", 9, _I64, False, None), ("duration_nanos", 10, _I64, False, None),
                ("period_type", 11, _MSG, False, "ValueType"), ("period", 12, _I64, False, None),
                ("comment", 13, _I64, True, None), ("default_sample_type", 14, _I64, False, None)],
    "ValueType": [("type", 1, _I64, False, None), ("unit", 2, _I64, False, None)],
    "Sample": [("location_id", 1, _U64, True, None), ("value", 2, _I64, True, None),
               ("label", 3, _MSG, True, "Label")],
    "Label": [("key", 1, _I64, False, None), ("str", 2, _I64, False, None),
              ("num", 3, _I64, False, None), ("num_unit", 4, _I64, False, None)],
    "Mapping": [("id", 1, _U64, False, None), ("memory_start", 2, _U64, False, None),
                ("memory_limit", 3, _U64, False, None), ("file_offset", 4, _U64, False, None),
                ("filename", 5, _I64, False, None), ("build_id", 6, _I64, False, None),
                ("has_functions", 7, _BOOL, False, None), ("has_filenames", 8, _BOOL, False, None),
                ("has_line_numbers", 9, _BOOL, False, None),
                ("has_inline_frames", 10, _BOOL, False, None)],
    "Location": [("id", 1, _U64, False, None), ("mapping_id", 2, _U64, False, None),
                 ("address", 3, _U64, False, None), ("line", 4, _MSG, True, "Line"),
                 ("is_folded", 5, _BOOL, False, None)],
    "Line": [("function_id", 1, _U64, False, None), ("line", 2, _I64, False, None)],
    "Function": [("id", 1, _U64, False, None), ("name", 2, _I64, False, None),
                 ("system_name", 3, _I64, False, None), ("filename", 4, _I64, False, None),
                 ("start_line", 5, _I64, False, None)],
}
_PACKAGE = "perftools.profiles"
_CLASS: Any = None


def profile_class() -> Any:
    """The ``perftools.profiles.Profile`` message class, from profile.proto's descriptor."""
    global _CLASS
    if _CLASS is None:
        f = descriptor_pb2.FileDescriptorProto(name="opperf/profile.proto", package=_PACKAGE,
                                               syntax="proto3")
        for message, fields in _SCHEMA.items():
            m = f.message_type.add(name=message)
            for name, number, kind, repeated, type_name in fields:
                label = (descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if repeated
                         else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
                field = m.field.add(name=name, number=number, type=kind, label=label)
                if type_name:
                    field.type_name = f".{_PACKAGE}.{type_name}"
        pool = descriptor_pool.DescriptorPool()
        pool.Add(f)
        _CLASS = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Profile"))
    return _CLASS


@dataclass(frozen=True)
class ProfileRow:
    """One function's counts per step in one stat of one run on one side."""

    run: str
    stat: str
    side: str  # "base" | "head"
    function: FunctionCounts


def rows_of(run: str, side: str, functions: Mapping[str, Iterable[FunctionCounts]] | None
            ) -> list[ProfileRow]:
    """A run's per-function counts (``WorkCounts.functions``) as rows of one side."""
    return [ProfileRow(run, stat, side, f) for stat, fs in (functions or {}).items() for f in fs]


def profile_bytes(rows: Iterable[ProfileRow]) -> bytes:
    """The gzipped pprof profile of ``rows`` (the module docstring)."""
    profile = profile_class()()
    strings: dict[str, int] = {}

    def s(text: str) -> int:
        if text not in strings:
            strings[text] = len(strings)
            profile.string_table.append(text)
        return strings[text]

    s("")
    for counter in COUNTERS:
        profile.sample_type.add(type=s(counter), unit=s("count"))
    functions: dict[tuple[str, int, str], int] = {}
    locations: dict[tuple[str, int, str], int] = {}

    def location(file: str, line: int, name: str) -> int:
        key = (file, line, name)
        if key not in locations:
            if key not in functions:
                functions[key] = len(functions) + 1
                profile.function.add(id=functions[key], name=s(name), system_name=s(name),
                                     filename=s(file), start_line=line)
            locations[key] = len(locations) + 1
            loc = profile.location.add(id=locations[key])
            loc.line.add(function_id=functions[key], line=line)
        return locations[key]

    for r in rows:
        f = r.function
        values = [f.bytecodes, f.py_calls, f.c_calls]
        if not any(values):
            continue
        sign = -1 if r.side == "base" else 1
        sample = profile.sample.add(
            location_id=[location(f.file, f.line, f.name), location("", 0, f"stat {r.stat}"),
                         location("", 0, f"run {r.run}")],
            value=[sign * v for v in values])
        sample.label.add(key=s("run"), str=s(r.run))
        sample.label.add(key=s("stat"), str=s(r.stat))
        if r.side == "base":
            sample.label.add(key=s(BASE_LABEL), str=s("true"))
    return gzip.compress(profile.SerializeToString(), mtime=0)


def _frame(text: str) -> str:
    return text.replace(";", ":").replace("\n", " ")


def folded(rows: Iterable[ProfileRow], counter: str) -> str:
    """The two-column folded stacks of one count: ``run;stat;name (file:line) base head`` per
    function, sorted."""
    if counter not in COUNTERS:
        raise ValueError(f"no count {counter!r}: expected one of {list(COUNTERS)}")
    pairs: dict[str, list[int]] = {}
    for r in rows:
        f = r.function
        where = f" ({f.file}:{f.line})" if f.file else ""
        stack = ";".join(_frame(t) for t in (r.run, r.stat, f"{f.name}{where}"))
        pair = pairs.setdefault(stack, [0, 0])
        pair[0 if r.side == "base" else 1] += f.count(counter)
    return "".join(f"{stack} {b} {h}\n" for stack, (b, h) in sorted(pairs.items()) if b or h)
