"""The reference report's benchmark on real PaddlePaddle: ResNet training in Paddle's static graph,
end to end under ``profile()``, and Paddle's ops at the reference program's shapes.

``test_train[<workload>]`` builds the report's program (ResNet, 102 classes, softmax +
cross_entropy + mean, Momentum 0.01/0.9, accuracy; parameter count checked equal to the reference
framework's) and trains it on the reference benchmark's batches at the session's workload, the
clock started before building, as in the report; every Paddle operator is a stat, the executor's
run (``StandaloneExecutor::run``) the report's ``ExecutorRunTimer``. ``test_op[<id>]`` times the
Paddle op doing the work of each distinct op of the reference program, with the ids of
``suites/test_ops.py``, for the report's peer table. Skipped, with one line, when paddle is not
installed. Paddle runs on as many threads as the reference framework and torch (the machine's
CPUs), stated in each run's config.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import numpy as np
import pytest

from pytest_opperf.paddle.support import INSTALL, import_paddle
from reference_framework.benchmark import BenchmarkConfig
from suites.support import (
    OpCase,
    distinct_ops,
    numpy_batches,
    on_gpu,
    suite_workload,
    training_program,
)

try:
    paddle = import_paddle()
except ModuleNotFoundError:
    pytest.skip(f"paddle is not installed: the Paddle suite needs it ({INSTALL})",
                allow_module_level=True)

from pytest_opperf.paddle import profile  # noqa: E402 (after the skip)
from suites.paddle.model import build_program, parameter_count  # noqa: E402 (after the skip)
from suites.paddle.ops import has_peer, op_call  # noqa: E402 (after the skip)

THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _cases(config: BenchmarkConfig) -> list[OpCase]:
    main = training_program(config).main
    return [c for c in distinct_ops(main, config.batch_size) if has_peer(c.type, c.shapes)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    name, config = suite_workload(metafunc.config)
    if "paddle_setting" in metafunc.fixturenames:
        metafunc.parametrize("paddle_setting", [(name, config)], ids=[name])
    if "case" in metafunc.fixturenames:
        cases = _cases(config)
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="module")
def paddle_place(request: pytest.FixtureRequest) -> Any:
    paddle.base.core.set_num_threads(THREADS)
    gpu = on_gpu(request.config) and paddle.device.cuda.device_count() > 0
    return paddle.CUDAPlace(0) if gpu else paddle.CPUPlace()


def test_train(opperf, paddle_setting: tuple[str, BenchmarkConfig], paddle_place: Any) -> None:
    workload, config = paddle_setting
    losses = []
    paddle.enable_static()
    try:
        with opperf.measure(kind="e2e", config={"workload": workload, "framework": "paddle",
                                                "paddle": paddle.__version__,
                                                "paddle_threads": THREADS,
                                                **config.as_dict()}) as run, profile():
            with warnings.catch_warnings():  # what Paddle's layers say while building
                warnings.filterwarnings("ignore", category=UserWarning, module=r"paddle\.")
                built = build_program(paddle, config)
            exe = paddle.static.Executor(paddle_place)
            scope = paddle.static.Scope()
            with paddle.static.scope_guard(scope):
                exe.run(built.startup)
                for images, labels in numpy_batches(config):
                    loss, _acc = exe.run(built.main, feed={"data": images,
                                                           "label": labels.reshape(-1, 1)},
                                         fetch_list=[built.avg_cost, built.accuracy])
                    losses.append(float(np.asarray(loss)))
                    run.step(examples=len(labels))

        def extra_step() -> None:  # the counting pass's step: Python's work around Paddle's
            with paddle.static.scope_guard(scope):
                exe.run(built.main, feed={"data": images, "label": labels.reshape(-1, 1)},
                        fetch_list=[built.avg_cost, built.accuracy])

        run.counting_pass(extra_step)
        count = parameter_count(built.main)
    finally:
        paddle.disable_static()

    expected = sum(math.prod(p.shape)
                   for p in training_program(config).main.global_block().all_parameters())
    assert count == expected, (f"Paddle ResNet has {count} parameters, the reference "
                               f"framework's {expected}")
    assert len(losses) == config.iterations
    assert all(math.isfinite(loss) for loss in losses), losses


def test_op(case: OpCase, workload: tuple[str, BenchmarkConfig], paddle_place: Any,
            opperf_benchmark: Any) -> None:
    config = workload[1]
    attrs = training_program(config).main.global_block().ops[case.index].attrs
    fn, args = op_call(paddle, case.type, case.shapes, attrs, seed=config.seed)
    out = fn(*args)
    for value in (out if isinstance(out, (tuple, list)) else [out]):
        if isinstance(value, paddle.Tensor) and value.dtype == paddle.float32:
            assert bool(paddle.isfinite(value).all()), f"{case.id}: output is not finite"
    opperf_benchmark.describe(stat=case.type, kind="op",
                              config={"op": case.type, "framework": "paddle",
                                      "paddle_threads": THREADS,
                                      "inputs": {k: [list(s) for s in v]
                                                 for k, v in case.shapes.items()}})
    opperf_benchmark(fn, *args)
