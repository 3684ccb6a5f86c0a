"""Callgrind's output files read back: :func:`parse_dump` reads one file (its header and totals)
into a :class:`Dump`, :func:`read_step_counts` each step label's instruction count from the dumps
of a counting pass; a file callgrind did not write whole is a :class:`CallgrindFormatError` naming
it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .valgrind import ValgrindError

__all__ = ["OUT_PREFIX", "CallgrindFormatError", "Dump", "parse_dump", "read_step_counts"]

OUT_PREFIX = "callgrind.out"  # callgrind's files: OUT_PREFIX.<pid>.<part>


class CallgrindFormatError(ValgrindError):
    """A callgrind output file that is not what callgrind writes; the message names the file."""


@dataclass(frozen=True)
class Dump:
    """One callgrind output file: its part number, the ``desc: Trigger:`` text, the label of a
    :meth:`pytest_opperf.workcounts.callgrind.Callgrind.end_step` dump (``None`` for other dumps),
    the event names, and the counts of the ``totals:`` and ``summary:`` lines, one per event
    (``None`` for a line not there; one of them always is)."""

    source: str
    part: int | None
    trigger: str | None
    label: str | None
    events: tuple[str, ...]
    totals: tuple[int, ...] | None
    summary: tuple[int, ...] | None

    def count(self, event: str = "Ir") -> int:
        """The dump's total of ``event`` (``totals:``, else ``summary:``); ``Ir`` is
        instructions executed."""
        if event not in self.events:
            raise CallgrindFormatError(f"{self.source}: no event {event!r} (events: "
                                       f"{' '.join(self.events)})")
        counts = self.totals if self.totals is not None else self.summary
        assert counts is not None  # parse_dump refuses a file with neither
        return counts[self.events.index(event)]


_STEP_TRIGGER = "Client Request: "
_HEADER = re.compile(r"([a-z]+):(.*)")
_NUMBERS = re.compile(r"\d+(?: +\d+)*")


def parse_dump(text: str, source: str = "<text>") -> Dump:
    """Parse callgrind's output format (the header: ``version:``, ``part:``, ``desc:``,
    ``events:``, ``summary:``; the ``totals:`` line) far enough to read the totals. Raises
    :class:`CallgrindFormatError` naming ``source`` for a file callgrind did not write whole."""

    def bad(why: str) -> CallgrindFormatError:
        return CallgrindFormatError(f"{source}: not a callgrind output file: {why}")

    lines = text.splitlines()
    if not lines or lines[0].strip() != "# callgrind format":
        first = lines[0][:40] if lines else ""
        raise bad(f"first line is {first!r}, expected '# callgrind format'")
    fields: dict[str, list[str]] = {}
    for line in lines[1:]:
        match = _HEADER.fullmatch(line)
        if match and match.group(1) in ("version", "part", "desc", "events", "summary", "totals"):
            fields.setdefault(match.group(1), []).append(match.group(2).strip())
    for key in ("version", "part", "events", "summary", "totals"):
        if len(fields.get(key, [])) > 1:
            raise bad(f"{len(fields[key])} '{key}:' lines")
    if fields.get("version", ["1"])[0] != "1":
        raise bad(f"version {fields['version'][0]!r}, expected 1")
    if "events" not in fields or not fields["events"][0]:
        raise bad("no 'events:' line")
    events = tuple(fields["events"][0].split())

    def numbers(key: str) -> tuple[int, ...] | None:
        if key not in fields:
            return None
        value = fields[key][0]
        if not _NUMBERS.fullmatch(value):
            raise bad(f"'{key}: {value[:40]}' is not a list of counts")
        counts = tuple(int(n) for n in value.split())
        if len(counts) > len(events):
            raise bad(f"'{key}:' has {len(counts)} counts for {len(events)} events")
        return counts + (0,) * (len(events) - len(counts))  # the format lets trailing 0s go

    totals, summary = numbers("totals"), numbers("summary")
    if totals is None and summary is None:
        raise bad("neither a 'totals:' nor a 'summary:' line (a file cut short?)")
    part = None
    if "part" in fields:
        if not fields["part"][0].isdigit():
            raise bad(f"'part: {fields['part'][0][:40]}' is not a number")
        part = int(fields["part"][0])
    triggers = [d[len("Trigger:"):].strip() for d in fields.get("desc", [])
                if d.startswith("Trigger:")]
    trigger = triggers[0] if triggers else None
    label = None
    if trigger is not None and trigger.startswith(_STEP_TRIGGER):
        label = trigger[len(_STEP_TRIGGER):]
    return Dump(source, part, trigger, label, events, totals, summary)


def read_step_counts(out_dir: str | os.PathLike[str], pid: int | None = None,
                     event: str = "Ir") -> dict[str, int]:
    """Each step label's count of ``event`` (instructions by default) from the dumps in
    ``out_dir`` (of process ``pid`` only, when given), in the order of the steps. Raises
    :class:`CallgrindFormatError` for a malformed dump, a label dumped twice, or a step's dump
    without both a ``summary:`` and a ``totals:`` line, or whose two disagree (callgrind writes
    both; the exit dump's summary is wrong after zeroing, so other dumps are not held to it)."""
    pattern = re.compile(re.escape(OUT_PREFIX) + r"\.(\d+)\.(\d+)")
    found: list[tuple[int, int, Path]] = []
    for path in Path(out_dir).iterdir():
        match = pattern.fullmatch(path.name)
        if match and (pid is None or int(match.group(1)) == pid):
            found.append((int(match.group(1)), int(match.group(2)), path))
    counts: dict[str, int] = {}
    for _, _, path in sorted(found):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ValgrindError(f"cannot read {path}: {exc.strerror}") from None
        dump = parse_dump(text, str(path))
        if dump.label is None:
            continue
        if dump.totals is None or dump.summary is None:
            missing = "totals" if dump.totals is None else "summary"
            raise CallgrindFormatError(f"{path}: step {dump.label!r} has no '{missing}:' line "
                                       f"(a file cut short?)")
        if dump.summary != dump.totals:
            raise CallgrindFormatError(f"{path}: 'summary:' {dump.summary} and 'totals:' "
                                       f"{dump.totals} disagree")
        if dump.label in counts:
            raise CallgrindFormatError(f"{path}: step {dump.label!r} is dumped twice")
        counts[dump.label] = dump.count(event)
    return counts
