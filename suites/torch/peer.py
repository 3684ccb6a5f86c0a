"""The peer table: the reference framework's op times next to torch's and Paddle's, per op type.

Pure: it reads the session's runs. The per-op runs of ``suites/test_ops.py``,
``suites/torch/test_torch.py`` and ``suites/paddle/test_paddle.py`` have the same test ids
(``test_op[conv2d-N8xC64x16x16-k3s1p1-o64]``); for every id the reference framework and a peer
both ran, the median time per call of each side is taken, and summed per op type over the shapes
they all ran. The e2e runs (``test_train``) add a line each with examples/sec and the Python
share. The threads each framework ran on are stated under the table (from the runs' configs).
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from tabulate import tabulate

__all__ = ["PEERS", "peer_lines"]

REFERENCE, TORCH = "suites/test_ops.py::", "suites/torch/test_torch.py::"
PADDLE = "suites/paddle/test_paddle.py::"
REFERENCE_E2E = "suites/test_resnet50.py::"
PEERS = (("torch", TORCH), ("paddle", PADDLE))  # name, run id prefix (per-op and e2e)


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


def _threads(runs: list[Any], prefix: str, key: str) -> str | None:
    values = {str(r.config[key]) for r in runs if r.id.startswith(prefix) and key in r.config}
    return "/".join(sorted(values)) if values else None


def peer_lines(runs: list[Any]) -> list[str]:
    """The table's lines; empty unless the reference framework's and a peer's per-op or e2e runs
    are there."""
    ours = _by_case(runs, REFERENCE)
    peers = [(name, cases) for name, prefix in PEERS
             if (cases := _by_case(runs, prefix)) and set(cases) & set(ours)]
    totals: dict[str, list[float]] = {}
    for case, (op_type, ms) in ours.items():
        if peers and all(case in cases for _, cases in peers):
            row = totals.setdefault(op_type, [0.0] * (2 + len(peers)))
            row[0] += 1
            row[1] += ms
            for i, (_, cases) in enumerate(peers):
                row[2 + i] += cases[case][1]
    lines: list[str] = []
    if totals:
        def ratios(values: list[float]) -> list[float]:
            return [values[1] / p if p > 0 else float("nan") for p in values[2:]]

        rows = [[op, int(v[0]), *v[1:], *ratios(v)]
                for op, v in sorted(totals.items(), key=lambda kv: -kv[1][1])]
        sums = [sum(t[i] for t in totals.values()) for i in range(2 + len(peers))]
        rows.append(["all", int(sums[0]), *sums[1:], *ratios(sums)])
        names = [name for name, _ in peers]
        lines += tabulate(rows, headers=["op type", "shapes", "reference ms",
                                         *(f"{n} ms" for n in names),
                                         *(f"reference/{n}" for n in names)],
                          floatfmt=".3f").splitlines()
        lines.append("ms: sum over the shapes every framework shown ran of the median time per "
                     "call; op types a peer has no single op for are left out")
    e2e = [r for r in runs if r.kind == "e2e" and (r.id.startswith(REFERENCE_E2E) or any(
        r.id.startswith(prefix) for _, prefix in PEERS))]
    if len({next((n for n, p in PEERS if r.id.startswith(p)), "reference") for r in e2e}) >= 2:
        rows = [[r.id, r.examples_per_sec, 100 * r.python_share] for r in e2e]
        lines += tabulate(rows, headers=["e2e run", "examples/sec", "Python %"],
                          floatfmt=".3f").splitlines()
    if lines:
        threads = [f"reference {os.environ.get('OPPERF_NUM_THREADS') or 'all CPUs'} "
                   "(OPPERF_NUM_THREADS)"]
        for name, prefix in PEERS:
            count = _threads(runs, prefix, f"{name}_threads")
            if count is not None:
                threads.append(f"{name} {count}")
        lines.append("threads: " + ", ".join(threads))
    return lines
