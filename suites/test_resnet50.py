"""End to end: the reference report's ResNet-50 training benchmark in a measured window.

Runs once with the faithful executor (program clone, local scope and op
creation on every run, as in the report) and once with every avoidable
overhead switched off; the report's ablation table compares the two. Ids:
``test_train[<workload>]`` and ``test_train[<workload>-no-overheads]``.
"""

from __future__ import annotations

import math

import pytest

from reference_framework.benchmark import BenchmarkConfig, run_benchmark
from reference_framework.cost import program_work
from suites.support import suite_workload

EXECUTORS = ("faithful", "no-overheads")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "setting" in metafunc.fixturenames:
        name, config = suite_workload(metafunc.config)
        settings = [(name, executor, config if executor == "faithful" else config.no_overheads())
                    for executor in EXECUTORS]
        metafunc.parametrize("setting", settings, ids=[name if e == "faithful" else f"{name}-{e}"
                                                       for _, e, _ in settings])


def test_train(opperf, setting: tuple[str, str, BenchmarkConfig]) -> None:
    workload, executor, config = setting
    work = {}

    def on_build(main):
        work.update(program_work(main, config.batch_size))

    def on_batch(examples: int) -> None:
        for op_type, w in work.items():
            run.add_work(op_type, flops=w.flops, bytes=w.bytes)
        run.step(examples=examples)

    with opperf.measure(kind="e2e", config={"workload": workload, "executor": executor,
                                            **config.as_dict()}) as run:
        result = run_benchmark(config, on_batch=on_batch, on_build=on_build)
    assert result.extra_step is not None
    run.counting_pass(result.extra_step)  # work counts of a few more steps, after the window

    assert result.batches == config.iterations
    assert result.examples == config.iterations * config.batch_size
    assert all(math.isfinite(loss) for loss in result.losses), result.losses
    assert 0.0 <= result.pass_accuracies[-1] <= 1.0
