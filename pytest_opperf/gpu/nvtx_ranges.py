"""NVTX ranges named as the report names things, for Nsight Systems (``--opperf-nvtx``).

With the option on, every timed region of a measured window (each op, the executor's timers) is a
push/pop range and each ``run.step()`` interval a ``step N`` start/end range, all in the ``opperf``
domain, so a profile of the session (``nsys profile pytest suites/ --opperf --opperf-nvtx``) shows
the report's names on its timeline. The ``nvtx`` package is optional and imported only when the
option is on. No pytest import.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["DOMAIN", "NvtxRanges", "NvtxUnavailable", "load"]

DOMAIN = "opperf"


class NvtxUnavailable(Exception):
    """The ``nvtx`` package cannot be imported."""


class NvtxRanges:
    """The annotator a :class:`pytest_opperf.timers.Table` calls around regions."""

    def __init__(self, module: Any) -> None:
        self._nvtx = module
        self._step: Any = None

    def push(self, name: str) -> None:
        self._nvtx.push_range(message=name, domain=DOMAIN)

    def pop(self) -> None:
        self._nvtx.pop_range(domain=DOMAIN)

    def start_step(self, number: int) -> None:
        self.end_step()
        self._step = self._nvtx.start_range(message=f"step {number}", domain=DOMAIN)

    def end_step(self) -> None:
        if self._step is not None:
            self._nvtx.end_range(self._step)
            self._step = None


def load() -> NvtxRanges:
    """Ranges through the ``nvtx`` package; :class:`NvtxUnavailable` says how to install it."""
    try:
        module = importlib.import_module("nvtx")
    except ImportError as exc:
        raise NvtxUnavailable(f"the nvtx package is not installed ({exc}); pip install nvtx, "
                              "or the gpu extra: pip install 'pytest-opperf[gpu]'") from None
    return NvtxRanges(module)
