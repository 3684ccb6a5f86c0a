"""The child's side of a counting pass under callgrind: :class:`Callgrind` switches instrumentation
on for the pass and, around each step, zeroes the counters, collects only while the step runs and
dumps them under the step's label (through
:func:`pytest_opperf.workcounts.valgrind.client_request`).

Callgrind's client requests act on the calling thread only (its collection switch, zeroing and
dumps are per thread), so a step's count is the instructions of the thread that ran the step.
:func:`pytest_opperf.workcounts.valgrind_run.child_env` therefore holds numpy's BLAS and OpenMP to
one thread, so that their work runs on that thread and is counted; work a step hands to threads of
its own is not counted.

This module must not import pytest: the child imports it at run time.
"""

from __future__ import annotations

import ctypes
import re

from .valgrind import (
    CALLGRIND_DUMP_STATS_AT,
    CALLGRIND_START_INSTRUMENTATION,
    CALLGRIND_STOP_INSTRUMENTATION,
    CALLGRIND_TOGGLE_COLLECT,
    CALLGRIND_ZERO_STATS,
    RequestFn,
    ValgrindError,
    client_request,
    client_request_problem,
    request_function,
    running_on_valgrind,
)

__all__ = ["Callgrind"]


_LABEL = re.compile(r"[A-Za-z0-9_.:/\[\]@+=,-]+(?: [A-Za-z0-9_.:/\[\]@+=,-]+)*")


def _check_label(label: str) -> str:
    """A step label becomes the tail of a ``desc:`` line in the dump; it must survive the trip."""
    if not isinstance(label, str) or len(label) > 200 or not _LABEL.fullmatch(label):
        raise ValueError(f"step label must be 1-200 characters of letters, digits, single spaces "
                         f"and _.:/[]@+=,- (no leading or trailing space), got {label!r}")
    return label


class Callgrind:
    """The child's side of the counting pass: instrumentation on for the pass, and per step only
    that step's instructions, dumped under its label.

    ``start_pass()`` switches instrumentation on (callgrind discards its translations, so this
    costs once per pass); ``begin_step()`` zeroes the thread's counters and starts collecting;
    ``end_step(label)`` stops collecting and dumps the counters (callgrind writes one file per
    dump, its ``desc: Trigger:`` line ending in the label); ``end_pass()`` switches
    instrumentation off again. Besides the step, only the request calls' own return and entry
    fall inside it: an empty step counts about 5,150 instructions (CPython 3.11).

    The toggles assume collection is off when the pass starts, as
    :func:`pytest_opperf.workcounts.valgrind_run.command`'s ``--collect-atstart=no`` makes it; under
    other options a step would count what lies between steps instead. Work the step runs on other
    threads is not counted (the module's docstring).

    Natively ``start_pass()`` raises :class:`ValgrindError` (and the step methods then refuse with
    ``RuntimeError``, no pass being open): a counting pass that silently counted nothing would look
    like a pass of free steps. Check ``running()`` first."""

    def __init__(self) -> None:
        self._in_pass = False
        self._in_step = False
        self._labels: set[str] = set()
        self._fn: RequestFn = None  # the request function, once a pass starts
        self._toggle = (ctypes.c_uint64 * 6)(CALLGRIND_TOGGLE_COLLECT)
        self._toggle_address = ctypes.addressof(self._toggle)

    def running(self) -> bool:
        """Whether this process runs under valgrind (and can issue requests)."""
        return running_on_valgrind() > 0

    def start_pass(self) -> None:
        if not self.running():
            raise ValgrindError("Callgrind.start_pass(): this process is not running under "
                                "valgrind" + _why_not())
        if self._in_pass:
            raise RuntimeError("Callgrind.start_pass(): a pass is already open")
        # Switching instrumentation resets every thread's collection state to the start value
        # (--collect-atstart=no: off), so the toggles below start from a known state.
        client_request(CALLGRIND_START_INSTRUMENTATION)
        self._fn = request_function()
        self._in_pass = True
        self._labels = set()

    def begin_step(self) -> None:
        if not self._in_pass:
            raise RuntimeError("Callgrind.begin_step(): no pass is open (start_pass() first)")
        if self._in_step:
            raise RuntimeError("Callgrind.begin_step(): the previous step was not ended")
        self._in_step = True
        client_request(CALLGRIND_ZERO_STATS)
        # Collection on: the last thing before the step, and through a prepared argument block,
        # so that little of the request call's own work is counted with the step.
        self._fn(self._toggle_address, 0)

    def end_step(self, label: str) -> None:
        if self._in_step:
            self._fn(self._toggle_address, 0)  # collection off: the first thing after the step
        else:
            raise RuntimeError("Callgrind.end_step(): no step was begun")
        self._in_step = False
        _check_label(label)
        if label in self._labels:
            raise ValueError(f"Callgrind.end_step(): label {label!r} is already used in this pass")
        self._labels.add(label)
        # callgrind copies the label into the dump before the request returns
        buffer = ctypes.create_string_buffer(label.encode("ascii"))
        client_request(CALLGRIND_DUMP_STATS_AT, ctypes.addressof(buffer))

    def end_pass(self) -> None:
        if not self._in_pass:
            raise RuntimeError("Callgrind.end_pass(): no pass is open")
        self._in_step = False  # stopping instrumentation switches collection off as well
        client_request(CALLGRIND_STOP_INSTRUMENTATION)
        self._in_pass = False


def _why_not() -> str:
    reason = client_request_problem()
    return f" ({reason})" if reason else ""
