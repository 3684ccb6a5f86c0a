"""What the fixtures may do with an ``--opperf`` session: a few narrow callbacks, not the session.

The session (:mod:`pytest_opperf.session`) puts a :class:`Recorder` in the config's stash; the
fixtures (:mod:`pytest_opperf.fixtures`) read it from there, and an A/B side
(:mod:`pytest_opperf.ab.side`) replaces the callbacks it takes over (the runs go to the controller,
the per-op rounds are the controller's, each step hands the baton over). No module here imports
the session, so there is no import circle between the session, the fixtures and the A/B side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .results import RunResult

__all__ = ["RECORDER", "Recorder"]


@dataclass
class Recorder:
    """The session's side of the fixtures. ``add_run`` takes a finished run (a window or a per-op
    benchmark); ``untimed`` counts a per-op benchmark that ran untimed; ``benchmark_timer`` is the
    session's one timer for per-op rounds (None: pytest-benchmark's own); ``nvtx`` names ranges
    (``--opperf-nvtx``); ``flush`` flushes the L2 before each per-op call; ``own_loop``: per-op
    rounds are timed without pytest-benchmark. An A/B side sets ``step_handover`` (after each
    ``run.step()``) and ``ab_benchmark`` (runs a per-op benchmark's rounds as the controller
    orders). ``count_steps`` and ``count_timeout_s``: each window's counting pass
    (``--opperf-count-steps``, ``--opperf-count-timeout``; an A/B side counts on a test's first
    visit only); ``instructions``: counts a run's CPU instructions after its counting pass
    (``--opperf-instructions``), or None; ``callgrind_pass``: in that option's child process
    under valgrind, what does each counting pass instead
    (:class:`pytest_opperf.instructions.ChildPass`)."""

    add_run: Callable[[RunResult], None]
    untimed: Callable[[], None]
    benchmark_timer: Callable[[], Any]
    nvtx: Any = None
    flush: Callable[[], None] | None = None
    own_loop: bool = False
    step_handover: Callable[[Any], None] | None = None
    ab_benchmark: Callable[..., Any] | None = None
    count_steps: int = 0
    count_timeout_s: float = 300.0
    instructions: Callable[..., None] | None = None
    callgrind_pass: Callable[..., None] | None = None


RECORDER = pytest.StashKey[Recorder]()  # set by the session, only with --opperf
