"""Messages between the A/B controller and its two side processes: JSON lines over a socket.

The controller makes a socketpair per side and passes one end to the child
(its descriptor number in ``OPPERF_AB_FD``); stdout and stderr stay pytest's
and go to the side's log. Every message is one JSON object on one line.

Controller -> side (``cmd``):

* ``run``: ``{"cmd": "run", "nodeid": id, "next": id|null, "first": bool}``:
  run one test (``next`` is the item pytest tears down towards).
* ``go``: resume after a step hand-over or a benchmark, until the next
  hand-over point or the end of the test.
* ``calibrate``: ``{"cmd": "calibrate", "min_round_s": s}``: find the
  iterations per round that make a round last at least ``min_round_s``.
* ``block``: ``{"cmd": "block", "rounds": r, "iterations": i, "cpu": n, "place": k}``:
  one untimed warm-up call, then ``r`` timed rounds of ``i`` calls, the calling
  thread kept on CPU ``n`` meanwhile (no ``cpu``: where the scheduler puts it),
  the arrays of a memory-bound call in the memory both sides share, from where
  the seed ``k`` says, the same for both blocks of a pair (:mod:`.arena`; no
  ``place``: the arrays as the test gave them).
* ``finish``: end the session (the side's pytest exits).

Side -> controller (``ev``):

* ``collected``: ``{"ids": [...], "errors": [[nodeid, message], ...], "extensions":
  [{"module", "path", "in_checkout", "size", "sha256"}, ...]}`` (the compiled extension modules
  it has loaded: :mod:`.extensions`; a side that sends none is not checked), ``"arena": why``
  (why the side cannot place arrays in the shared memory; ``""``: it can).
* ``step``: a measured window ended a step and waits for ``go``.
* ``bench``: a per-op benchmark is ready and waits for ``calibrate``/``block``/``go``.
* ``calibrated``: ``{"iterations": i, "round_s": s}``; ``block``: ``{"per_call_s": [...],
  "cpu": n|null, "arena": why}`` (the CPU the block ended on; ``arena``, only once the side
  has stopped placing arrays in the shared memory: why).
* ``done``: the test ended: ``{"reports": [...], "runs": [...], "failed": bool}``.
* ``error``: the side cannot go on: ``{"message": text}``.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from typing import Any

__all__ = ["Channel", "ProtocolError", "SideGone", "SideTimeout", "FD_ENV"]

FD_ENV = "OPPERF_AB_FD"


class ProtocolError(Exception):
    """A message that is not what the protocol allows."""


class SideGone(ProtocolError):
    """The other end closed the connection (the process ended or crashed)."""


class SideTimeout(ProtocolError):
    """No message within the timeout (the other end hangs)."""


class Channel:
    """One end of the connection: send and receive JSON objects, one per line."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        return cls(socket.socket(fileno=fd))

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise SideGone(f"connection closed ({exc})") from None

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message; :class:`SideTimeout` after ``timeout`` seconds, :class:`SideGone`
        on EOF."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                    raise SideTimeout(f"no message in {timeout:g} s")
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError as exc:
                raise SideGone(f"connection closed ({exc})") from None
            if not chunk:
                raise SideGone("connection closed")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise ProtocolError(f"malformed message {line[:80]!r}: {exc}") from None
        if not isinstance(message, dict):
            raise ProtocolError(f"expected a JSON object, got {line[:80]!r}")
        return message

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def pair() -> tuple[Channel, socket.socket]:
    """The controller's channel and the child's socket (inheritable, to pass in ``pass_fds``)."""
    mine, theirs = socket.socketpair()
    theirs.set_inheritable(True)
    return Channel(mine), theirs


def child_fd() -> int | None:
    value = os.environ.get(FD_ENV)
    return int(value) if value and value.isdigit() else None
