"""Hand-built RunResults and ResultSets for the plugin's pure-module tests."""

from __future__ import annotations

from pytest_opperf.results import ResultSet, RunResult, StatResult


def stat(name: str, samples: list[float], parent: str | None = None, count_per_step: int = 1,
         kernel: bool = True, **extra) -> StatResult:
    """A stat whose per-step totals are ``samples``."""
    total = sum(samples)
    count = count_per_step * len(samples)
    per_call = [s / count_per_step for s in samples]
    return StatResult(
        name=name,
        parent=parent,
        count=count,
        total_ms=total,
        avg_ms=total / count,
        min_ms=min(per_call),
        max_ms=max(per_call),
        samples_ms=list(samples),
        kernel=kernel,
        **extra,
    )


def e2e_run(
    run_id: str = "suite.py::test_train",
    stats: dict[str, list[float]] | None = None,
    step_ms: list[float] | None = None,
    examples_per_step: int = 32,
    python_share: float = 0.2,
    counts: dict[str, int] | None = None,
    wall_s: float | None = None,
) -> RunResult:
    stats = stats if stats is not None else {"conv2d": [2.0] * 10}
    steps = len(next(iter(stats.values()))) if stats else 0
    step_ms = step_ms if step_ms is not None else [10.0] * steps
    wall = wall_s if wall_s is not None else sum(step_ms) / 1e3
    examples = examples_per_step * len(step_ms)
    return RunResult(
        id=run_id,
        kind="e2e",
        config={},
        device="cpu",
        timing="host",
        wall_s=wall,
        examples=examples,
        batches=len(step_ms),
        examples_per_sec=examples / wall if wall else 0.0,
        sec_per_batch=wall / len(step_ms) if step_ms else 0.0,
        python_share=python_share,
        stats=[stat(n, s) for n, s in stats.items()],
        counts=counts if counts is not None else {n: 1 for n in stats},
        step_ms=list(step_ms),
        step_examples=[examples_per_step] * len(step_ms),
    )


def results(*runs: RunResult, machine: dict | None = None) -> ResultSet:
    return ResultSet(
        runs=list(runs),
        machine=machine if machine is not None else {"cpu": "x", "device_class": "cpu"},
    )
