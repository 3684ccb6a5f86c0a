"""Per-op timing without pytest-benchmark: calibrated rounds on a given timer.

pytest-benchmark turns itself off under pytest-xdist, and its automatic mode has no hook to run work
between rounds. Two cases need both: per-op benchmarks on per-GPU xdist workers (each worker owns
its GPU, so parallel workers do not disturb each other), and cold-cache timing, which flushes the
GPU's L2 cache before every timed call. :func:`time_rounds` follows pytest-benchmark's automatic
mode (warm-up, iterations calibrated until a round lasts ``min_time``, rounds until ``max_time`` has
passed and at least ``min_rounds`` were done) and returns per-call seconds of each round. No pytest
import.

:func:`pedantic_round` is one round of a pedantic benchmark (``setup`` gives each round its
arguments, ``teardown`` follows it): the one round loop of the plugin's own per-op timing (both
modes: :func:`time_rounds` times its rounds with it) and of an A/B side, which times the rounds the
controller orders. :class:`OwnLoop` is the per-op timer
(:class:`pytest_opperf.core.port.PerOpTimer`) of a role that times per-op benchmarks itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import Any

__all__ = ["LoopSettings", "OwnLoop", "pedantic_arguments", "pedantic_round", "time_rounds"]


@dataclass(frozen=True)
class LoopSettings:
    """pytest-benchmark's knobs of the same names (``--benchmark-min-rounds``...)."""

    min_rounds: int = 5
    max_time: float = 1.0  # seconds of wall time for the timed rounds
    min_time: float = 0.000005  # a round lasts at least this long (iterations calibrated)
    warmup_rounds: int = 1
    max_rounds: int = 100_000
    max_iterations: int = 1 << 20


def time_rounds(call: Callable[[], object], timer: Callable[[], float],
                settings: LoopSettings = LoopSettings(),
                before_round: Callable[[], object] | None = None,
                clock: Callable[[], float] = perf_counter) -> tuple[list[float], int]:
    """Time ``call``: ``(per-call seconds of each round, iterations per round)``.

    ``timer`` reads the time (the session's device-aware timer); ``clock`` is the
    wall clock that bounds the run. With ``before_round`` (an L2 flush) every
    round is one call, preceded by it, outside the timed span.
    """
    for _ in range(settings.warmup_rounds):
        if before_round is not None:
            before_round()
        call()
    iterations = 1
    if before_round is None:
        while (iterations < settings.max_iterations
               and pedantic_round(call, (), None, iterations, timer)[0] < settings.min_time):
            iterations *= 2
    rounds: list[float] = []
    start = clock()
    while len(rounds) < settings.min_rounds or (
            len(rounds) < settings.max_rounds and clock() - start < settings.max_time):
        elapsed, _ = pedantic_round(call, (), None, iterations, timer, before=before_round)
        rounds.append(elapsed / iterations)
    return rounds, iterations


def pedantic_arguments(setup: Callable[[], Any] | None, args: tuple,
                       kwargs: dict[str, Any] | None) -> tuple[tuple, dict[str, Any]]:
    """A pedantic call's arguments: what ``setup`` returns, when it returns them."""
    made = setup() if setup is not None else None
    return made if made else (args, kwargs or {})


def pedantic_round(target: Callable[..., Any], args: tuple, kwargs: dict[str, Any] | None,
                   iterations: int, timer: Callable[[], float],
                   setup: Callable[[], Any] | None = None,
                   teardown: Callable[..., Any] | None = None,
                   before: Callable[[], object] | None = None) -> tuple[float, Any]:
    """``(seconds, last result)`` of one round: ``iterations`` calls of ``target`` timed together
    on ``timer``, with the arguments of ``setup`` (else ``args``, ``kwargs``); ``before`` (an L2
    flush) and ``teardown`` run outside the timed span."""
    a, k = pedantic_arguments(setup, args, kwargs)
    if before is not None:
        before()
    result = None
    start = timer()
    for _ in range(iterations):
        result = target(*a, **k)
    elapsed = timer() - start
    if teardown is not None:
        teardown(*a, **k)
    return elapsed, result


class OwnLoop:
    """Per-op benchmarks timed by this module on ``timer`` (the session's, else the host's), with
    ``settings`` (pytest-benchmark's options of the same names) and, with ``flush``, the L2 cache
    flushed before each timed call."""

    def __init__(self, settings: LoopSettings, timer: Callable[[], float] | None,
                 flush: Callable[[], None] | None) -> None:
        self.settings = settings
        self.timer = timer or perf_counter
        self.flush = flush

    def call(self, bench: Any, function: Callable[..., Any], args: tuple,
             kwargs: dict[str, Any]) -> Any:
        call = partial(function, *args, **kwargs)
        result = call()  # the call whose result the test gets (and one more warm-up)
        bench.timed = time_rounds(bench.annotated(call), self.timer, self.settings, self.flush)
        return result

    def pedantic(self, bench: Any, target: Callable[..., Any], args: tuple,
                 kwargs: dict[str, Any] | None, setup: Callable[[], Any] | None,
                 teardown: Callable[..., Any] | None, rounds: int, warmup_rounds: int,
                 iterations: int) -> Any:
        per_call, result = [], None
        for i in range(warmup_rounds + rounds):
            elapsed, result = pedantic_round(bench.annotated(target), args, kwargs, iterations,
                                             self.timer, setup, teardown, self.flush)
            if i >= warmup_rounds:
                per_call.append(elapsed / iterations)
        bench.timed = (per_call, iterations)
        return result

    def finish(self, bench: Any) -> None:
        if bench.timed is None:
            return
        rounds, iterations = bench.timed
        if rounds:
            flushed = {"l2_flush": True} if self.flush is not None else {}
            bench.record(rounds, iterations, loop="opperf", **flushed)
