"""What each test of an A/B session cost: its metrics' pairs and its visits' wall seconds (pure).

The controller times every visit of a test (the test run on both sides, interleaved, from the
first order to the last answer, warm-up and calibration included) and adds its seconds to the
test's; the start of the side processes belongs to no test. A test's metrics are the decisions of
its runs (a run id is the test's node id, or ``<node id>#<window>`` for its extra windows), and
a metric's seconds are its test's: the pairs of all its metrics came from those visits.
:func:`costs` makes the rows (one per test with a decided metric, the most expensive first) that
the compare object keeps (``cost``, docs/reference/results.md) and the A/B section shows
(:mod:`.render`). :func:`choose` picks the tests a generation has room for from those costs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Cost", "choose", "costs", "node_of"]


def node_of(run_id: str) -> str:
    """The test (node id) a run belongs to: extra windows of a test are ``<node id>#<name>``."""
    return run_id.split("#", 1)[0]


class _Key(Protocol):
    @property
    def run(self) -> str: ...


class _Decided(Protocol):  # a paired.Decision, as far as the cost reads it
    @property
    def key(self) -> _Key: ...

    @property
    def pairs(self) -> int: ...


@dataclass(frozen=True)
class Cost:
    """One test's cost: its decided ``metrics``, the most ``pairs`` any of them got (an e2e test:
    the steps compared; a per-op benchmark: its pairs), its ``visits`` (each on both sides) and
    their wall ``seconds``."""

    test: str
    metrics: int
    pairs: int
    visits: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "metrics": self.metrics, "pairs": self.pairs,
                "visits": self.visits, "seconds": self.seconds}


def costs(decisions: Iterable[_Decided], seconds: Mapping[str, float],
          visits: Mapping[str, int]) -> list[Cost]:
    """One :class:`Cost` per test with a decision, the most expensive first (then by node id):
    ``seconds`` and ``visits`` are the controller's, per test."""
    metrics: dict[str, int] = {}
    pairs: dict[str, int] = {}
    for d in decisions:
        test = node_of(d.key.run)
        metrics[test] = metrics.get(test, 0) + 1
        pairs[test] = max(pairs.get(test, 0), d.pairs)
    rows = [Cost(t, metrics[t], pairs[t], visits.get(t, 0), seconds.get(t, 0.0)) for t in metrics]
    return sorted(rows, key=lambda c: (-c.seconds, c.test))


def choose(gate: Mapping[str, int], other: Mapping[str, int], seconds: Mapping[str, float],
           rooms: tuple[float, float], along: float) -> list[str]:
    """The tests a generation runs: of ``gate`` (each with its metrics the gate waits for), then
    of ``other`` (each with its other undecided metrics), the most metrics per second of the
    test's last visit (``seconds``) first, each while the seconds chosen with it fit in its group's
    room (``rooms``: the ceiling's, the reruns' budget's), a test that does not fit skipped for a
    cheaper one. Once a test of ``gate`` is chosen, the others' room is at least the seconds chosen
    and ``along`` more: the sides start anyway."""
    chosen: list[str] = []
    used = 0.0
    for group, room in zip((gate, other), rooms, strict=True):
        if group is other and chosen:
            room = max(room, used + along)
        for test in _by_worth(group, seconds):
            if test not in chosen and used + seconds.get(test, 0.0) <= room:
                chosen.append(test)
                used += seconds.get(test, 0.0)
    return chosen


def _by_worth(wanting: Mapping[str, int], seconds: Mapping[str, float]) -> list[str]:
    """``wanting``'s tests, the most metrics per second first (stable)."""
    return sorted(wanting, key=lambda t: -wanting[t] / max(seconds.get(t, 0.0), 1e-6))
