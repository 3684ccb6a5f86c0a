"""Reading a results file: strict JSON, parsed one run at a time.

Python's json takes what JSON does not (NaN, Infinity, a key given twice, the last one
winning); this reader refuses each, naming where it lies, and builds each run's record as soon
as the run is parsed (:mod:`.results_checks`), so that the records, the parsed objects and the
text never exist all at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ..results import ResultsError, ResultSet, RunResult
from .checks import check_schema, finish, load_run, need, results_from_dict

__all__ = ["loads_strict", "read_results", "read_text"]


def _check_file(path: str | os.PathLike[str], error: type[Exception], expected: str) -> None:
    """Refuse, with one line naming the file, what is not a regular file (a FIFO would block
    forever); a broken or looping symbolic link is said to be one."""
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


def read_text(path: str | os.PathLike[str], error: type[Exception], expected: str) -> str:
    """A text file's contents; any problem is ``error`` with one line naming the file.

    Only regular files are read (a FIFO would block forever), and a broken or
    looping symbolic link is said to be one."""
    _check_file(path, error, expected)
    with _read_errors(path, error, expected):
        return Path(path).read_text(encoding="utf-8")


@contextlib.contextmanager
def _read_errors(path: str | os.PathLike[str], error: type[Exception], expected: str
                 ) -> Iterator[None]:
    """A file that went away, turned into a directory or cannot be read or decoded while it is
    read: ``error``, one line naming it."""
    try:
        yield
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, expected {expected}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read: {exc}") from None


def read_results(path: str | os.PathLike[str]) -> ResultSet:
    """Read a results file; any problem is a :class:`ResultsError` naming the file.

    The file is read through a window of a few MB and parsed one run at a time, each run's
    text and parsed object dropped once its :class:`RunResult` is built: what stays is the
    records (about the file's size; a file of many small runs a few times its size), never the
    records and the file's text at once. A file the window finds anything wrong with is read
    again whole (:class:`_Document` over the text), which names the problem and its line."""
    source = str(path)
    _check_file(path, ResultsError, "a results file")
    try:
        small = os.path.getsize(path) <= _Window.WINDOW
    except OSError as exc:
        raise ResultsError(f"{source}: cannot read: {exc}") from None
    try:
        if small:  # read whole: a window would be larger than the file
            raise _Whole
        with _read_errors(path, ResultsError, "a results file"), open(
                path, encoding="utf-8") as file:
            window = _Window(file, source)
            try:
                return window.read()
            except (ResultsError, _Whole):
                if window.held_whole:  # the window held the whole file: its refusal is the one
                    raise
    except _Whole:
        pass
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


class _Whole(Exception):
    """The window cannot read this document (not an object at the top): read it whole."""


class _Document:
    """A results document parsed member by member, and its ``runs`` one run at a time.

    The parse goes through a few primitives (:meth:`at`, :meth:`space`, :meth:`value`,
    :meth:`key`, :meth:`mark`, :meth:`ended`) over positions in :attr:`text`: here the whole
    document; :class:`_Window` keeps only a window of it."""

    def __init__(self, text: str, source: str) -> None:
        self.text, self.source = text, source
        self.memo: dict[Any, Any] = {}

    def fail(self, message: str, pos: int) -> ResultsError:
        return ResultsError(f"{self.source}: not valid JSON: {message} at "
                            f"{_position(self.text, pos)}")

    def mark(self, pos: int) -> int:
        """Nothing before ``pos`` is read again; the same place in :attr:`text`, returned."""
        return pos

    def at(self, pos: int, char: str) -> bool:
        return self.text.startswith(char, pos)

    def ended(self, pos: int) -> bool:
        return pos == len(self.text)

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

    def scan_key(self, pos: int) -> tuple[str, int]:
        """The string at ``pos`` (a key) and the position after it."""
        try:
            return json.decoder.scanstring(self.text, pos + 1)  # type: ignore[attr-defined]
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{self.source}: not valid JSON: {exc.msg} at line {exc.lineno} "
                               f"column {exc.colno}") from None

    def not_an_object(self) -> Any:
        """The document when it is not an object (refused whole, by :func:`loads_strict`)."""
        return loads_strict(self.text, self.source)

    def read(self) -> ResultSet:
        pos = self.space(self.mark(0))
        if not self.at(pos, "{"):  # not an object: the whole document is refused
            return results_from_dict(self.not_an_object(), self.source)
        head: dict[str, Any] = {}
        runs: list[RunResult] | None = None
        refusal: ResultsError | None = None  # a bad run, raised once the schema is known good
        pos = self.space(pos + 1)
        if self.at(pos, "}"):
            pos += 1
        else:
            while True:
                key, pos = self.key(self.mark(pos), head, runs is not None)
                if key == "schema":
                    head[key], pos = self.value(pos, key)
                    check_schema(head, self.source)
                elif key == "runs" and self.at(pos, "["):
                    runs, pos, refusal = self.runs(pos, "schema" in head)
                else:
                    head[key], pos = self.value(pos, key if key.isidentifier() else repr(key))
                pos = self.space(pos)
                if self.at(pos, ","):
                    pos = self.space(pos + 1)
                elif self.at(pos, "}"):
                    pos += 1
                    break
                else:
                    raise self.fail("Expecting ',' delimiter", pos)
        end = self.space(pos)
        if not self.ended(end):
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
        if not self.at(pos, '"'):
            raise self.fail("Expecting property name enclosed in double quotes", pos)
        key, end = self.scan_key(pos)
        if key in head or (key == "runs" and runs_read):
            raise ResultsError(
                f"{self.source}: malformed results file: the key {key!r:.60} appears twice in "
                f"the top level at {_position(self.text, pos)} (a key may appear once in an "
                "object)")
        end = self.space(end)
        if not self.at(end, ":"):
            raise self.fail("Expecting ':' delimiter", end)
        return key, self.space(end + 1)

    def runs(self, pos: int, schema_known: bool) -> tuple[list[RunResult], int,
                                                          ResultsError | None]:
        """The runs of the array at ``pos``, each built as soon as it is parsed. A bad run's
        refusal is returned, not raised, while the schema is still unknown (a document of
        another schema is refused for that first); later runs are then parsed, not built."""
        runs = list[RunResult]()
        refusal: ResultsError | None = None
        pos = self.space(pos + 1)
        if self.at(pos, "]"):
            return runs, pos + 1, None
        i = 0
        while True:
            run, pos = self.value(self.mark(pos), f"runs[{i}]")
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
            if self.at(pos, ","):
                pos = self.space(pos + 1)
                continue
            if not self.at(pos, "]"):
                raise self.fail("Expecting ',' delimiter", pos)
            return runs, pos + 1, refusal


class _Window(_Document):
    """A results document read through a window of the file: :attr:`text` holds the part from
    the last :meth:`mark` on, at least :data:`WINDOW` characters of it while the file lasts
    (more when one value is longer). Only the way through a good file is taken here: whatever
    goes wrong raises, and :func:`read_results` reads the file again whole for the message
    (:attr:`held_whole` says when this window held the whole file)."""

    WINDOW = 1 << 22  # characters read at a time (4 MB of ASCII)

    def __init__(self, file: TextIO, source: str) -> None:
        super().__init__("", source)
        self.file = file
        self.eof = False
        self.held_whole = True  # nothing of the file was dropped (yet)
        self.more(self.WINDOW)

    def more(self, chars: int) -> bool:
        """Read up to ``chars`` more characters; False at the end of the file."""
        if self.eof:
            return False
        chunk = self.file.read(chars)
        if not chunk:
            self.eof = True
            return False
        self.text += chunk
        return True

    def need(self, pos: int, chars: int = 1) -> None:
        """At least ``chars`` characters from ``pos`` on, or the file's end."""
        while len(self.text) - pos < chars and self.more(max(self.WINDOW, chars)):
            pass

    def mark(self, pos: int) -> int:
        if pos > len(self.text) // 2:  # drop what was read, copying the rest once in a while
            self.text = self.text[pos:]
            self.held_whole = False
            pos = 0
        self.need(pos, self.WINDOW)
        return pos

    def at(self, pos: int, char: str) -> bool:
        self.need(pos)
        return super().at(pos, char)

    def ended(self, pos: int) -> bool:
        self.need(pos)
        return super().ended(pos)

    def space(self, pos: int) -> int:
        end = super().space(pos)
        while end == len(self.text) and self.more(self.WINDOW):
            end = super().space(end)
        return end

    def value(self, pos: int, where: str) -> tuple[Any, int]:
        """The value at ``pos``, once the window holds it and one character after it (a number
        at the window's end may go on in the file)."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, pos)
            except json.JSONDecodeError:  # cut off by the window's end, or wrong
                end = -1
            except (_Duplicate, ValueError, RecursionError):
                raise _Whole from None
            if 0 <= end < len(self.text) or (end >= 0 and self.eof):
                return value, end
            if not self.more(max(self.WINDOW, len(self.text) - pos)):  # double what it holds
                raise _Whole

    def scan_key(self, pos: int) -> tuple[str, int]:
        while True:
            try:
                return json.decoder.scanstring(self.text, pos + 1)  # type: ignore[attr-defined]
            except json.JSONDecodeError:  # cut off by the window's end, or wrong
                if not self.more(self.WINDOW):
                    raise _Whole from None

    def not_an_object(self) -> Any:
        raise _Whole


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
