"""The torch device: ``pytest_opperf_select_device`` for a suite's conftest, and CUDA events.

Re-export the hook from the ``conftest.py`` of the directory given on the command line (``from
pytest_opperf.torch import pytest_opperf_select_device``): CUDA when torch can use it and
``--opperf-device`` is ``auto`` or ``gpu``, else the CPU; ``gpu`` without a usable GPU is a usage
error, ``auto`` falls back with a note in the report. The device class is the GPU model, as for the
reference framework (``nvidia-h200``). torch is imported when the hook is called; without torch the
hook leaves the choice to others (the CPU), or, for ``gpu``, stops the session with a usage error.
"""

from __future__ import annotations

from typing import Any

import pytest

from ..device import DeviceInfo, EventPoolClock, device_class

__all__ = ["CudaEventClock", "device_class", "pytest_opperf_select_device"]


class CudaEventClock(EventPoolClock):
    """A :class:`pytest_opperf.timers.DeviceClock` on torch's CUDA events (current stream)."""

    def __init__(self) -> None:
        import torch

        super().__init__(torch.cuda)


def _unusable_reason(torch: Any) -> str:
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable CUDA device"


def _driver(torch: Any) -> str | None:
    get = getattr(torch._C, "_cuda_getDriverVersion", None)
    try:
        version = int(get()) if get is not None else 0
    except (RuntimeError, TypeError, ValueError):  # an odd build: the driver is only reported
        return None
    return f"{version // 1000}.{version % 1000 // 10}" if version else None


@pytest.hookimpl(optionalhook=True)  # re-exported by conftests, which also run without the plugin
def pytest_opperf_select_device(config: pytest.Config, requested: str) -> DeviceInfo | None:
    """``--opperf-device``: CUDA when usable and asked for (auto, gpu), else the CPU."""
    try:
        import torch
    except ImportError:
        if requested == "gpu":
            raise pytest.UsageError("opperf: --opperf-device=gpu: torch is not installed") from None
        return None
    if requested != "cpu" and torch.cuda.is_available():
        index = torch.cuda.current_device()
        model = torch.cuda.get_device_name(index)
        return DeviceInfo(name=f"cuda:{index}", is_gpu=True, clock=CudaEventClock(),
                          synchronize=torch.cuda.synchronize, device_class=device_class(model),
                          gpu_model=model, driver=_driver(torch), cuda=torch.version.cuda)
    if requested == "gpu":
        raise pytest.UsageError("opperf: --opperf-device=gpu: no usable GPU: "
                                f"{_unusable_reason(torch)}")
    note = "" if requested == "cpu" else f"no GPU ({_unusable_reason(torch)}): fell back to CPU"
    return DeviceInfo(name="cpu", note=note)
