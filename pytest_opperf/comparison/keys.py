"""Keys of the thresholds file's tables, each declared once: type, default, range, meaning.

A table is a frozen dataclass whose fields are made with :func:`table_key` (the field's annotation
gives the type); :func:`parse` checks a parsed TOML table against its keys, so that errors are one
line naming the file, the table, the key, what was expected and what was given. No pytest import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

__all__ = ["Key", "ThresholdsError", "keys", "parse", "table_key", "type_name", "unknown"]


class ThresholdsError(Exception):
    """A thresholds file that cannot be used; the message is one line naming the file."""


def type_name(value: Any) -> str:
    """What TOML calls the type of ``value``."""
    return {bool: "boolean", str: "string", int: "integer", float: "number", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class Key:
    """One key of a table: type (``float`` takes integers), default, meaning, the range (each end
    closed unless ``*_open``) or ``choices``; ``what``: ``<name> is <what> and must be ...``."""

    name: str
    type: type
    default: Any
    doc: str
    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[str, ...] = ()
    what: str = ""

    @property
    def range(self) -> str:
        """The range as an interval: ``[0, 1)``, ``(0, inf)``."""
        closed_hi = not self.hi_open and math.isfinite(self.hi)
        return f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{']' if closed_hi else ')'}"

    def check(self, value: Any, where: str, source: str) -> Any:
        """``value`` as this key's type, else a :class:`ThresholdsError`."""
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        typed = isinstance(value, self.type) and not isinstance(value, bool)  # (not narrowed)
        if not typed:
            expected = {float: "a number", int: "an integer", str: "a string"}[self.type]
            problem = f"{expected}, got {value!r} ({type_name(value)})"
        elif self.choices and value not in self.choices:
            problem = f"{' or '.join(map(repr, self.choices))}, got {value!r}"
        elif isinstance(value, str):
            return value
        elif not math.isfinite(value):
            problem = f"a finite number, got {value!r}"
        elif (value <= self.lo if self.lo_open else value < self.lo) or (
                value >= self.hi if self.hi_open else value > self.hi):
            problem = f"in {self.range}, got {value!r}"
        else:
            return value
        what = f"is {self.what} and " if self.what else ""
        raise ThresholdsError(f"{source}: {where} {self.name} {what}must be {problem}")


def table_key(default: Any, doc: str, lo: float = -math.inf, hi: float = math.inf,
              **more: Any) -> Any:
    """A dataclass field that is a table key; ``more``: the other fields of :class:`Key`."""
    return field(default=default, metadata={"key": {"doc": doc, "lo": lo, "hi": hi, **more}})


@cache
def keys(table: type) -> dict[str, Key]:
    """The keys of a table's dataclass, in order (annotations as strings: ``float | None``)."""
    types = {"float": float, "int": int, "str": str}
    return {f.name: Key(f.name, types[str(f.type).removesuffix(" | None")], f.default,
                        **f.metadata["key"]) for f in fields(table) if "key" in f.metadata}


def unknown(table: Mapping[str, Any], known: Sequence[str], where: str, source: str) -> None:
    """An error for the first key not in ``known``: a typo must not switch a check off."""
    names = sorted(set(table) - set(known))
    if names:
        raise ThresholdsError(f"{source}: unknown key {names[0]!r} in {where} "
                              f"(known keys: {', '.join(known)})")


def parse(specs: Mapping[str, Key], table: Any, where: str, source: str,
          extra: Sequence[str] = ()) -> dict[str, Any]:
    """The checked values ``table`` sets for ``specs``; keys in ``extra`` are known (the
    caller reads them), any other key is an error."""
    if not isinstance(table, dict):
        raise ThresholdsError(f"{source}: {where} must be a table, got {type_name(table)}")
    unknown(table, [*specs, *extra], where, source)
    return {name: specs[name].check(value, where, source) for name, value in table.items()
            if name in specs}
