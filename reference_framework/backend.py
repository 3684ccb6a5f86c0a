"""Places, array modules and device clocks: the only module that imports cupy.

Kernels are written once against an array module ``xp`` (numpy or cupy), found
from their arrays with :func:`get_array_module` or from a place with
:func:`array_module`. cupy is imported lazily and inside a guard, so importing
the framework never fails or touches CUDA on a machine without a GPU.

A GPU is usable only once a probe kernel has compiled (NVRTC) and run, and
one of cupy's own kernels too: with CUDA half installed, :func:`gpu_available`
says no and :func:`gpu_unavailable_reason` says why. ``CUDAPlace(n)`` code
runs inside :func:`device_scope`, so arrays, kernels, events and random
draws all land on device ``n``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
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
    "device_scope",
    "get_array_module",
    "gpu_available",
    "gpu_count",
    "gpu_random",
    "gpu_unavailable_reason",
    "is_gpu_array",
    "l2_flusher",
    "pci_bus_id",
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


# One trivial kernel compiled by NVRTC and run: counting devices says nothing of
# whether kernels compile (NVRTC or the CUDA headers may be missing).
_PROBE_SOURCE = r"""
extern "C" __global__ void opperf_probe(int* out) { out[threadIdx.x] = 40 + threadIdx.x; }
"""


def _probe(cp: ModuleType) -> str | None:
    """Why kernels cannot run on device 0, or ``None`` when a raw kernel and one
    of cupy's own elementwise kernels compile, run and give the right values."""
    try:
        with cp.cuda.Device(0):
            out = cp.zeros(3, dtype=np.int32)
            cp.RawKernel(_PROBE_SOURCE, "opperf_probe")((1,), (3,), (out,))
            got = [int(v) for v in out.get()]
    except Exception as exc:  # NVRTC missing or failing: CompileException, RuntimeError...
        return f"cupy cannot compile and run a raw CUDA kernel (NVRTC): {type(exc).__name__}: {exc}"
    if got != [40, 41, 42]:
        return f"the probe kernel ran but wrote {got}, expected [40, 41, 42]"
    try:
        with cp.cuda.Device(0):
            total = float((cp.arange(4, dtype=np.float32) * 2 + 1).sum())
    except Exception as exc:  # cupy's kernels include CUDA headers
        return (f"cupy cannot compile its own elementwise kernels (are the CUDA headers installed? "
                f"pip install 'pytest-opperf[gpu]'): {type(exc).__name__}: {exc}")
    if total != 16.0:
        return f"the probe elementwise kernel gave {total}, expected 16.0"
    return None


@functools.cache
def _gpu_problem() -> str | None:
    """Why no GPU can be used, or ``None`` when one can (checked once per process)."""
    cp = cupy_or_none()
    if cp is None:
        return "cupy is not installed (pip install 'pytest-opperf[gpu]')"
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, no device: CUDARuntimeError and friends
        return f"CUDA is not usable: {exc}"
    if count < 1:
        return "no CUDA device is visible"
    return _probe(cp)


def gpu_available() -> bool:
    """Whether a CUDA device can compile and run kernels here. Never raises."""
    try:
        return _gpu_problem() is None
    except Exception:
        return False


def gpu_unavailable_reason() -> str:
    """A sentence saying why :func:`gpu_available` is false ("" when it is true)."""
    try:
        return _gpu_problem() or ""
    except Exception as exc:
        return f"the GPU check failed: {type(exc).__name__}: {exc}"


def gpu_count() -> int:
    """How many CUDA devices are visible (0 without a usable GPU)."""
    cp = cupy_or_none()
    return cp.cuda.runtime.getDeviceCount() if cp is not None and gpu_available() else 0


def _cupy_for(place: Place) -> tuple[ModuleType, int]:
    """cupy and the place's device id, or an error saying why the place cannot run."""
    if not isinstance(place, CUDAPlace):
        raise RuntimeError(f"{place} was asked for as a CUDA place, but it is not one")
    cp = cupy_or_none()
    if cp is None or not gpu_available():
        raise RuntimeError(f"{place} was asked for, but {gpu_unavailable_reason()}")
    count = cp.cuda.runtime.getDeviceCount()
    if not 0 <= place.device_id < count:
        raise RuntimeError(
            f"{place} was asked for, but the visible CUDA devices are cuda:0..cuda:{count - 1}"
        )
    return cp, place.device_id


def device_scope(place: Place) -> contextlib.AbstractContextManager[Any]:
    """A context in which cupy allocates, launches, records events and draws
    random numbers on the place's device (nothing to do for the CPU). The
    executor and ``run_op`` run every op inside one."""
    if not place.is_gpu:
        return contextlib.nullcontext()
    cp, device = _cupy_for(place)
    return cp.cuda.Device(device)


def array_module(place: Place) -> ModuleType:
    """numpy for a CPU place, cupy for a CUDA place (error if no GPU)."""
    return _cupy_for(place)[0] if place.is_gpu else np


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
    """``a`` as an array of ``place`` (copied only when needed; a device array
    of another device is copied to the place's device)."""
    if place.is_gpu:
        cp, device = _cupy_for(place)
        with cp.cuda.Device(device):
            if isinstance(a, cp.ndarray) and a.device.id != device:
                a = a.copy()  # to the current device; asarray would keep the other device's array
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
        cp, device = _cupy_for(place)
        with cp.cuda.Device(device):
            cp.cuda.get_current_stream().synchronize()


def device_name(place: Place) -> str:
    """A human name of the place's device, e.g. ``cuda:0 (NVIDIA H200)``."""
    if not place.is_gpu:
        return str(place)
    cp, device = _cupy_for(place)
    name = cp.cuda.runtime.getDeviceProperties(device)["name"]
    return f"{place} ({name.decode() if isinstance(name, bytes) else name})"


def pci_bus_id(place: Place) -> str | None:
    """The PCI bus id of a CUDA place's device (NVML finds the GPU by it); ``None`` for the CPU."""
    if not place.is_gpu:
        return None
    cp, device = _cupy_for(place)
    return str(cp.cuda.Device(device).pci_bus_id)


@functools.cache
def _random_state(place: Place) -> Any:
    cp, device = _cupy_for(place)
    with cp.cuda.Device(device):
        return cp.random.RandomState()


def gpu_random(place: Place, seed: int | None) -> Any:
    """The cached cuRAND generator of the place's device (``cupy.random.RandomState``),
    reseeded with ``seed`` (``None``: fresh entropy).

    Building a ``cupy.random.default_rng`` per draw initialises a new set of
    device-side curand states every time; reseeding one host-API generator costs
    nothing, and a given seed still gives the same values on every call.
    """
    rs = _random_state(place)
    rs.seed(seed)
    return rs


def l2_flusher(place: Place) -> Callable[[], None]:
    """A function that evicts the place's device L2 cache by writing a buffer of
    twice its size (at least 64 MiB), for cold-cache per-op timing. The write is
    queued on the current stream, like the op that follows it."""
    cp, device = _cupy_for(place)
    with cp.cuda.Device(device):
        l2 = int(cp.cuda.runtime.getDeviceProperties(device).get("l2CacheSize", 0))
        buffer = cp.empty(max(2 * l2, 64 * 2**20), dtype=np.uint8)

    def flush() -> None:
        with cp.cuda.Device(device):
            buffer.data.memset_async(0, buffer.nbytes)

    flush.nbytes = buffer.nbytes  # type: ignore[attr-defined]
    return flush


def device_facts(place: Place) -> dict[str, str | None]:
    """The GPU model, driver and CUDA runtime versions of a CUDA place (all
    ``None`` for the CPU), e.g. for a results file's machine description."""
    if not place.is_gpu:
        return {"model": None, "driver": None, "cuda": None}
    cp, device = _cupy_for(place)
    name = cp.cuda.runtime.getDeviceProperties(device)["name"]

    def version(v: int) -> str:  # CUDA encodes 12.4 as 12040
        return f"{v // 1000}.{v % 1000 // 10}"

    # CUDA reports the driver as the newest CUDA version it supports.
    return {"model": name.decode() if isinstance(name, bytes) else str(name),
            "driver": f"supports CUDA {version(cp.cuda.runtime.driverGetVersion())}",
            "cuda": version(cp.cuda.runtime.runtimeGetVersion())}


class CudaEventClock:
    """A :class:`pytest_opperf.timers.DeviceClock` made of CUDA events.

    Events are created and recorded on the current stream of the place's
    device (whichever device is current when a mark is made), and are pooled:
    after :meth:`synchronize` and the reads that follow, :meth:`recycle`
    returns them for reuse so that timing a step does not allocate events.
    Each clock has its own pool; :meth:`fresh` makes another clock of the same
    device for a second user (a per-op benchmark inside a measured window),
    whose recycling must not hand out the window's unread events.
    """

    def __init__(self, place: CUDAPlace) -> None:
        self._cp, self._device = _cupy_for(place)
        self._place = place
        self._free: list[Any] = []
        self._used: list[Any] = []

    def fresh(self) -> CudaEventClock:
        """A new clock of the same device, with its own pool of events."""
        return CudaEventClock(self._place)

    def _mark_here(self) -> Any:
        event = self._free.pop() if self._free else self._cp.cuda.Event()
        event.record()
        self._used.append(event)
        return event

    def mark(self) -> Any:
        cp = self._cp
        if cp.cuda.runtime.getDevice() == self._device:
            return self._mark_here()
        with cp.cuda.Device(self._device):
            return self._mark_here()

    def elapsed_ns(self, start: Any, end: Any) -> int:
        return int(self._cp.cuda.get_elapsed_time(start, end) * 1e6)

    def synchronize(self) -> None:
        with self._cp.cuda.Device(self._device):
            self._cp.cuda.get_current_stream().synchronize()

    def recycle(self) -> None:
        """Make every event marked so far reusable (call once they are read)."""
        self._free.extend(self._used)
        self._used.clear()
