"""The parts of the results JSON's ``compare`` object that later writers added, read back (pure).

Each is absent in files of older writers, which read as before: ``interpreters`` (each side's
interpreter), ``generations`` (per generation of side processes: its pairs and bias,
:func:`pytest_opperf.ab.generations.generation_bias`, and its draw of the layout, absent before
there was one) and ``cost`` (per test: its metrics, pairs,
visits and seconds, :mod:`.cost`), and each decision's ``explain`` (why a regressed or
inconclusive metric got slower, :mod:`pytest_opperf.explain.diff`).
:meth:`pytest_opperf.ab.paired.CompareResult.from_dict` reads the rest; fields in
docs/reference/results.md.
"""

from __future__ import annotations

from typing import Any

from ..comparison.metrics import MetricKey
from ..explain.diff import Explanation
from ..records.checks import MAX_COUNT, MAX_TIME, is_num
from ..results import ResultsError
from .cost import Cost

__all__ = ["need", "read_explain", "read_extras"]


def need(cond: bool, source: str, what: str) -> None:
    """Refuses a malformed compare object (raises :class:`pytest_opperf.results.ResultsError`)."""
    if not cond:
        raise ResultsError(f"{source}: malformed compare object: {what}")


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT


def _cost(row: Any) -> bool:
    return (isinstance(row, dict) and isinstance(row.get("test"), str)
            and all(_count(row.get(k)) for k in ("metrics", "pairs", "visits"))
            and is_num(row.get("seconds")) and 0 <= row["seconds"] <= MAX_TIME)


def read_extras(data: dict[str, Any], source: str) -> tuple[
        dict[str, dict[str, Any]] | None, list[dict[str, Any]], list[Cost]]:
    """``data``'s interpreters (None when absent), generations and cost (empty when absent),
    checked (raises :class:`pytest_opperf.results.ResultsError`)."""
    interpreters = data.get("interpreters")
    need(interpreters is None or (isinstance(interpreters, dict) and all(
        isinstance(side, dict) and all(v is None or isinstance(v, str) for v in side.values())
        for side in interpreters.values())), source,
        "compare.interpreters is not an object of objects of strings")
    generations = data.get("generations", [])
    need(isinstance(generations, list) and all(
        isinstance(g, dict) and isinstance(g.get("generation"), int)
        and g.get("first") in ("base", "head") and isinstance(g.get("pairs"), int)
        and isinstance(g.get("metrics"), int)
        and (g.get("geometric_mean") is None or is_num(g["geometric_mean"]))
        and (g.get("layout") is None or _count(g["layout"]))
        for g in generations), source,
        "compare.generations is not a list of {generation, first, pairs, metrics, "
        "geometric_mean, layout} objects")
    cost = data.get("cost", [])
    need(isinstance(cost, list) and all(_cost(row) for row in cost), source,
          "compare.cost is not a list of {test, metrics, pairs, visits, seconds} objects "
          "(counts, and seconds in [0, 1e12])")
    return (interpreters, [dict(g) for g in generations],
            [Cost(c["test"], c["metrics"], c["pairs"], c["visits"], float(c["seconds"]))
             for c in cost])


def read_explain(data: dict[str, Any], source: str) -> dict[MetricKey, Explanation]:
    """The explanations of ``data``'s decisions (those with an ``explain`` object), by metric."""
    out = {}
    for i, d in enumerate(data.get("decisions", [])):
        if isinstance(d, dict) and d.get("explain") is not None:
            try:
                out[MetricKey(str(d.get("run")), str(d.get("metric")))] = Explanation.from_dict(
                    d["explain"], f"compare.decisions[{i}]")
            except ValueError as exc:
                raise ResultsError(f"{source}: malformed compare object: {exc}") from None
    return out
