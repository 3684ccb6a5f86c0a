"""Per-op benchmarks of torch callables with the ``opperf_benchmark`` fixture and torch's FLOPs.

The fixture times the rounds with the session's device timer: on a CUDA device
(``pytest_opperf_select_device``) CUDA events with a synchronisation per round, or a sync per round
with ``--opperf-timing=sync``; on the CPU pytest-benchmark's own clock. FLOPs per call come from
``torch.utils.flop_counter`` for the ops it has formulas for (convolutions, matrix products,
attention); for others the run carries no FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.flop_counter import FlopCounterMode

__all__ = ["benchmark_op", "op_flops"]


def op_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float | None:
    """FLOPs of one call ``fn(*args, **kwargs)`` as torch counts them (it runs the call once);
    ``None`` when torch's flop counter knows none of the ops it ran."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn(*args, **kwargs)
    total = counter.get_total_flops()
    return float(total) if total else None


def benchmark_op(opperf_benchmark: Any, fn: Callable[..., Any], *args: Any, stat: str | None = None,
                 config: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """Benchmark ``fn(*args, **kwargs)`` as an op run named ``stat``, FLOPs from torch's counter
    (counting runs the call once more, which also warms it up). Without ``--opperf`` the
    fixture runs the call once, untimed: a smoke test."""
    opperf_benchmark.describe(stat=stat, kind="op", config=config,
                              flops=op_flops(fn, *args, **kwargs))
    return opperf_benchmark(fn, *args, **kwargs)
