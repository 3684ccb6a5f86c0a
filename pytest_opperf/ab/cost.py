"""What each test of an A/B session cost: its metrics' pairs and its visits' wall seconds (pure).

The controller times every visit of a test (the test run on both sides, interleaved, from the
first order to the last answer, warm-up and calibration included) and adds its seconds to the
test's; the start of the side processes belongs to no test. A test's metrics are the decisions of
its runs (a run id is the test's node id, or ``<node id>#<window>`` for its extra windows), and
a metric's seconds are its test's: the pairs of all its metrics came from those visits.
:func:`costs` makes the rows (one per test with a decided metric, the most expensive first) that
the compare object keeps (``cost``, docs/reference/results.md) and the A/B section shows
(:mod:`.render`). :func:`fill` picks the tests a generation has room for from those costs, and
:func:`take_along` the cheap ones that go beside a generation the budget's tiers run anyway.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Cost", "costs", "fill", "node_of", "take_along"]


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


def fill(tests: Sequence[str], must: Collection[str], seconds: Mapping[str, float],
         wanting: Mapping[str, int], room: float) -> list[str]:
    """Of ``tests`` (in their order), those in ``must`` and as many of the others as fit with them
    in ``room`` seconds, each costing its last visit's ``seconds``: the most metrics wanting pairs
    (``wanting``) per second first, a test that does not fit skipped for a cheaper one. ``[]``
    when ``must`` leaves room for none of the others."""
    left = room - sum(seconds.get(t, 0.0) for t in tests if t in must)
    others = [t for t in tests if t not in must]
    chosen: set[str] = set()
    for test in sorted(others, key=lambda t: -wanting.get(t, 1) / max(seconds.get(t, 0.0), 1e-6)):
        if seconds.get(test, 0.0) <= left:
            chosen.add(test)
            left -= seconds.get(test, 0.0)
    return [t for t in tests if t in must or t in chosen] if chosen else []


def take_along(tests: Mapping[str, int], undecided: Mapping[str, int],
               seconds: Mapping[str, float], share: float) -> list[str]:
    """``tests`` (a generation that runs anyway, each with its metrics wanting pairs) and as many of
    the other ``undecided`` tests as fit beside them in ``share`` of their seconds (:func:`fill`:
    the most metrics per second first): the start of the sides is paid, and a visit of a cheap
    test is a new process pair for its metrics. ``tests`` alone when none fits; ``[]`` without
    ``tests``."""
    if not tests:
        return []
    room = (1.0 + share) * sum(seconds.get(t, 0.0) for t in tests)
    order = list(tests) + [t for t in undecided if t not in tests]
    return fill(order, tests, seconds, {**undecided, **tests}, room) or list(tests)
