"""The suites' glue to the reference framework: the device and its clock, the
workload the suites run at, the CI gate's files as the default thresholds and baselines, and the
executor ablation table of the report.

``pytest suites/ --opperf`` measures and gates against ``ci/thresholds.toml`` and
``ci/baselines``; without ``--opperf`` the suites run as a quick correctness smoke test at the
``tiny`` size, and without the plugin (``-p no:opperf``) as plain tests (:mod:`suites.plain`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_opperf import plugin
from pytest_opperf.device import DeviceInfo
from reference_framework import backend
from reference_framework.benchmark import BenchmarkConfig
from suites import plain
from suites.support import ablation_lines, suite_workload
from suites.torch.peer import peer_lines

ROOT = Path(__file__).resolve().parent.parent  # the project's checkout


@pytest.hookimpl(tryfirst=True)  # before the plugin reads its options
def pytest_configure(config: pytest.Config) -> None:
    """The CI gate's files as defaults; without the opperf plugin (``-p no:opperf``) the suites'
    fixtures come from :mod:`suites.plain`: plain tests. (Under ``--opperf`` the plugin leaves
    pytest-benchmark's table out.)"""
    if config.pluginmanager.is_registered(plugin):
        _gate_defaults(config)
    else:
        config.pluginmanager.register(plain, plain.NAME)


# What ``pytest suites/ --opperf`` gates against unless an option or ini key says otherwise: the CI
# gate's files (docs/reference/options.md).
GATE_DEFAULTS = {"thresholds": ROOT / "ci" / "thresholds.toml",
                 "baseline": ROOT / "ci" / "baselines"}


def _gate_defaults(config: pytest.Config) -> None:
    """``--opperf-thresholds`` and ``--opperf-baseline`` default to ``ci/thresholds.toml`` and
    ``ci/baselines`` (the baseline of the session's device class and workload, when there is one),
    set here before the plugin reads its options. A session that saves a baseline
    (``--opperf-save``) is compared with none: it makes one."""
    option = config.option
    saving = getattr(option, "opperf_save", None) is not None or bool(config.getini("opperf_save"))
    for name, path in GATE_DEFAULTS.items():
        key = f"opperf_{name}"
        if getattr(option, key, None) is not None or config.getini(key):
            continue
        if name == "baseline" and saving:
            continue
        setattr(option, key, str(path))


# The plugin's hooks are optional: without the plugin (-p no:opperf) nobody calls them.
@pytest.hookimpl(optionalhook=True)
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


@pytest.hookimpl(optionalhook=True)
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
