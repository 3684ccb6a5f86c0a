"""The Paddle e2e run's op counts next to the reference report's, per training iteration (pure).

The reference report (a PaddlePaddle Fluid profile of ResNet-50 training, 80 iterations) gives
each op's count over the run; divided by 80 it is the count per iteration, which the Paddle run's
per-step counts (after warm-up) should match op for op: where Paddle 3 renamed an op (PIR's
``add`` for ``elementwise_add``, ``matmul`` for ``mul``), fused two (``cross_entropy`` of a softmax
into ``cross_entropy_with_softmax``), or runs one the report's program did not, the line says so.
Startup ops (``gaussian_random``, ``uniform_random``) ran once in the report's whole run, not per
iteration; the executor's own stats (``ExecutorRunTimer``, ``CreateOpTimer``...) are not ops.
"""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

__all__ = ["FUSED", "REPORT_COUNTS", "REPORT_ITERATIONS", "RENAMED", "against_report_lines",
           "compare_counts"]

REPORT_ITERATIONS = 80
# The report's Stat table: the ops' counts over its 80 iterations (framework timers left out).
REPORT_COUNTS = {
    "conv2d_grad": 4240, "conv2d": 4240, "batch_norm_grad": 4240, "batch_norm": 4240, "sum": 1440,
    "relu_grad": 3920, "elementwise_add_grad": 1360, "relu": 3920, "elementwise_add": 1360,
    "momentum": 12880, "pool2d_grad": 160, "pool2d": 160, "fill_constant": 619, "cast": 320,
    "gaussian_random": 53, "mul": 80, "accuracy": 80, "mul_grad": 80, "feed": 160, "softmax": 80,
    "fetch": 240, "top_k": 80, "softmax_grad": 80, "cross_entropy_grad": 80, "cross_entropy": 80,
    "elementwise_div": 80, "mean": 80, "mean_grad": 80, "uniform_random": 1,
}
# the report's op -> the op Paddle 3 (PIR) runs for it under another name
RENAMED = {"elementwise_add": "add", "elementwise_add_grad": "add_grad", "mul": "matmul",
           "mul_grad": "matmul_grad", "top_k": "topk", "sum": "add_n",
           "fill_constant": "full", "gaussian_random": "gaussian", "uniform_random": "uniform"}
# the report's op -> the op Paddle 3 fuses it into
FUSED = {"cross_entropy": "cross_entropy_with_softmax",
         "cross_entropy_grad": "cross_entropy_with_softmax_grad"}


def _per_iteration(count: int) -> str:
    value = count / REPORT_ITERATIONS
    return str(int(value)) if value == int(value) else f"{value:.2f}"


def compare_counts(counts: dict[str, int], ran: set[str] | frozenset[str] = frozenset()
                   ) -> list[tuple[str, str, str, str, str]]:
    """Rows ``(report op, report count per iteration, Paddle op, Paddle count per step, verdict)``;
    verdicts: ``match`` (same name and count), ``renamed`` / ``fused`` (same count), ``count
    differs``, ``startup`` (under once per iteration in the report, and in ``ran``, the run's stats,
    but not in its per-step counts), ``not run``, and ``new`` for Paddle ops the report has no row
    for."""
    rows, seen = [], set()
    for op, total in sorted(REPORT_COUNTS.items(), key=lambda kv: -kv[1]):
        paddle_op = FUSED.get(op) or RENAMED.get(op) or op
        ours = counts.get(paddle_op)
        per_iteration = _per_iteration(total)
        if ours is None and total < REPORT_ITERATIONS and paddle_op in ran:
            seen.add(paddle_op)
            rows.append((op, per_iteration, paddle_op, "0", "startup"))
            continue
        if ours is None:
            verdict = "not run"
        elif str(ours) != per_iteration:
            verdict = "count differs"
        elif op in FUSED:
            verdict = "fused"
        else:
            verdict = "renamed" if paddle_op != op else "match"
        seen.add(paddle_op)
        rows.append((op, per_iteration, paddle_op if ours is not None else "",
                     "" if ours is None else str(ours), verdict))
    for name, count in sorted(counts.items()):
        if name not in seen and "/" not in name:
            rows.append(("", "", name, str(count), "new"))
    return rows


def against_report_lines(run: Any) -> list[str]:
    """The section's lines for an e2e run (its ``counts``: per step, after warm-up)."""
    counts = {name: n for name, n in run.counts.items() if name != run.executor_stat}
    rows = compare_counts(counts, {s.name for s in run.stats})
    lines = tabulate(rows, headers=["report op", "report /iter", "paddle op", "paddle /step",
                                    "verdict"]).splitlines()
    verdicts: dict[str, int] = {}
    for row in rows:
        verdicts[row[4]] = verdicts.get(row[4], 0) + 1
    lines.append("report /iter: the reference report's count over its 80 iterations / 80; "
                 "paddle /step: per step after warm-up; "
                 + ", ".join(f"{n} {v}" for v, n in verdicts.items()))
    return lines
