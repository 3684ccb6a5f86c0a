"""PyTorch support: each aten op of a window as a kernel stat, the torch device, op benchmarks.

Use (docs/adapters.md, "PyTorch", shows it whole): ``with opperf.measure() as run, profile():``
around the training loop, and ``from pytest_opperf.torch import pytest_opperf_select_device`` in
the suite's ``conftest.py`` (CUDA when usable, else the CPU).

:func:`profile` is in :mod:`pytest_opperf.torch.profiling` (its default mechanism on the CPU,
torch's profiler read after the window, in :mod:`pytest_opperf.torch.recorded`); the device hook and
its CUDA event clock in :mod:`pytest_opperf.torch.device`; per-op benchmarks of torch callables
(:func:`benchmark_op`, :func:`op_flops`) in :mod:`pytest_opperf.torch.bench`. This package imports
torch only when one of those is used, so a ``conftest.py`` may re-export the hook on a machine
without torch (it then leaves the choice of device to others).
"""

from __future__ import annotations

from typing import Any

from .device import pytest_opperf_select_device

__all__ = ["ACCOUNTING_NOTE", "CudaEventClock", "Profile", "benchmark_op", "op_flops", "profile",
           "pytest_opperf_select_device"]

# name: (module, its name there); Profile is profiling.TorchProfile
_LAZY = {"ACCOUNTING_NOTE": ("profiling", "ACCOUNTING_NOTE"),
         "Profile": ("profiling", "TorchProfile"), "profile": ("profiling", "profile"),
         "CudaEventClock": ("device", "CudaEventClock"), "benchmark_op": ("bench", "benchmark_op"),
         "op_flops": ("bench", "op_flops")}


def __getattr__(name: str) -> Any:
    module, attribute = _LAZY.get(name, (None, name))
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), attribute)
