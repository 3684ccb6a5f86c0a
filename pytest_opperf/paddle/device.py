"""Paddle's device: ``pytest_opperf_select_device`` for a suite's conftest, and CUDA events.

Re-export the hook from the ``conftest.py`` of the directory given on the command line (``from
pytest_opperf.paddle import pytest_opperf_select_device``): Paddle's CUDA place when Paddle can use
one and ``--opperf-device`` is ``auto`` or ``gpu``, else the CPU; ``gpu`` without a usable GPU is
a usage error, ``auto`` falls back with a note in the report. The device class is the GPU model
(``nvidia-h200``). paddle is imported when the hook is called; without paddle the hook leaves the
choice to others (the CPU), or, for ``gpu``, stops the session with a usage error.
"""

from __future__ import annotations

from typing import Any

import pytest

from ..device import DeviceInfo, EventPoolClock, device_class
from .support import INSTALL, import_paddle

__all__ = ["PaddleEventClock", "pytest_opperf_select_device"]


class PaddleEventClock(EventPoolClock):
    """A :class:`pytest_opperf.timers.DeviceClock` on Paddle's CUDA events (current stream)."""

    def __init__(self, paddle: Any) -> None:
        super().__init__(paddle.device.cuda)


def _unusable_reason(paddle: Any) -> str:
    if not paddle.device.is_compiled_with_cuda():
        return f"paddle {paddle.__version__} is a CPU build"
    return f"paddle {paddle.__version__} (CUDA {paddle.version.cuda()}) finds no CUDA device"


def _usable(paddle: Any) -> bool:
    return bool(paddle.device.is_compiled_with_cuda()) and paddle.device.cuda.device_count() > 0


@pytest.hookimpl(optionalhook=True)  # re-exported by conftests, which also run without the plugin
def pytest_opperf_select_device(config: pytest.Config, requested: str) -> DeviceInfo | None:
    """``--opperf-device``: Paddle's CUDA place when usable and asked for (auto, gpu), else the
    CPU."""
    try:
        paddle = import_paddle()
    except ModuleNotFoundError:
        if requested == "gpu":
            raise pytest.UsageError(f"opperf: --opperf-device=gpu: paddle is not installed "
                                    f"({INSTALL})") from None
        return None
    if requested != "cpu" and _usable(paddle):
        index = 0
        paddle.device.set_device(f"gpu:{index}")
        model = str(paddle.device.cuda.get_device_name(index))
        return DeviceInfo(name=f"gpu:{index}", is_gpu=True, clock=PaddleEventClock(paddle),
                          synchronize=paddle.device.cuda.synchronize,
                          device_class=device_class(model), gpu_model=model,
                          cuda=str(paddle.version.cuda()))
    if requested == "gpu":
        raise pytest.UsageError("opperf: --opperf-device=gpu: no usable GPU: "
                                f"{_unusable_reason(paddle)}")
    note = "" if requested == "cpu" else f"no GPU ({_unusable_reason(paddle)}): fell back to CPU"
    return DeviceInfo(name="cpu", note=note)
