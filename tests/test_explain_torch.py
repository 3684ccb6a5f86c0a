"""Why it got slower, on a PyTorch model: the torch suite's ResNet, trained as ``test_train``
does it (its window under ``pytest_opperf.torch.profile()``, then its counting pass), with a head
whose residual blocks run a Python loop more in ``forward`` (ResNet-18 at the tiny workload, the
quickest to count)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (CPU build: pip install "
                                            "torch==2.13.0)")

from pytest_opperf import measure  # noqa: E402 (after the skip)
from pytest_opperf.ab.paired import CompareResult, Decision  # noqa: E402
from pytest_opperf.comparison.metrics import MetricKey  # noqa: E402
from pytest_opperf.core.port import Window  # noqa: E402
from pytest_opperf.device import CPU_HOST  # noqa: E402
from pytest_opperf.explain import diff  # noqa: E402
from pytest_opperf.explain.session import explain_ab  # noqa: E402
from pytest_opperf.results import RunResult  # noqa: E402
from pytest_opperf.torch import profile  # noqa: E402
from reference_framework.benchmark import WORKLOADS  # noqa: E402
from suites.torch import model  # noqa: E402
from tests.pprof_read import net_bytecodes, read_profile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "suites/torch/model.py"
RUN = "suites/torch/test_torch.py::test_train[tiny]"


def _counted(step: Any, images: Any, labels: Any) -> RunResult:
    run = measure.Run(RUN, "e2e", {}, CPU_HOST, "events", "ExecutorRunTimer",
                      window=Window(count_steps=2, count_root=str(ROOT)))
    with measure.measure_window(run), profile():
        step(images, labels)
        run.step(examples=len(labels))
    run.counting_pass(lambda: step(images, labels))
    assert run.result is not None and run.result.work is not None, run.result
    return run.result


def _looping(cls: type) -> Any:
    """``cls.forward`` with a loop more, compiled at its own first line of model.py."""
    line = cls.forward.__code__.co_firstlineno
    source = ("\n" * (line - 1) + "def forward(self, x):\n"
              "    for _ in range(100):  # the head's added work\n        pass\n"
              "    return self.relu(self.shortcut(x) + self.body(x))\n")
    scope: dict[str, Any] = {}
    exec(compile(source, model.__file__, "exec"), scope)
    forward = scope["forward"]
    forward.__qualname__ = f"{cls.__name__}.forward"
    forward.__code__ = forward.__code__.replace(co_qualname=f"{cls.__name__}.forward")
    return forward


@pytest.fixture(scope="module")
def sides() -> Iterator[tuple[RunResult, RunResult, type]]:
    config = WORKLOADS["tiny"]
    torch.manual_seed(config.seed)
    net = model.ResNet(config.class_dim, 18, config.stem_pool).train()  # the quickest depth
    opt = torch.optim.SGD(net.parameters(), lr=config.learning_rate, momentum=config.momentum)
    step = model.train_step(net, opt)
    images, labels = next(iter(model.train_batches(config)))
    block = type(next(m for m in net if isinstance(m, (model.Bottleneck, model.BasicBlock))))
    base = _counted(step, images, labels)
    saved = block.forward
    block.forward = _looping(block)
    try:
        head = _counted(step, images, labels)
    finally:
        block.forward = saved
    yield base, head, block


def test_a_torch_models_added_python_work_is_named_first_and_tops_the_profile(sides, tmp_path):
    base, head, block = sides
    line = block.forward.__code__.co_firstlineno
    decisions = [Decision(MetricKey(RUN, "examples_per_sec"), "rate", "regressed", 1.0, 0.8, 0.8,
                          0.7, 0.9, 20, "test", 0.95)]
    result = CompareResult("REV abc1234", "working tree", decisions)
    explain_ab(result, {RUN: (base, head)}, tmp_path, None, "DIR x", tmp_path / "out")
    e = result.explain[MetricKey(RUN, "examples_per_sec")]
    assert e.cls == diff.MORE, e
    first = e.functions[0]
    assert (first.name, first.where) == (f"{block.__name__}.forward", f"{MODEL}:{line}")
    assert first.delta("bytecodes") > 0
    # the differential profile's largest positive function is the same
    total = net_bytecodes(read_profile(tmp_path / "out" / "explain.pb.gz"))
    assert max(total, key=lambda n: total[n]) == f"{block.__name__}.forward"
