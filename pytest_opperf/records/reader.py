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
import stat
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ..results import ResultsError, ResultSet, RunResult
from .checks import check_schema, finish, load_run, need, results_from_dict
from .strict_json import (
    DECODER,
    NOT_JSON,
    NUMBER_CHARS,
    SPACE,
    Duplicate,
    loads_strict,
    locate,
    position,
    strict_object,
)

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
                            f"{position(self.text, pos)}")

    def mark(self, pos: int) -> int:
        """Nothing before ``pos`` is read again; the same place in :attr:`text`, returned."""
        return pos

    def at(self, pos: int, char: str) -> bool:
        return self.text.startswith(char, pos)

    def ended(self, pos: int) -> bool:
        return pos == len(self.text)

    def space(self, pos: int) -> int:
        return SPACE.match(self.text, pos).end()  # type: ignore[union-attr]

    def decode(self, pos: int) -> tuple[Any, int]:
        """The value the window holds at ``pos`` and its end; end -1 when the window's end cuts
        it off (or it is wrong: reading on, or the whole file's read, says which)."""
        try:
            return DECODER.raw_decode(self.text, pos)
        except json.JSONDecodeError:
            return None, -1
        except (Duplicate, ValueError, RecursionError):
            raise _Whole from None

    def value(self, pos: int, where: str) -> tuple[Any, int]:
        """The JSON value at ``pos`` and the position after it."""
        try:
            return DECODER.raw_decode(self.text, pos)
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{self.source}: not valid JSON: {exc.msg} at line {exc.lineno} "
                               f"column {exc.colno}") from None
        except RecursionError:
            raise ResultsError(f"{self.source}: not a results file: nested too deeply") from None
        except (Duplicate, ValueError) as exc:  # a key twice, NaN, too many digits
            found = locate(self.text, pos, where)
            if found is None:
                found = (f"malformed results file: the key {str(exc)!r:.60} appears twice in "
                         f"{where}" if isinstance(exc, Duplicate) else f"not valid JSON: {exc}")
            raise ResultsError(f"{self.source}: {found}") from None

    def run_value(self, pos: int, where: str) -> tuple[Any, int]:
        """The run at ``pos`` (:class:`_Window` streams one larger than its window)."""
        return self.value(pos, where)

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
                f"the top level at {position(self.text, pos)} (a key may appear once in an "
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
            run, pos = self.run_value(self.mark(pos), f"runs[{i}]")
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
        """The value at ``pos``, once the window holds it and one character after it that no
        number goes on with (a number at the window's end may go on in the file: ``0.`` reads
        as 0, cut from ``0.5``)."""
        while True:
            value, end = self.decode(pos)
            if end >= 0 and (self.eof or (end < len(self.text) and not (
                    type(value) in (int, float) and self.text[end] in ".eE+-0123456789"))):
                return value, end
            if not self.more(max(self.WINDOW, len(self.text) - pos)):  # double what it holds
                raise _Whole

    def run_value(self, pos: int, where: str) -> tuple[Any, int]:
        """A run the window holds is parsed at once, in C; a larger one (a stat of millions of
        samples) member by member, each stat's samples packed a part of the window at a time
        (:meth:`samples`), the text read dropped as it goes: neither the run's text nor its
        samples as a list of floats (32 bytes a sample) ever exist whole."""
        value, end = self.decode(pos)
        if 0 <= end < len(self.text) or (end >= 0 and self.eof):
            return value, end
        return self.members(pos, where, run=True)

    def members(self, pos: int, where: str, run: bool) -> tuple[dict[str, Any], int]:
        """The object at ``pos`` (a run, or one of its stats) and the position after it, its
        ``stats`` (a run's) and ``samples_ms`` (a stat's) streamed; whatever is not the way
        through a good file raises :class:`_Whole` (the whole file's read names it)."""
        if not self.at(pos, "{"):
            raise _Whole
        pairs: list[tuple[str, Any]] = []
        pos = self.space(pos + 1)
        if self.at(pos, "}"):
            return strict_object(pairs), pos + 1
        while True:
            if not self.at(pos, '"'):
                raise _Whole
            key, pos = self.scan_key(pos)
            pos = self.space(pos)
            if not self.at(pos, ":"):
                raise _Whole
            pos = self.mark(self.space(pos + 1))  # what was read is dropped
            if run and key == "stats" and self.at(pos, "["):
                stats: list[dict[str, Any]] = []
                pos = self.space(pos + 1)
                while not self.at(pos, "]") or stats:
                    stat, pos = self.members(self.mark(pos), where, run=False)
                    stats.append(stat)
                    pos = self.space(pos)
                    if self.at(pos, "]"):
                        break
                    if not self.at(pos, ","):
                        raise _Whole
                    pos = self.space(pos + 1)
                pairs.append((key, stats))
                pos += 1
            elif not run and key == "samples_ms" and self.at(pos, "["):
                samples, pos = self.samples(pos)
                pairs.append((key, samples))
            else:
                value, pos = self.value(pos, where)
                pairs.append((key, value))
            pos = self.space(pos)
            if self.at(pos, ","):
                pos = self.space(pos + 1)
            elif self.at(pos, "}"):
                try:
                    return strict_object(pairs), pos + 1
                except Duplicate:  # a key twice: the whole file's read names it
                    raise _Whole from None
            else:
                raise _Whole

    def samples(self, pos: int) -> tuple[array[float], int]:
        """The array of numbers at ``pos``, packed half a window at a time (each part checked
        to hold JSON numbers only first)."""
        out = array("d")
        pos = self.space(pos + 1)
        if self.at(pos, "]"):
            return out, pos + 1
        size = max(self.WINDOW // 2, 64)  # a few numbers at least
        while True:
            pos = self.mark(pos)
            self.need(pos, size)
            part = self.text[pos:pos + size]
            close = part.find("]")
            last = close >= 0
            cut = close if last else part.rfind(",")
            if (cut <= 0 or not NUMBER_CHARS.fullmatch(part, 0, cut)
                    or NOT_JSON.search(part, 0, cut)):
                raise _Whole  # not numbers only (null, a string, a nested list), or cut short
            try:
                out.extend(map(float, part[:cut].split(",")))
            except ValueError:  # an empty item (1,,2), a space inside a number
                raise _Whole from None
            pos += cut + 1
            if last:
                return out, pos

    def scan_key(self, pos: int) -> tuple[str, int]:
        while True:
            try:
                return json.decoder.scanstring(self.text, pos + 1)  # type: ignore[attr-defined]
            except json.JSONDecodeError:  # cut off by the window's end, or wrong
                if not self.more(self.WINDOW):
                    raise _Whole from None

    def not_an_object(self) -> Any:
        raise _Whole
