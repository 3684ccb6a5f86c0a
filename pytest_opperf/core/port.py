"""What the fixtures may do with an ``--opperf`` session: its role's port, built once.

The role (:mod:`pytest_opperf.glue.roles`) builds one frozen :class:`Port` when its session starts
and puts it in the config's stash (``pytest_opperf.glue.settings.PORT``); the fixtures
(:mod:`pytest_opperf.glue.fixtures`) read it from there and never ask which role they run in: a
finished run goes to ``add_run``, a per-op benchmark to the port's :class:`PerOpTimer`, and a
measured window of a test takes the :class:`Window` the port gives for that test. No pytest
import, and no session: no import circle between the roles, the fixtures, the measured windows
and the A/B side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..results import RunResult

__all__ = ["PerOpTimer", "Port", "Window"]

# (run, step, steps): counts a run's counting pass, or what follows it
CountStep = Callable[[Any, Callable[[], object], int], None]


@dataclass(frozen=True)
class Window:
    """What a measured window (:class:`pytest_opperf.measure.Run`) of one test gets from its role.

    ``annotate``: NVTX ranges around regions and steps (``--opperf-nvtx``), or None;
    ``after_step``: called after each ``run.step()`` (an A/B side hands the baton over; the time it
    takes is not the window's); ``count_steps`` and ``count_timeout_s``: the counting pass
    (``--opperf-count-steps``, ``--opperf-count-timeout``); ``counter``: what counts the pass
    instead of the Python tracer (the valgrind child: callgrind), or None; ``after_count``: what
    runs after the tracer's pass (``--opperf-instructions``: the CPU instructions), or None;
    ``count_root``: the checkout that the counted functions' files are named relative to (the
    session's root directory), or None (the current directory)."""

    annotate: Any = None
    after_step: Callable[[Any], None] | None = None
    count_steps: int = 0
    count_timeout_s: float = 300.0
    counter: CountStep | None = None
    after_count: CountStep | None = None
    count_root: str | None = None


class PerOpTimer(Protocol):
    """How a role times the per-op benchmarks of ``opperf_benchmark`` (``bench``: the fixture):
    pytest-benchmark (:class:`pytest_opperf.glue.benchmark_adapter.ThroughBenchmark`), the plugin's
    own loop (:class:`pytest_opperf.core.oploop.OwnLoop`) or the A/B controller's rounds
    (:class:`pytest_opperf.ab.side.ControllerRounds`). ``finish`` runs after the test."""

    def call(self, bench: Any, function: Callable[..., Any], args: tuple,
             kwargs: dict[str, Any]) -> Any: ...

    def pedantic(self, bench: Any, target: Callable[..., Any], args: tuple,
                 kwargs: dict[str, Any] | None, setup: Callable[[], Any] | None,
                 teardown: Callable[..., Any] | None, rounds: int, warmup_rounds: int,
                 iterations: int) -> Any: ...

    def finish(self, bench: Any) -> None: ...


@dataclass(frozen=True)
class Port:
    """The role's side of the fixtures. ``add_run`` takes a finished run (a window or a per-op
    benchmark); ``untimed`` counts a per-op benchmark that ran untimed; ``timer`` is the session's
    one timer for per-op rounds (None: pytest-benchmark's own); ``per_op`` times per-op
    benchmarks; ``window(test)`` is what a measured window of ``test`` (a node id) gets; ``nvtx``
    names ranges (``--opperf-nvtx``), or None."""

    add_run: Callable[[RunResult], None]
    untimed: Callable[[], None]
    timer: Any
    per_op: PerOpTimer
    window: Callable[[str], Window]
    nvtx: Any = None
