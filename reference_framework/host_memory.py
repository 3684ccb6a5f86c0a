"""Host memory kept in the process, as Fluid's CPU allocator keeps it (CPU only).

Fluid's executor deletes the local scope after every run, and its tensors go back to the
framework's allocator, which keeps the memory for the next run (the CPU buddy allocator, as CuPy's
memory pool does on the GPU). numpy's arrays come from the C library's ``malloc`` instead, and
glibc's defaults give memory back to the system: arrays above its mmap threshold are mapped and
unmapped one by one, and the top of the heap is trimmed once more than the trim threshold lies
free there. Both thresholds move while the process runs (each freed mapping raises them), so the
faithful executor, which frees every array of a step at once, made the kernel fault its pages in
again in some steps and processes and not in others: on AMD EPYC (2 cores, one busy loop beside
it) its ResNet-50 step took 396 ms against 349 ms with the memory kept, and fresh processes
spread 3.2 times as much (the standard deviation of their log median step, 0.035 against 0.011;
``benchmarks/host_memory.py``, docs/reference-framework.md, "Host memory").

:func:`apply`, called when this module is imported (with the framework), fixes both
thresholds with glibc's ``mallopt``: arrays up to :data:`MMAP_THRESHOLD` come from the heap and
the heap is not trimmed below :data:`TRIM_THRESHOLD` free, so a step reuses the memory the step
before it freed. ``REFERENCE_FRAMEWORK_HOST_MEMORY=system`` leaves the C library's defaults
alone (the behaviour before); any other value than ``retain`` (the default) or ``system`` is an
error. Without a ``mallopt`` (macOS) the mode is ``system`` and :data:`MODE` says why; a C
library whose ``mallopt`` refuses the thresholds (musl's) leaves it ``system`` too, with a
warning.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import warnings

__all__ = ["ENV", "MMAP_THRESHOLD", "MODE", "TRIM_THRESHOLD", "apply"]

ENV = "REFERENCE_FRAMEWORK_HOST_MEMORY"

# glibc's largest mmap threshold on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX); larger arrays
# are still mapped, and unmapped when freed, one by one.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3

MODE = "not applied"  # what apply() did: "retain", or "system" and why


def _mode_from_env() -> str:
    value = os.environ.get(ENV, "").strip()
    if value in ("", "retain"):
        return "retain"
    if value == "system":
        return "system"
    raise ValueError(f"{ENV} expects 'retain' (the default) or 'system', given {value!r}")


def apply() -> str:
    """Keep freed host memory in the process (glibc's thresholds fixed), unless the environment
    asks for the C library's defaults; returns and records in :data:`MODE` what is in effect."""
    global MODE
    mode = _mode_from_env()
    if mode == "system":
        MODE = f"system ({ENV}=system)"
        return MODE
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        MODE = "system (no glibc mallopt in this process's C library)"
        return MODE
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and
            mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        MODE = "system (this C library's mallopt refused the thresholds)"
        warnings.warn(f"host memory: {MODE}; freed arrays go back to the system, and steps "
                      f"and processes differ more (set {ENV}=system to say so)",
                      RuntimeWarning, stacklevel=2)
        return MODE
    MODE = "retain"
    return MODE


apply()
