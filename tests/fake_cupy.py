"""A stand-in for cupy that runs on numpy and keeps track of devices, for the
device logic of the GPU path on machines without a GPU.

Arrays remember the device that was current when they were made; a ufunc
given an array of a device other than the current one fails as cupy does
without peer access, and every event, stream sync, random generator and raw
kernel launch notes the device it ran on. Install it with :func:`install`
(a fixture in the tests that use it); ``numpy`` does the arithmetic.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np


class PeerAccessError(RuntimeError):
    """An array of one device met a kernel of another."""


class FakeDevice:
    """``cupy.cuda.Device``: a context manager making its device current."""

    def __init__(self, cp: FakeCupy, device_id: int | None = None) -> None:
        self._cp = cp
        self.id = cp.current if device_id is None else device_id
        self._previous: list[int] = []

    @property
    def pci_bus_id(self) -> str:
        return f"0000:{self.id + 1:02X}:00.0"

    def __enter__(self) -> FakeDevice:
        self._previous.append(self._cp.current)
        self._cp.current = self.id
        return self

    def __exit__(self, *exc: object) -> None:
        self._cp.current = self._previous.pop()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeDevice) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)


class _Memory:
    def __init__(self, array: FakeArray) -> None:
        self._array = array

    def memset_async(self, value: int, size: int, stream: Any = None) -> None:
        cp = _the_fake()
        cp.log.append(("memset", cp.current, size))
        self._array.view(np.ndarray).reshape(-1).view(np.uint8)[:size] = value


class FakeArray(np.ndarray):
    """A numpy array that lives on a fake device."""

    def __array_finalize__(self, obj: Any) -> None:
        self._dev = getattr(obj, "_dev", None)
        if self._dev is None:
            self._dev = _the_fake().current

    @property
    def device(self) -> FakeDevice:  # numpy 2 arrays have a .device ("cpu"); this one is a fake GPU
        return FakeDevice(_the_fake(), self._dev)

    @property
    def data(self) -> _Memory:  # type: ignore[override]
        return _Memory(self)

    def get(self) -> np.ndarray:
        return np.array(self.view(np.ndarray), copy=True)

    def copy(self, order: str = "C") -> FakeArray:  # type: ignore[override]
        return _on_current(np.array(self.view(np.ndarray), copy=True, order=order))

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        cp = _the_fake()
        for a in (*inputs, *kwargs.get("out", ())):
            if isinstance(a, FakeArray) and a._dev != cp.current:
                raise PeerAccessError(
                    f"{ufunc.__name__}: an array of cuda:{a._dev} used on cuda:{cp.current}"
                )
        plain = [a.view(np.ndarray) if isinstance(a, FakeArray) else a for a in inputs]
        outs = kwargs.pop("out", None)
        if outs is not None:
            kwargs["out"] = tuple(
                o.view(np.ndarray) if isinstance(o, FakeArray) else o for o in outs
            )
        result = getattr(ufunc, method)(*plain, **kwargs)
        if outs is not None:
            return outs[0] if len(outs) == 1 else outs
        if isinstance(result, tuple):
            return tuple(_on_current(r) for r in result)
        return _on_current(result) if isinstance(result, np.ndarray) else result


def _on_current(a: np.ndarray) -> FakeArray:
    out = np.asarray(a).view(FakeArray)
    out._dev = _the_fake().current
    return out


class FakeEvent:
    def __init__(self) -> None:
        cp = _the_fake()
        self.made_on = cp.current
        self.recorded_on: int | None = None

    def record(self, stream: Any = None) -> None:
        cp = _the_fake()
        if cp.current != self.made_on:
            raise RuntimeError(f"event of cuda:{self.made_on} recorded on cuda:{cp.current}")
        self.recorded_on = cp.current
        cp.log.append(("record", cp.current))


class FakeStream:
    def synchronize(self) -> None:
        cp = _the_fake()
        cp.log.append(("sync", cp.current))


class FakeRandomState:
    """``cupy.random.RandomState``: one per device, reseedable."""

    def __init__(self) -> None:
        cp = _the_fake()
        self.device = cp.current
        self._rng = np.random.RandomState(0)
        cp.log.append(("random_state", cp.current))

    def seed(self, seed: int | None = None) -> None:
        self._rng = np.random.RandomState(seed)

    def _check(self) -> None:
        if _the_fake().current != self.device:
            raise RuntimeError(
                f"a generator of cuda:{self.device} used on cuda:{_the_fake().current}"
            )

    def standard_normal(self, size: Any, dtype: Any = float) -> FakeArray:
        self._check()
        return _on_current(self._rng.standard_normal(size).astype(dtype))

    def random_sample(self, size: Any, dtype: Any = float) -> FakeArray:
        self._check()
        return _on_current(self._rng.random_sample(size).astype(dtype))


class FakeRawKernel:
    """``cupy.RawKernel``: runs the GPU probe's kernel (or fails to compile)."""

    def __init__(self, code: str, name: str, options: tuple = ()) -> None:
        self.name = name

    def __call__(self, grid: tuple, block: tuple, args: tuple) -> None:
        cp = _the_fake()
        if cp.nvrtc_error is not None:
            raise RuntimeError(cp.nvrtc_error)
        out = args[0]
        for t in range(block[0]):
            out.view(np.ndarray)[t] = 40 + t
        cp.log.append(("launch", cp.current, self.name))


class _Runtime:
    def __init__(self, cp: FakeCupy) -> None:
        self._cp = cp

    def getDeviceCount(self) -> int:
        if self._cp.driver_error is not None:
            raise RuntimeError(self._cp.driver_error)
        return self._cp.devices

    def getDevice(self) -> int:
        return self._cp.current

    def getDeviceProperties(self, device: int) -> dict[str, Any]:
        return {"name": b"Fake GPU", "l2CacheSize": 1 << 20}

    def driverGetVersion(self) -> int:
        return 12040

    def runtimeGetVersion(self) -> int:
        return 12020


class FakeCupy(types.ModuleType):
    """The module: numpy functions, with arrays made on the current device."""

    def __init__(self, devices: int = 2) -> None:
        super().__init__("cupy")
        self.devices = devices
        self.current = 0
        self.log: list[tuple] = []
        self.nvrtc_error: str | None = None
        self.elementwise_error: str | None = None
        self.driver_error: str | None = None
        self.ndarray = FakeArray
        self.RawKernel = FakeRawKernel
        self.__version__ = "14.0.0-fake"
        cuda = types.SimpleNamespace()
        cuda.Device = lambda device_id=None: FakeDevice(self, device_id)
        cuda.runtime = _Runtime(self)
        cuda.Event = FakeEvent
        cuda.get_current_stream = FakeStream
        cuda.get_elapsed_time = lambda a, b: 0.0
        self.cuda = cuda
        self.random = types.SimpleNamespace(RandomState=FakeRandomState)

    def asarray(self, a: Any, dtype: Any = None) -> FakeArray:
        if isinstance(a, FakeArray):  # cupy keeps an array where it is
            return a if dtype is None or a.dtype == dtype else a.astype(dtype)
        return _on_current(np.array(a, dtype=dtype))

    def arange(self, *args: Any, **kwargs: Any) -> FakeArray:
        if self.elementwise_error is not None:
            raise RuntimeError(self.elementwise_error)
        return _on_current(np.arange(*args, **kwargs))

    def ascontiguousarray(self, a: Any, dtype: Any = None) -> FakeArray:
        if (
            isinstance(a, FakeArray)
            and a.flags.c_contiguous
            and (dtype is None or a.dtype == dtype)
        ):
            return a  # cupy returns the array itself, on its device
        return self.asarray(np.ascontiguousarray(a, dtype=dtype))

    def __getattr__(self, name: str) -> Any:
        attr = getattr(np, name)
        if callable(attr) and not isinstance(attr, (type, np.ufunc)):
            def on_device(*args: Any, **kwargs: Any) -> Any:
                result = attr(*args, **kwargs)
                return (
                    _on_current(result)
                    if isinstance(result, np.ndarray) and not isinstance(result, FakeArray)
                    else result
                )
            return on_device
        return attr


_FAKE: list[FakeCupy] = []


def _the_fake() -> FakeCupy:
    return _FAKE[-1]


def install(monkeypatch: Any, devices: int = 2) -> FakeCupy:
    """Make ``import cupy`` give a fresh fake and forget the backend's cached answers."""
    from reference_framework import backend
    from reference_framework.ops import cuda_kernels

    fake = FakeCupy(devices)
    _FAKE.append(fake)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    caches = (
        backend.cupy_or_none,
        backend._gpu_problem,
        backend._random_state,
        cuda_kernels._function,
    )
    for cached in caches:
        cached.cache_clear()

    def forget() -> None:
        for cached in caches:
            cached.cache_clear()
        _FAKE.remove(fake)

    monkeypatch.setattr(fake, "_forget", forget, raising=False)
    return fake
