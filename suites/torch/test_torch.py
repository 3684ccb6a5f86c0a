"""The torch peer of the suites: the reference ResNet-50 training in torch, end to end
under ``profile()``, and its ops at the reference program's shapes.

``test_train[<workload>]`` trains the torch ResNet (parameter count checked
equal to the reference framework's) on the reference benchmark's batches, at
the session's workload, every aten op a stat. ``test_op[<id>]`` times the torch
op doing the work of each distinct op of the reference training program, with
the ids of ``suites/test_ops.py`` (``test_op[conv2d-N8xC64x16x16-k3s1p1-o64]``),
so that the report's peer table can put the two side by side. Skipped, with
one line, when torch is not installed.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch suite needs it (CPU "
                                            "build: pip install torch==2.13.0)")

from pytest_opperf.torch import benchmark_op, profile  # noqa: E402 (after the skip)
from reference_framework.benchmark import BenchmarkConfig  # noqa: E402 (after the skip)
from suites.support import OpCase, distinct_ops, on_gpu, suite_workload, training_program  # noqa: E402 (after the skip)
from suites.torch.model import ResNet, has_peer, op_call, train_batches, train_step  # noqa: E402 (after the skip)


def _cases(config: BenchmarkConfig) -> list[OpCase]:
    main = training_program(config).main
    ops = main.global_block().ops
    return [c for c in distinct_ops(main, config.batch_size)
            if has_peer(c.type, c.shapes, ops[c.index].attrs)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    name, config = suite_workload(metafunc.config)
    if "torch_setting" in metafunc.fixturenames:
        metafunc.parametrize("torch_setting", [(name, config)], ids=[name])
    if "case" in metafunc.fixturenames:
        cases = _cases(config)
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="module")
def torch_device(request: pytest.FixtureRequest) -> Any:
    return torch.device("cuda" if on_gpu(request.config) else "cpu")


def test_train(opperf, torch_setting: tuple[str, BenchmarkConfig], torch_device: Any) -> None:
    workload, config = torch_setting
    losses = []
    with opperf.measure(kind="e2e", config={"workload": workload, "framework": "torch",
                                            "torch_threads": torch.get_num_threads(),
                                            **config.as_dict()}) as run, profile():
        torch.manual_seed(config.seed)
        model = ResNet(config.class_dim, config.depth, config.stem_pool).to(torch_device).train()
        opt = torch.optim.SGD(model.parameters(), lr=config.learning_rate, momentum=config.momentum)
        step = train_step(model, opt)
        for images, labels in train_batches(config):
            losses.append(step(images.to(torch_device), labels.to(torch_device)))
            run.step(examples=len(labels))
    # the counting pass, after the window (on the last batch): the work around the aten ops
    last = images.to(torch_device), labels.to(torch_device)
    run.counting_pass(lambda: step(*last))

    expected = _reference_parameters(config)
    assert model.parameter_count == expected, (
        f"torch ResNet has {model.parameter_count} parameters, "
        f"the reference framework's {expected}")
    assert len(losses) == config.iterations
    assert all(math.isfinite(loss) for loss in losses), losses


def _reference_parameters(config: BenchmarkConfig) -> int:
    main = training_program(config).main
    return sum(math.prod(p.shape) for p in main.global_block().all_parameters())


def test_op(case: OpCase, workload: tuple[str, BenchmarkConfig], torch_device: Any,
            opperf_benchmark: Any) -> None:
    config = workload[1]
    attrs = training_program(config).main.global_block().ops[case.index].attrs
    call = op_call(case.type, case.shapes, attrs, torch_device, seed=config.seed)
    assert call is not None
    fn, args = call
    out = fn(*args)
    for value in (out if isinstance(out, (tuple, list)) else [out]):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            assert torch.isfinite(value).all(), f"{case.id}: output is not finite"
    benchmark_op(opperf_benchmark, fn, *args, stat=case.type,
                 config={"op": case.type, "framework": "torch",
                         "torch_threads": torch.get_num_threads(),
                         "inputs": {k: [list(s) for s in v] for k, v in case.shapes.items()}})
