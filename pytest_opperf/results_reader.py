"""Reading a results file: strict JSON, parsed one run at a time.

Python's json takes what JSON does not (NaN, Infinity, a key given twice, the last one
winning); this reader refuses each, naming where it lies, and builds each run's record as soon
as the run is parsed (:mod:`.results_checks`), so that the records, the parsed objects and the
text never exist all at once.
"""

from __future__ import annotations

import json
import os
import re
import stat
from array import array
from pathlib import Path
from typing import Any

from .results import ResultsError, ResultSet, RunResult
from .results_checks import check_schema, finish, load_run, need, results_from_dict

__all__ = ["loads_strict", "read_results", "read_text"]


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
            return results_from_dict(loads_strict(text, self.source), self.source)
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
                    check_schema(head, self.source)
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
        check_schema(head, self.source)
        if refusal is not None:
            raise refusal
        need(runs is not None or isinstance(head.get("runs"), list), self.source,
              "runs is missing or not a list")
        return finish(head, runs if runs is not None else [], self.source)

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
                    runs.append(load_run(run, i, self.source, self.memo))
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
