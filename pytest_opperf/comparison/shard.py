"""Shards: a deterministic part ``K/N`` of a session's tests (``--opperf-shard=K/N``).

Pure logic, no pytest: :func:`parse` reads ``K/N``; :func:`partition` splits test ids into ``N``
parts balanced by their expected durations (the longest first, each to the part with the least
time so far; ties by id and by part number), so that every process that is given the same ids and
durations computes the same parts, whatever the order it collected them in. The union of the
parts is the whole selection and no test is in two. :func:`durations` reads the expected time of
each test from a baseline (the wall time of its runs); without a baseline every test counts as
one, which balances by count. :func:`selection_id` names the selection a shard is a part of, so
that ``python -m pytest_opperf merge`` can tell the shards of one selection apart from others.
"""

from __future__ import annotations

import hashlib
import heapq
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Shard", "ShardError", "durations", "parse", "partition", "select", "selection_id"]

MAX_SHARDS = 1000


class ShardError(ValueError):
    """A shard that cannot be taken (a bad ``K/N``, fewer tests than shards): one line."""


@dataclass(frozen=True)
class Shard:
    """Part ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse(text: str) -> Shard:
    """``K/N`` with 1 <= K <= N <= 1000, as whole numbers."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ShardError(f"expected K/N (shard K of N, e.g. 2/3), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise ShardError(f"the number of shards must be in [1, {MAX_SHARDS}], got {count}")
    if not 1 <= index <= count:
        raise ShardError(f"the shard must be in [1, {count}], got {index}")
    return Shard(index, count)


def partition(ids: Iterable[str], count: int,
              expected: Mapping[str, float] | None = None) -> list[list[str]]:
    """``count`` parts of ``ids`` (each id once), balanced by ``expected`` seconds per id (an id
    without one gets the median of the others; without any, every id counts as 1). Each part
    keeps the order of ``ids``; the assignment does not depend on that order."""
    order = list(dict.fromkeys(ids))
    if count < 1:
        raise ShardError(f"the number of shards must be at least 1, got {count}")
    known = [float(expected[i]) for i in order if expected and i in expected]
    fill = statistics.median(known) if known else 1.0
    cost = {i: float(expected[i]) if expected and i in expected else fill for i in order}
    loads: list[tuple[float, int]] = [(0.0, part) for part in range(count)]
    owner: dict[str, int] = {}
    for test in sorted(order, key=lambda i: (-cost[i], i)):  # longest first
        load, part = heapq.heappop(loads)
        owner[test] = part
        heapq.heappush(loads, (load + cost[test], part))
    parts: list[list[str]] = [[] for _ in range(count)]
    for test in order:
        parts[owner[test]].append(test)
    return parts


def select(ids: Sequence[str], shard: Shard,
           expected: Mapping[str, float] | None = None) -> list[str]:
    """The ids of ``shard`` (in the order of ``ids``); fewer ids than shards is an error: a
    shard with no test would run nothing and write no results."""
    unique = list(dict.fromkeys(ids))
    if len(unique) < shard.count:
        raise ShardError(f"{len(unique)} test(s) selected for {shard.count} shards: each shard "
                         "needs a test (use fewer shards)")
    return partition(unique, shard.count, expected)[shard.index - 1]


def durations(runs: Iterable[Any], tests: Iterable[str]) -> dict[str, float]:
    """The expected seconds of each of ``tests`` from a baseline's ``runs`` (objects with ``id``
    and ``wall_s``): the sum of the wall times of its runs; a test with no run has none."""
    known = set(tests)
    out: dict[str, float] = {}
    for run in runs:
        rid = str(run.id)
        test = rid if rid in known else rid.rsplit("#", 1)[0] if "#" in rid else None
        if test is None or test not in known:
            continue
        out[test] = out.get(test, 0.0) + max(0.0, float(run.wall_s))
    return out


def selection_id(ids: Iterable[str]) -> str:
    """A short name of a whole selection (every shard of it computes the same): the first 12
    hexadecimal digits of the SHA-256 of its sorted ids."""
    digest = hashlib.sha256("\n".join(sorted(set(ids))).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:12]


def record(shard: Shard, selected: int, of: int, selection: str, balanced_by: str
           ) -> dict[str, Any]:
    """The results file's ``session.shard`` object (docs/reference/results.md)."""
    return {"index": shard.index, "count": shard.count, "tests": selected, "of": of,
            "selection": selection, "balanced_by": balanced_by}
