"""The suites' glue to the reference framework: the device and its clock, the
workload the suites run at, and the executor ablation table of the report.

``pytest suites/ --opperf`` measures; without ``--opperf`` the suites run as a
quick correctness smoke test at the ``tiny`` size.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from pytest_opperf.device import DeviceInfo
from reference_framework import backend
from reference_framework.benchmark import BenchmarkConfig
from suites.support import ablation_lines, suite_workload
from suites.torch.peer import peer_lines


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark's own (trylast) reads its options
def pytest_configure(config: pytest.Config) -> None:
    """pytest-benchmark's own table (one wide line per per-op benchmark) is left out, as with
    ``--benchmark-quiet``: the opperf report shows the same runs. ``--benchmark-columns=...``
    or ``--benchmark-verbose`` (which overrides quiet) brings it back."""
    option = config.option
    if hasattr(option, "benchmark_quiet") and getattr(option, "benchmark_columns", None) is None:
        option.benchmark_quiet = True


def pytest_opperf_select_device(config: pytest.Config, requested: str) -> DeviceInfo:
    """``--opperf-device``: gpu needs a usable GPU; auto falls back to the CPU and says why."""
    if requested != "cpu" and backend.gpu_available():
        place = backend.CUDAPlace(0)
        facts = backend.device_facts(place)
        model = str(facts["model"])  # a CUDA place always has one
        clock = backend.CudaEventClock(place)
        return DeviceInfo(name=backend.device_name(place), is_gpu=True, clock=clock,
                          synchronize=lambda: backend.synchronize(place),
                          device_class=re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-"),
                          gpu_model=model, driver=facts["driver"], cuda=facts["cuda"],
                          new_clock=clock.fresh, flush_cache=_lazy_l2_flush(place),
                          pci_bus_id=backend.pci_bus_id(place))
    if requested == "gpu":
        raise pytest.UsageError(f"opperf: --opperf-device=gpu: no usable GPU here: "
                                f"{backend.gpu_unavailable_reason()}")
    note = ("" if requested == "cpu"
            else f"no GPU ({backend.gpu_unavailable_reason()}): fell back to CPU")
    return DeviceInfo(name="cpu", note=note)


def _lazy_l2_flush(place: backend.Place) -> Callable[[], None]:
    """The device's L2 flush, its buffer allocated at the first flush (only --opperf-l2-flush
    flushes)."""
    made: list[Callable[[], None]] = []

    def flush() -> None:
        if not made:
            made.append(backend.l2_flusher(place))
        made[0]()
    return flush


@pytest.fixture(scope="session")
def workload(request: pytest.FixtureRequest) -> tuple[str, BenchmarkConfig]:
    return suite_workload(request.config)


@pytest.fixture(scope="session")
def place(workload: tuple[str, BenchmarkConfig]) -> backend.Place:
    return backend.CUDAPlace(0) if workload[1].device == "GPU" else backend.CPUPlace()


def pytest_opperf_report_sections(config: pytest.Config,
                                   results: Any) -> list[tuple[str, list[str]]]:
    sections = []
    lines = ablation_lines(results.runs)
    if lines:
        sections.append(("executor ablation (ResNet-50 training)", lines))
    peers = peer_lines(results.runs)  # the torch and Paddle suites' op times beside ours
    if peers:
        sections.append(("peers: reference framework vs torch and paddle, per op type at the "
                         "same shapes", peers))
    return sections
