"""The reference executor's per-run overheads on the ResNet-50 training program:
program clone, local scope creation + deletion, creating every op, and
feeding a batch and fetching the loss and accuracy. Timed through
pytest-benchmark as runs of kind ``overhead``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from reference_framework.backend import array_module
from reference_framework.benchmark import BenchmarkConfig, TrainingProgram
from reference_framework.executor import create_local_scope
from reference_framework.registry import OpSpec, create_op
from reference_framework.scope import Scope
from suites.support import training_program


@pytest.fixture(scope="module")
def built(workload: tuple[str, BenchmarkConfig]) -> TrainingProgram:
    return training_program(workload[1])


def describe(bench: Any, stat: str, built: TrainingProgram) -> None:
    bench.describe(stat=stat, kind="overhead", config={"ops": built.main.num_ops(),
                                                       "vars": len(built.main.global_block().vars)})


def test_program_clone(built: TrainingProgram, opperf_benchmark: Any) -> None:
    clone = built.main.clone()
    assert clone.to_string() == built.main.to_string()
    describe(opperf_benchmark, "program_clone", built)
    opperf_benchmark(built.main.clone)


def test_local_scope_create_delete(built: TrainingProgram, opperf_benchmark: Any) -> None:
    scope, block = Scope(), built.main.global_block()

    def create_delete() -> None:
        scope.delete_scope(create_local_scope(block, scope))

    create_delete()
    assert scope.kids() == [] and len(scope.local_var_names()) == sum(v.persistable
                                                                      for v in block.vars.values())
    describe(opperf_benchmark, "local_scope_create_delete", built)
    opperf_benchmark(create_delete)


def test_create_ops(built: TrainingProgram, place: Any, opperf_benchmark: Any) -> None:
    xp, ops = array_module(place), built.main.global_block().ops

    def create_all() -> list[Any]:
        return [create_op(desc, place, xp) for desc in ops]

    assert [op.type for op in create_all()] == [op.type for op in ops]
    describe(opperf_benchmark, "create_ops", built)
    opperf_benchmark(create_all)


def test_feed_fetch(built: TrainingProgram, workload: tuple[str, BenchmarkConfig], place: Any,
                    opperf_benchmark: Any) -> None:
    """The feed ops of a batch (images, labels) and the fetch ops of the loss and accuracy."""
    config = workload[1]
    xp = array_module(place)
    images = np.zeros((config.batch_size, *built.image_shape), np.float32)
    labels = np.zeros((config.batch_size, 1), np.int64)
    scope = Scope()
    for name in ("data", "label", "fetch"):
        scope.var(name)
    for name in ("loss", "acc"):
        scope.var(name).value = xp.zeros(1, np.float32)
    ops = [create_op(OpSpec("feed", {"X": ["feed"]}, {"Out": ["data"]}, {"col": 0}), place, xp),
           create_op(OpSpec("feed", {"X": ["feed"]}, {"Out": ["label"]}, {"col": 1}), place, xp),
           create_op(OpSpec("fetch", {"X": ["loss"]}, {"Out": ["fetch"]}, {"col": 0}), place, xp),
           create_op(OpSpec("fetch", {"X": ["acc"]}, {"Out": ["fetch"]}, {"col": 1}), place, xp)]

    def feed_fetch() -> list[Any]:
        scope.var("feed").value = [images, labels]
        fetched: list[Any] = []
        scope.var("fetch").value = fetched
        for op in ops:
            op.run(scope)
        return fetched

    fetched = feed_fetch()
    data = scope.find_var("data")
    assert data is not None and data.value.shape == images.shape and len(fetched) == 2
    describe(opperf_benchmark, "feed_fetch", built)
    opperf_benchmark(feed_fetch)
