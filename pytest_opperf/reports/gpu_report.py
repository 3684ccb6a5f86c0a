"""GPU-side readings of a run: host enqueue time beside device span, which bound
an op is, steady-state throughput and one-time compile work. No pytest import.

On a GPU an op's event span runs from a marker queued before its kernels to one queued after them.
While the host is still enqueueing, the device may sit idle inside that span, so for an op whose
kernels are quick the span measures the host (its launches), not the device. The report shows both
clocks and calls an op *launch-bound* when its device span is no longer than its host enqueue time
(within :data:`LAUNCH_MARGIN`): the device had finished by the time the host let go. Otherwise it is
*device-bound*: the device was still working after the host had queued everything.
"""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from ..comparison.metrics import steady_examples_per_sec, steady_steps
from ..results import RunResult

__all__ = ["LAUNCH_MARGIN", "bound", "compile_ms", "device_host_lines", "steady_lines"]

LAUNCH_MARGIN = 0.10
COMPILE_STAT = "CompileTimer"


def bound(stat: Any) -> str | None:
    """``"launch"`` or ``"device"`` for a stat timed on the device clock with its host
    time known, else ``None``."""
    host = getattr(stat, "host_ms", None)
    if getattr(stat, "clock", "host") != "device" or host is None or host <= 0:
        return None
    return "launch" if stat.total_ms <= host * (1 + LAUNCH_MARGIN) else "device"


def device_host_lines(run: Any, limit: int = 15) -> list[str]:
    """The device-clock stats (largest device total first, at most ``limit``): device
    span and host enqueue per call, and the bound; empty when nothing was on the device."""
    stats = [s for s in run.stats if bound(s) is not None and s.count]
    if not stats:
        return []
    stats.sort(key=lambda s: -s.total_ms)
    rows = [[s.name, f"{s.avg_ms:.3f}", f"{s.host_ms / s.count:.3f}",
             f"{s.total_ms / s.host_ms:.2f}", bound(s)] for s in stats[:limit]]
    launch = sum(1 for s in stats if bound(s) == "launch")
    table = tabulate(rows, ["op", "device avg", "host avg", "device/host", "bound"],
                     tablefmt="plain", disable_numparse=True,
                     colalign=("left", "right", "right", "right", "left"))
    head = (f"device span vs host enqueue per call (ms): {launch} of {len(stats)} kernel stats "
            f"launch-bound (span <= host time + {LAUNCH_MARGIN:.0%}: "
            "the span measures the launches)")
    more = [f"... {len(stats) - limit} more"] if len(stats) > limit else []
    return [head, *table.splitlines(), *more]


def compile_ms(run: Any) -> float:
    """One-time kernel compile (and load) time recorded in the run."""
    stat = run.stat(COMPILE_STAT) if hasattr(run, "stat") else None
    return stat.total_ms if stat is not None else 0.0


def steady_lines(run: RunResult) -> list[str]:
    """A line with the steady-state throughput
    (:func:`pytest_opperf.comparison.metrics.steady_examples_per_sec`) and one with the compile
    time, when there are any."""
    steady, compiled = steady_examples_per_sec(run), compile_ms(run)
    lines = []
    if steady is not None:
        lines.append(f"steady state: {steady:.5f} examples/sec over the "
                     f"{len(steady_steps(run))} steps after warm-up")
    if compiled:
        lines.append(f"kernel compiles {compiled:.1f} ms ({COMPILE_STAT}, one-time work)")
    return lines
