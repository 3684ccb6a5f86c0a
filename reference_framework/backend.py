"""Places, array modules and device clocks: the only module that imports cupy.

Kernels are written once against an array module ``xp`` (numpy or cupy), found
from their arrays with :func:`get_array_module` or from a place with
:func:`array_module`. cupy is imported lazily and inside a guard, so importing
the framework never fails or touches CUDA on a machine without a GPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "CPUPlace",
    "CUDAPlace",
    "CudaEventClock",
    "GPUPlace",
    "Place",
    "array_module",
    "cupy_or_none",
    "device_facts",
    "device_name",
    "get_array_module",
    "gpu_available",
    "is_gpu_array",
    "synchronize",
    "to_host",
    "to_place",
]


@dataclass(frozen=True)
class Place:
    """Where arrays live and kernels run."""

    @property
    def is_gpu(self) -> bool:
        return False


@dataclass(frozen=True)
class CPUPlace(Place):
    def __str__(self) -> str:
        return "cpu"


@dataclass(frozen=True)
class CUDAPlace(Place):
    device_id: int = 0

    @property
    def is_gpu(self) -> bool:
        return True

    def __str__(self) -> str:
        return f"cuda:{self.device_id}"


GPUPlace = CUDAPlace  # the reference report's script says fluid.GPUPlace(0)


@functools.cache
def cupy_or_none() -> ModuleType | None:
    """The cupy module, or ``None`` when it is not installed or cannot load."""
    try:
        import cupy  # the project's only cupy import
    except Exception:  # ImportError, or a broken CUDA install raising on import
        return None
    return cupy


@functools.cache
def _gpu_problem() -> str | None:
    """Why no GPU can be used, or ``None`` when one can."""
    cp = cupy_or_none()
    if cp is None:
        return "cupy is not installed (pip install 'pytest-opperf[gpu]')"
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, no device: CUDARuntimeError and friends
        return f"CUDA is not usable: {exc}"
    if count < 1:
        return "no CUDA device is visible"
    return None


def gpu_available() -> bool:
    """Whether a CUDA device can run kernels here. Never raises."""
    try:
        return _gpu_problem() is None
    except Exception:
        return False


def gpu_unavailable_reason() -> str:
    """A sentence saying why :func:`gpu_available` is false ("" when it is true)."""
    return _gpu_problem() or ""


def _cupy_for(place: Place) -> ModuleType:
    if not gpu_available():
        raise RuntimeError(f"{place} was asked for, but {gpu_unavailable_reason()}")
    return cupy_or_none()


def array_module(place: Place) -> ModuleType:
    """numpy for a CPU place, cupy for a CUDA place (error if no GPU)."""
    return _cupy_for(place) if place.is_gpu else np


def get_array_module(*arrays: Any) -> ModuleType:
    """numpy, or cupy when any argument is a cupy array."""
    cp = cupy_or_none()
    if cp is not None:
        for a in arrays:
            if isinstance(a, cp.ndarray):
                return cp
    return np


def is_gpu_array(a: Any) -> bool:
    cp = cupy_or_none()
    return cp is not None and isinstance(a, cp.ndarray)


def to_place(a: Any, place: Place, dtype: Any = None) -> Any:
    """``a`` as an array of ``place`` (copied only when needed)."""
    if place.is_gpu:
        cp = _cupy_for(place)
        with cp.cuda.Device(place.device_id):
            return cp.asarray(a, dtype=dtype)
    if is_gpu_array(a):
        a = a.get()
    return np.asarray(a, dtype=dtype)


def to_host(a: Any) -> np.ndarray:
    """``a`` as a numpy array; a device array is copied (which synchronises)."""
    return a.get() if is_gpu_array(a) else np.asarray(a)


def synchronize(place: Place) -> None:
    """Wait for all work queued on ``place`` (nothing to do on the CPU)."""
    if place.is_gpu:
        cp = _cupy_for(place)
        with cp.cuda.Device(place.device_id):
            cp.cuda.get_current_stream().synchronize()


def device_name(place: Place) -> str:
    """A human name of the place's device, e.g. ``cuda:0 (NVIDIA H200)``."""
    if not place.is_gpu:
        return str(place)
    cp = _cupy_for(place)
    props = cp.cuda.runtime.getDeviceProperties(place.device_id)
    name = props["name"]
    return f"{place} ({name.decode() if isinstance(name, bytes) else name})"


def device_facts(place: Place) -> dict[str, str | None]:
    """The GPU model, driver and CUDA runtime versions of a CUDA place (all
    ``None`` for the CPU), e.g. for a results file's machine description."""
    if not place.is_gpu:
        return {"model": None, "driver": None, "cuda": None}
    cp = _cupy_for(place)
    props = cp.cuda.runtime.getDeviceProperties(place.device_id)
    name = props["name"]

    def version(v: int) -> str:  # CUDA encodes 12.4 as 12040
        return f"{v // 1000}.{v % 1000 // 10}"

    # CUDA reports the driver as the newest CUDA version it supports.
    return {"model": name.decode() if isinstance(name, bytes) else str(name),
            "driver": f"supports CUDA {version(cp.cuda.runtime.driverGetVersion())}",
            "cuda": version(cp.cuda.runtime.runtimeGetVersion())}


class CudaEventClock:
    """A :class:`pytest_opperf.timers.DeviceClock` made of CUDA events.

    Events are recorded on the current stream of the place's device and are
    pooled: after :meth:`synchronize` and the reads that follow, :meth:`recycle`
    returns them for reuse so that timing a step does not allocate events.
    """

    def __init__(self, place: CUDAPlace) -> None:
        self._cp = _cupy_for(place)
        self._device = place.device_id
        self._free: list[Any] = []
        self._used: list[Any] = []

    def mark(self) -> Any:
        event = self._free.pop() if self._free else self._cp.cuda.Event()
        event.record()
        self._used.append(event)
        return event

    def elapsed_ns(self, start: Any, end: Any) -> int:
        return int(self._cp.cuda.get_elapsed_time(start, end) * 1e6)

    def synchronize(self) -> None:
        with self._cp.cuda.Device(self._device):
            self._cp.cuda.get_current_stream().synchronize()

    def recycle(self) -> None:
        """Make every event marked so far reusable (call once they are read)."""
        self._free.extend(self._used)
        self._used.clear()
