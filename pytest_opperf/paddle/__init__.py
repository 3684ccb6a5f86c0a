"""PaddlePaddle support: each Paddle operator of a window as a kernel stat, and Paddle's device.

Use (docs/adapters.md, "PaddlePaddle", shows it whole): ``with opperf.measure() as run,
profile():`` around the training loop, static graph or dygraph, and ``from pytest_opperf.paddle
import pytest_opperf_select_device`` in the suite's ``conftest.py`` (a CUDA place when usable and
asked for, else the CPU).

:func:`profile` is in :mod:`pytest_opperf.paddle.profiling` (Paddle's host tracer, read after the
window); which events are ops, and their names, in :mod:`pytest_opperf.paddle.events`; the device
hook in :mod:`pytest_opperf.paddle.device`; the supported Paddle releases in
:mod:`pytest_opperf.paddle.support`. This package imports paddle only when one of those is used,
so a ``conftest.py`` may re-export the hook on a machine without paddle.
"""

from __future__ import annotations

from typing import Any

from .device import pytest_opperf_select_device

__all__ = ["EXECUTOR", "Profile", "profile", "pytest_opperf_select_device"]

# name: (module, its name there); Profile is profiling.PaddleProfile
_LAZY = {"EXECUTOR": ("events", "EXECUTOR"), "Profile": ("profiling", "PaddleProfile"),
         "profile": ("profiling", "profile")}


def __getattr__(name: str) -> Any:
    module, attribute = _LAZY.get(name, (None, name))
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), attribute)
