"""The peer table: the reference framework's op times next to torch's, per op type and shape.

Pure: it reads the session's runs. The per-op runs of ``suites/test_ops.py``
and ``suites/torch/test_torch.py`` have the same test ids
(``test_op[conv2d-N8xC64x16x16-k3s1p1-o64]``); for every id both ran, the
median time per call of each side is taken, and summed per op type over the
shapes both have. The e2e runs (``test_train``) add a line each with
examples/sec and the Python share.
"""

from __future__ import annotations

import statistics
from typing import Any

from tabulate import tabulate

__all__ = ["peer_lines"]

REFERENCE, TORCH = "suites/test_ops.py::", "suites/torch/test_torch.py::"
REFERENCE_E2E, TORCH_E2E = "suites/test_resnet50.py::", TORCH


def _median_ms(run: Any) -> float | None:
    stat = run.stats[0] if run.stats else None
    if stat is None:
        return None
    return statistics.median(stat.samples_ms) if stat.samples_ms else stat.avg_ms


def _by_case(runs: list[Any], prefix: str) -> dict[str, tuple[str, float]]:
    out = {}
    for run in runs:
        if run.kind == "op" and run.id.startswith(prefix + "test_op["):
            ms = _median_ms(run)
            if ms is not None:
                out[run.id[len(prefix):]] = (run.stats[0].name, ms)
    return out


def peer_lines(runs: list[Any]) -> list[str]:
    """The table's lines; empty unless both frameworks' per-op or e2e runs are there."""
    ours, theirs = _by_case(runs, REFERENCE), _by_case(runs, TORCH)
    totals: dict[str, list[float]] = {}
    for case, (op_type, ms) in ours.items():
        if case in theirs:
            row = totals.setdefault(op_type, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += ms
            row[2] += theirs[case][1]
    lines: list[str] = []
    if totals:
        rows = [[op, int(n), ref, peer, ref / peer if peer > 0 else float("nan")]
                for op, (n, ref, peer) in sorted(totals.items(), key=lambda kv: -kv[1][1])]
        n, ref, peer = (sum(t[i] for t in totals.values()) for i in (0, 1, 2))
        rows.append(["all", n, ref, peer, ref / peer if peer > 0 else float("nan")])
        lines += tabulate(rows, headers=["op type", "shapes", "reference ms", "torch ms",
                                         "reference/torch"], floatfmt=".3f").splitlines()
        lines.append("ms: sum over the shapes both ran of the median time per call; op types torch "
                     "has no single op for are left out")
    e2e = [r for r in runs if r.kind == "e2e" and (r.id.startswith(REFERENCE_E2E)
                                                   or r.id.startswith(TORCH_E2E))]
    frameworks = {r.id.startswith(TORCH_E2E) for r in e2e}
    if len(frameworks) == 2:
        rows = [[r.id, r.examples_per_sec, 100 * r.python_share] for r in e2e]
        lines += tabulate(rows, headers=["e2e run", "examples/sec", "Python %"],
                          floatfmt=".3f").splitlines()
    return lines
