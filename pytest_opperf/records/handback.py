"""What a child process hands back to its parent: one versioned JSON envelope.

Three kinds of child measure for a parent and never gate, report or write the user's files
(:mod:`pytest_opperf.glue.roles`): an xdist worker (its envelope, at its session's end, in xdist's
``workeroutput``), an A/B side (one envelope per test, the ``done`` message of
:mod:`pytest_opperf.ab.protocol`) and the valgrind child of ``--opperf-instructions`` (its
envelope, at its session's end, in the file :data:`FILE` of the directory its parent gives it; the
instruction counts themselves are callgrind's dumps). Each puts what it has in one
:class:`Envelope`; the parent reads it back with :func:`Envelope.from_dict` (or
:func:`Envelope.loads`), which refuses a malformed or newer envelope with one line.

The JSON object: ``envelope`` (:data:`VERSION`), ``role`` (one of :data:`CHILD_ROLES`),
``results`` (the runs, as a results file holds them, traces included), and the fields a role
fills: ``untimed``, ``plain``, ``deselected`` (counts the report states), ``device`` (a GPU
worker's device and NVML snapshots), ``shard`` (an xdist worker's ``session.shard``: the part of
``--opperf-shard`` it took), ``nodeid``, ``failed`` and ``reports`` (an A/B side's test:
pytest's serialised reports), ``windows`` (the valgrind child: the run id of each counting pass,
in order).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..results import ResultsError, ResultSet, RunResult
from .checks import results_from_dict

__all__ = ["CHILD_ROLES", "FILE", "VERSION", "Envelope", "HandBackError"]

VERSION = 1
CHILD_ROLES = ("xdist-worker", "ab-side", "valgrind-child")
FILE = "envelope.json"  # the valgrind child's envelope, in the directory its parent gives it


class HandBackError(Exception):
    """An envelope that cannot be read; the message says why."""


@dataclass(frozen=True)
class Envelope:
    role: str
    runs: list[RunResult] = field(default_factory=list)
    untimed: int = 0  # per-op benchmarks that ran untimed
    plain: int = 0  # tests with pytest-benchmark's plain fixture
    deselected: int = 0
    device: dict[str, Any] | None = None  # a GPU worker's device and NVML snapshots
    nodeid: str | None = None  # an A/B side: the test the envelope ends
    failed: bool = False
    reports: list[dict[str, Any]] = field(default_factory=list)
    windows: list[str] = field(default_factory=list)  # the valgrind child's counting passes
    shard: dict[str, Any] | None = None  # an xdist worker's shard (session.shard of results)

    def __post_init__(self) -> None:
        if self.role not in CHILD_ROLES:
            raise ValueError(f"envelope role {self.role!r}, expected one of "
                             f"{'|'.join(CHILD_ROLES)}")

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "envelope": VERSION, "role": self.role,
            "results": ResultSet(runs=self.runs).to_dict(with_trace=True),
            "untimed": self.untimed, "plain": self.plain, "deselected": self.deselected,
            "failed": self.failed, "reports": self.reports, "windows": self.windows}
        if self.device is not None:
            payload["device"] = self.device
        if self.nodeid is not None:
            payload["nodeid"] = self.nodeid
        if self.shard is not None:
            payload["shard"] = self.shard
        return payload

    def dumps(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def loads(cls, data: str, source: str, role: str) -> Envelope:
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise HandBackError(f"not JSON: {exc}") from None
        return cls.from_dict(payload, source, role)

    @classmethod
    def from_dict(cls, payload: Any, source: str, role: str, unversioned: bool = False
                  ) -> Envelope:
        """The envelope of ``role`` in ``payload``; ``unversioned``: also one without
        ``envelope`` (an A/B base side of an earlier release sends its fields bare)."""
        if not isinstance(payload, dict):
            raise HandBackError(f"expected a JSON object, got {type(payload).__name__}")
        version = payload.get("envelope")
        if version is None and unversioned:
            payload = {**payload, "role": role}
        elif version != VERSION:
            raise HandBackError(f"envelope version {version!r}, this release reads {VERSION}")
        if payload.get("role") != role:
            raise HandBackError(f"an envelope of {payload.get('role')!r}, expected {role!r}")
        try:
            results = payload.get("results") or {"schema": "opperf/1", "runs": []}
            runs = results_from_dict(results, source=source).runs
            device = payload.get("device")
            nodeid = payload.get("nodeid")
            shard = payload.get("shard")
            return cls(role, runs, int(payload.get("untimed", 0)), int(payload.get("plain", 0)),
                       int(payload.get("deselected", 0)),
                       device if isinstance(device, dict) else None,
                       None if nodeid is None else str(nodeid), bool(payload.get("failed")),
                       _list(payload, "reports", dict), _list(payload, "windows", str),
                       shard if isinstance(shard, dict) else None)
        except (ValueError, KeyError, TypeError, ResultsError) as exc:
            raise HandBackError(str(exc)) from None


def _list(payload: dict[str, Any], key: str, kind: type) -> list[Any]:
    value = payload.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, kind) for v in value):
        raise HandBackError(f"{key!r} is not a list of {kind.__name__}")
    return value
