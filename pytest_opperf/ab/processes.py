"""The A/B side processes: starting, talking to, restarting and stopping them.

One process per side (``<python> -m pytest <args> -p pytest_opperf.ab.side``, cwd the side's
root, :class:`SideSpec`) collects the tests and then waits for orders on its socket
(:mod:`.protocol`); :class:`Side` is one such process and its channel, and turns a crash, a hang
or a broken message into a :class:`SideFailure` with the tail of the side's log.

:class:`Sides` holds both, generation after generation. Which side starts first is not neutral
(A/A here: 5-9 % on memory-bound e2e stats), so each generation after the first is two fresh
processes started in the other order (the *start order*, :attr:`Sides.first`); both collect at
once, and a side that collects other tests when started again fails the session (its collection
is not deterministic). Both sides of a generation get the same ``PYTHONHASHSEED``, and each
generation a new one (:func:`generation_env`): string hashing, and so the order of sets and the
layout of dicts, is one draw shared by the pair, not a difference between its two processes. So
is the size of their environment (:func:`layout_pad`, :data:`LAYOUT_ENV`): it moves the stack, and
the heap, whose offsets follow from every allocation before: two sides whose code differs by one
function no step calls lay out their arrays differently, and under one environment they would
do so alike in every generation (a relu 0.925-1.080 head/base by the environment's size alone,
docs/ab-statistics.md, "The layout of a process pair"); a new size each generation makes each
process pair a new draw of the layout. Both get one shared memory file for the session (the same
descriptor, :mod:`.arena`), where memory-bound per-op calls place their arrays, and both run with
address-space randomisation off where the OS allows it (:mod:`.aslr`). What runs on
them, and when, is the scheduling's (:mod:`.controller`). No pytest import.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import arena, aslr
from .protocol import ProtocolError, SideGone, SideTimeout, pair

__all__ = ["LAYOUT_ENV", "LAYOUT_PAD_MIN", "LAYOUT_PAD_SPAN", "LOG_TAIL_LINES", "Side",
           "SideFailure", "SideSpec", "Sides", "generation_env", "layout_pad", "usable_cpus"]

# The variable whose size is each generation's draw of the layout (its value: that many dots).
LAYOUT_ENV = "OPPERF_AB_LAYOUT"
# Its size: LAYOUT_PAD_MIN plus a multiple of 16 (the stack's and malloc's alignment) below
# LAYOUT_PAD_SPAN, a page: every cache-line alignment and every offset within a page. Past
# CPython's small-object allocator (512 bytes), so that the value's copy is malloc's, early.
LAYOUT_PAD_MIN = 1024
LAYOUT_PAD_SPAN = 4096
LOG_TAIL_LINES = 15  # the lines of a failed side's log its error shows


def layout_pad(seed: int, generation: int) -> int:
    """The size of :data:`LAYOUT_ENV` in ``generation``, drawn from the session's ``seed``."""
    return LAYOUT_PAD_MIN + random.Random(f"{seed}/{generation}").randrange(0, LAYOUT_PAD_SPAN, 16)


def generation_env(seed: int, generation: int, environ: dict[str, str]) -> dict[str, str]:
    """What both sides of ``generation`` add to their environment, the same for the two and
    another for each generation, drawn from the session's ``seed``: ``PYTHONHASHSEED`` (none when
    ``environ``, the session's, fixes it already: the user's seed is kept, for every side) and
    :data:`LAYOUT_ENV` (:func:`layout_pad`)."""
    pad = {LAYOUT_ENV: "." * layout_pad(seed, generation)}
    if "PYTHONHASHSEED" in environ:
        return pad
    return {"PYTHONHASHSEED": str((seed * 1_000_003 + generation * 7_919) % 4_294_967_295 + 1),
            **pad}


class SideFailure(Exception):
    """A side crashed, hung or broke the protocol; ``tail`` holds the last lines of its log."""

    def __init__(self, message: str, tail: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.tail = list(tail)


@dataclass(frozen=True)
class SideSpec:
    """How to start one side: its command, working directory, environment and log file."""

    name: str  # "base" | "head"
    command: list[str]
    cwd: Path
    env: dict[str, str]
    log: Path


class Side:
    """One running side process and its channel."""

    def __init__(self, spec: SideSpec, extra_env: dict[str, str] | None = None,
                 started: Callable[[Side], None] | None = None,
                 fds: Sequence[int] = ()) -> None:
        """Start the side, passing it the descriptors ``fds`` too; ``started`` is told of it as
        soon as its process exists, before anything else can fail or be interrupted (Ctrl-C,
        SIGTERM), so that its owner ends it."""
        self.spec = spec
        self.name = spec.name
        channel, theirs = pair()
        self.channel = channel
        env = dict(spec.env, **(extra_env or {}), OPPERF_AB_FD=str(theirs.fileno()),
                   OPPERF_AB_SIDE=spec.name)
        self._log = open(spec.log, "wb")  # noqa: SIM115 - open for the process's lifetime
        try:
            self.process = subprocess.Popen(aslr.fixed_layout(spec.command), cwd=spec.cwd, env=env,
                                            stdin=subprocess.DEVNULL,
                                            stdout=self._log, stderr=subprocess.STDOUT,
                                            pass_fds=(theirs.fileno(), *fds),
                                            start_new_session=True)
            if started is not None:
                started(self)
        except OSError as exc:
            self._log.close()
            channel.close()
            raise SideFailure(f"the {spec.name} side cannot start ({spec.command[0]}): "
                              f"{exc}") from None
        finally:
            theirs.close()
        self.last: dict[str, Any] = {}

    def tail(self, lines: int | None = None) -> list[str]:
        """The last ``lines`` lines of the side's log (None: ``LOG_TAIL_LINES``)."""
        lines = LOG_TAIL_LINES if lines is None else lines
        try:
            text = self.spec.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return text.rstrip().splitlines()[-lines:]

    def send(self, message: dict[str, Any], doing: str) -> None:
        try:
            self.channel.send(message)
        except SideGone:
            raise self._gone(doing) from None

    def receive(self, timeout: float, doing: str) -> dict[str, Any]:
        try:
            message = self.channel.receive(timeout)
        except SideTimeout:
            raise SideFailure(f"the {self.name} side hangs: no answer in {timeout:g} s "
                              f"while {doing} "
                              "(--opperf-compare-timeout)", self.tail()) from None
        except SideGone:
            raise self._gone(doing) from None
        except ProtocolError as exc:
            raise SideFailure(f"the {self.name} side broke the protocol while {doing}: {exc}",
                              self.tail()) from None
        if message.get("ev") == "error":
            raise SideFailure(f"the {self.name} side failed while {doing}: "
                              f"{message.get('message')}", self.tail())
        self.last = message
        return message

    def _gone(self, doing: str) -> SideFailure:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        how = "closed its connection" if code is None else (
            f"died (signal {-code})" if code < 0 else f"exited with status {code}")
        return SideFailure(f"the {self.name} side {how} while {doing}", self.tail())

    def stop(self, grace_s: float = 10.0) -> None:
        """End the process: ``finish``, then SIGTERM, then SIGKILL (its whole process group)."""
        if self.process.poll() is None:
            try:
                self.channel.send({"cmd": "finish"})
            except ProtocolError:
                pass
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    self.process.wait()
        self.channel.close()
        self._log.close()

    def kill(self) -> None:
        """End the process at once (SIGKILL to its process group)."""
        if self.process.poll() is None:
            self._signal(signal.SIGKILL)
            self.process.wait()
        self.channel.close()
        self._log.close()

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)  # the side and anything it started
        except (ProcessLookupError, PermissionError):
            try:
                self.process.send_signal(sig)
            except ProcessLookupError:
                pass


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, when there is a choice (else none: nothing to pin)."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    cpus = sorted(os.sched_getaffinity(0))
    return cpus if len(cpus) > 1 else []


def _other(name: str) -> str:
    return "head" if name == "base" else "base"


class Sides:
    """Both side processes of a session: :meth:`spawn` once, :meth:`restart` for each generation
    after the first, and always :meth:`close` (or :meth:`kill`)."""

    def __init__(self, base: SideSpec, head: SideSpec, first: str, timeout_s: float,
                 clock: Callable[[], float] = time.monotonic, seed: int = 0) -> None:
        self.specs = {"base": base, "head": head}
        self.seed = seed  # the session's: each generation's hash seed is drawn from it
        self.first = first  # the side started first in this generation
        self.timeout_s = timeout_s
        self.clock = clock
        self.generation = 0
        self.running: dict[str, Side] = {}
        self.ids: dict[str, list[str]] = {}  # each side's collected node ids
        self.spawn_s = 0.0  # how long the last start of both sides took
        self.arena_fd: int | None = None  # memory both sides share (:mod:`.arena`), made once
        self.placing = False  # both sides of this generation can place arrays in it
        self.arena_why: dict[str, Any] = {}  # why each side cannot ("": it can; None: unsaid)
        self.randomised: dict[str, str] = {}  # why a side of this generation has ASLR on

    def __getitem__(self, name: str) -> Side:
        return self.running[name]

    def generation_env(self, name: str) -> dict[str, str]:
        """What side ``name`` of this generation adds to its environment (the module's
        :func:`generation_env`)."""
        return generation_env(self.seed, self.generation, self.specs[name].env)

    def start_order(self) -> list[str]:
        """The sides in this generation's start order."""
        return [self.first, _other(self.first)]

    def spawn(self) -> dict[str, dict[str, Any]]:
        """Start both sides in this generation's order and wait for their collection (both
        collect at once: nothing is measured yet); returns each side's ``collected`` message."""
        spawned = self.clock()
        if self.arena_fd is None:
            self.arena_fd = arena.shared_fd()
        for name in self.start_order():
            Side(self.specs[name],
                 {**self.generation_env(name), arena.ARENA_FD_ENV: str(self.arena_fd)},
                 started=functools.partial(self.running.__setitem__, name),
                 fds=(self.arena_fd,))
        collected = {name: side.receive(self.timeout_s, "collecting the tests")
                     for name, side in self.running.items()}
        for name, message in collected.items():
            if message.get("ev") != "collected":
                raise SideFailure(f"the {name} side sent {message.get('ev')!r}, "
                                  "expected 'collected'",
                                  self.running[name].tail())
            ids = list(message.get("ids", []))
            if name in self.ids and ids != self.ids[name]:
                raise SideFailure(f"the {name} side collected other tests when started again "
                                  f"({len(ids)}, before {len(self.ids[name])}): its collection "
                                  "is not deterministic",
                                  self.running[name].tail())
            self.ids[name] = ids
        self.arena_why = {name: message.get("arena") for name, message in collected.items()}
        self.placing = all(why == "" for why in self.arena_why.values())
        self.randomised = self._randomised()
        self.spawn_s = self.clock() - spawned
        return collected

    def _randomised(self) -> dict[str, str]:
        """Why each side of this generation runs with address-space randomisation on (none of a
        side that runs with it off, :mod:`.aslr`)."""
        if not sys.platform.startswith("linux"):
            return {name: "not Linux" for name in self.running}
        out = {}
        for name, side in self.running.items():
            why = aslr.randomised(side.process.pid)
            if why is not None:
                out[name] = why
        return out

    def layout_note(self) -> str:
        """What the sides of the generations share besides the code under test, for the report."""
        shared = ("the size of" if "PYTHONHASHSEED" in self.specs["head"].env
                  else "its PYTHONHASHSEED and the size of")
        note = f"both sides of a generation share {shared} {LAYOUT_ENV}"
        if not self.randomised:
            return f"{note}, and run with address-space randomisation off"
        why = "; ".join(f"{name}: {why}" for name, why in sorted(self.randomised.items()))
        return f"{note}; address-space randomisation stays on ({why})"

    def unplaced_note(self) -> str:
        """The note of a generation whose sides place no arrays in the shared memory."""
        why = "; ".join(f"{name}: {self.arena_why.get(name) or 'no answer'}"
                        for name in ("base", "head") if self.arena_why.get(name) != "")
        return ("the arrays of memory-bound per-op calls stay in each side's own memory, a draw "
                f"per process (docs/ab-statistics.md): {why}")

    def restart(self) -> None:
        """A new generation: both sides ended, then started again in the other order."""
        self._end()
        self.generation += 1
        self.first = _other(self.first)
        collected = self.spawn()
        for name, message in collected.items():
            if message.get("errors"):
                raise SideFailure(f"the {name} side cannot collect the tests when started again",
                                  self.running[name].tail())

    def close(self, grace_s: float = 10.0) -> None:
        """End both processes and free the memory they shared (idempotent, never raises);
        ``grace_s`` for each to end by itself."""
        self._end(grace_s)
        self._free_arena()

    def _end(self, grace_s: float = 10.0) -> None:
        for side in self.running.values():
            try:
                side.stop(grace_s)
            except Exception:  # noqa: BLE001 - closing must go on to the other side
                side.kill()
        self.running.clear()

    def kill(self) -> None:
        """End both processes at once."""
        for side in self.running.values():
            side.kill()
        self.running.clear()
        self._free_arena()

    def _free_arena(self) -> None:
        if self.arena_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.arena_fd)
            self.arena_fd = None
