"""Strict JSON for results files: what Python's json takes that JSON does not (NaN,
Infinity, a key given twice, the last one winning) is refused, and named where it lies."""

from __future__ import annotations

import json
import re
from array import array
from typing import Any

from ..results import ResultsError

__all__ = ["DECODER", "NOT_JSON", "NUMBER_CHARS", "SPACE", "Duplicate", "loads_strict",
           "locate", "position", "strict_object"]


class Duplicate(Exception):
    """A key that appears twice in one object (raised while parsing; located afterwards)."""


class _Constant(ValueError):
    """NaN, Infinity or -Infinity: Python's json takes them, JSON has no such numbers."""


def _no_constant(name: str) -> Any:
    raise _Constant(f"{name} is not a number JSON allows")


def strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
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
                raise Duplicate(key)
            seen.add(key)
    samples = obj.get("samples_ms")
    if type(samples) is list and all(type(x) is float for x in samples):
        obj["samples_ms"] = array("d", samples)
    return obj


DECODER = json.JSONDecoder(object_pairs_hook=strict_object, parse_constant=_no_constant)
SPACE = re.compile(r"[ \t\n\r]*")
# the tokens of JSON text for the second look at a value that failed (locate)
_TOKEN = re.compile(r'[ \t\n\r]*(?:("[^"\\]*(?:\\.[^"\\]*)*")|([{}\[\]:,])|([^ \t\n\r{}\[\]:,"]+))',
                    re.DOTALL)
# a part of a stat's samples (_Window.samples): numbers and commas only, and none of the forms
# Python's float() takes that JSON does not (+1, .5, 5., 01, 1e, e5, 1-2); a negative number is
# left to the whole read too (it is refused, and -0 reads as 0 there); one pass each, no state
# that grows with the part (a regular expression of repeated groups takes ~100 bytes a number)
NUMBER_CHARS = re.compile(r"[-+.eE0-9 \t\n\r,]*")
NOT_JSON = re.compile(r"(?<![eE])[+-]|(?<![0-9])\.|\.(?![0-9])|(?<![0-9.eE+-])0[0-9]"
                      r"|[eE](?![+-]?[0-9])|(?<![0-9])[eE]")
_MAX_DIGITS = 4300  # Python's limit for converting digits to an int (sys.get_int_max_str_digits)


def position(text: str, pos: int) -> str:
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


def locate(text: str, start: int, base: str) -> str | None:
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
                            f"{where} at {position(text, pos)} (a key may appear once in an "
                            "object)")
                top[1].add(key)
                top[2] = key
                key_next = False
        elif bare in ("NaN", "Infinity", "-Infinity"):
            return f"not valid JSON: {bare} is not a number JSON allows at {position(text, pos)}"
        elif len(bare.lstrip("-")) > _MAX_DIGITS and bare.lstrip("-").isdigit():
            return (f"not valid JSON: an integer of {len(bare.lstrip('-'))} digits at "
                    f"{position(text, pos)} (Python reads at most {_MAX_DIGITS})")
        if not stack:
            return None
    return None


def loads_strict(text: str, source: str) -> Any:
    """Parse a results document: NaN and Infinity (which Python's json accepts) are errors, as
    are keys given twice in an object and documents nested too deeply to check (each named
    with its line). Samples are packed (:func:`strict_object`)."""
    try:
        return DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} "
                           f"column {exc.colno}") from None
    except RecursionError:
        raise ResultsError(f"{source}: not a results file: nested too deeply") from None
    except (Duplicate, ValueError) as exc:  # a key twice, NaN/Infinity, too many digits
        found = locate(text, SPACE.match(text).end(), "")  # type: ignore[union-attr]
        if found is None:
            found = (f"malformed results file: the key {str(exc)!r:.60} appears twice"
                     if isinstance(exc, Duplicate) else f"not valid JSON: {exc}")
        raise ResultsError(f"{source}: {found}") from None
