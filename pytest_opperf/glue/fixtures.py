"""The fixtures ``opperf`` (measured windows) and ``opperf_benchmark`` (per-op benchmarks)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import TYPE_CHECKING, Any

import pytest

from .. import hookspec
from ..core.identity import run_id_of
from ..core.port import Port
from ..device import DeviceInfo
from .settings import PORT, SETTINGS, resolved_workload, select_device

if TYPE_CHECKING:
    from ..measure import CountingRun, Run


class OpPerf:
    """The ``opperf`` fixture: measured windows for e2e suites (see docs/reference/api.md)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._config = request.config
        self._settings = request.config.stash[SETTINGS]
        self._port: Port | None = self._config.stash.get(PORT, None)
        self._windows = 0
        self._names: set[str | None] = set()
        self._open: str | None = None  # the id of the window open now

    @property
    def enabled(self) -> bool:
        """Whether ``--opperf`` is on; off, windows only count steps."""
        return self._port is not None

    @property
    def device(self) -> DeviceInfo:
        return select_device(self._config)

    @property
    def workload(self) -> str:
        """tiny|small|full (``auto`` resolved: full on a GPU, else small)."""
        return resolved_workload(self._settings, self.device)

    @property
    def timing(self) -> str:
        return self._settings.timing

    @contextmanager
    def measure(self, kind: str = "e2e", config: dict[str, Any] | None = None,
                name: str | None = None) -> Iterator[Run | CountingRun]:
        """A measured window: wall clock plus a recording of every timed region on this thread.

        Call ``run.step(examples=n)`` once per batch. On a normal exit the run's
        result joins the session and is ``run.result``. ``config`` becomes the
        JSON run's ``config``; ``name`` tells apart several windows of one test
        (their ids are ``<node id>#<name>``; unnamed extra windows get ``#2``...).
        After the window, ``run.counting_pass(step)`` counts the work of a few more steps
        (``step()`` runs one; see :meth:`pytest_opperf.measure.Run.counting_pass`).
        """
        from .. import measure  # heavy: only for tests that measure
        from ..results import RUN_KINDS, json_problem

        if kind not in RUN_KINDS:
            raise ValueError(f"opperf.measure: kind must be one of {'|'.join(RUN_KINDS)}, "
                             f"got {kind!r}")
        if self._open is not None:
            # the inner recording would take every region over and the outer window would undercount
            raise RuntimeError(f"opperf.measure: a window cannot open inside the open window "
                               f"{self._open!r}; close it first (measured windows do not nest)")
        if name is not None and name in self._names:
            raise ValueError(f"opperf.measure: name {name!r} is already used by another window of "
                             "this test; give each window its own name (run ids must be unique)")
        self._names.add(name)
        self._windows += 1
        run_id = test = run_id_of(self._request.node)
        if name is not None:
            run_id = f"{run_id}#{name}"
        elif self._windows > 1:
            run_id = f"{run_id}#{self._windows}"
        problem = json_problem(config, "config") if config is not None else None
        if problem:
            raise ValueError(f"opperf.measure: run {run_id!r}: {problem}")
        port = self._port
        if port is None:
            with measure.counting_window() as counting:
                yield counting
            return
        run = measure.Run(run_id, kind, config, self.device, self.timing,
                          self._settings.executor_stat, trace="trace" in self._settings.paths,
                          window=port.window(test), test=test)
        self._open = run_id
        try:
            with measure.measure_window(run):
                yield run
        finally:
            self._open = None
        for note in run.count_warnings:
            warnings.warn(hookspec.OpPerfStepCountWarning(f"{run_id}: {note}"), stacklevel=3)
        assert run.result is not None  # set when the window closed normally
        port.add_run(run.result)


@pytest.fixture
def opperf(request: pytest.FixtureRequest) -> OpPerf:
    """Measured windows: ``with opperf.measure() as run: ... run.step(examples=n)``."""
    return OpPerf(request)


class OpBenchmark:
    """The ``opperf_benchmark`` fixture: pytest-benchmark with a device-aware timer,
    each benchmark also a run of kind ``op`` (or ``overhead``) in the opperf results.

    Use it like pytest-benchmark's ``benchmark`` (call it, or ``.pedantic(...)``);
    ``describe(stat=..., kind=..., config=..., flops=..., bytes=...)`` names the
    stat and gives per-call work. Without ``--opperf`` the target runs once. With it, the
    session's port times the rounds (:class:`pytest_opperf.core.port.PerOpTimer`)."""

    def __init__(self, request: pytest.FixtureRequest, opperf: OpPerf) -> None:
        self.request = request
        self._opperf = opperf
        self.timed: Any = None  # what the port's per-op timer keeps until the test ends
        self.stat: str = getattr(request.node, "originalname", None) or request.node.name
        self.kind = "op"
        self.config: dict[str, Any] = {}
        self.flops: float | None = None
        self.bytes: float | None = None

    def describe(self, stat: str | None = None, kind: str | None = None,
                 config: dict[str, Any] | None = None, flops: float | None = None,
                 bytes: float | None = None) -> OpBenchmark:
        if kind is not None and kind not in ("op", "overhead"):
            raise ValueError(f"opperf_benchmark.describe: kind must be op|overhead, got {kind!r}")
        self.stat = stat or self.stat
        self.kind = kind or self.kind
        self.config = dict(config) if config is not None else self.config
        self.flops = flops if flops is not None else self.flops
        self.bytes = bytes if bytes is not None else self.bytes
        return self

    @property
    def _port(self) -> Port:
        port = self._opperf._port
        assert port is not None  # only asked for with --opperf
        return port

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._opperf.enabled:
            return function(*args, **kwargs)
        return self._port.per_op.call(self, function, args, kwargs)

    def pedantic(self, target: Callable[..., Any], args: tuple = (),
                 kwargs: dict[str, Any] | None = None, setup: Callable[[], Any] | None = None,
                 teardown: Callable[..., Any] | None = None, rounds: int = 1,
                 warmup_rounds: int = 0, iterations: int = 1) -> Any:
        if not self._opperf.enabled:
            from ..core.oploop import pedantic_round

            return pedantic_round(target, args, kwargs, 1, perf_counter, setup, teardown)[1]
        return self._port.per_op.pedantic(self, target, args, kwargs, setup, teardown, rounds,
                                          warmup_rounds, iterations)

    def annotated(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` inside an NVTX range named by the stat, with ``--opperf-nvtx``."""
        nvtx = self._port.nvtx
        if nvtx is None:
            return function

        def annotated(*args: Any, **kwargs: Any) -> Any:
            nvtx.push(self.stat)
            try:
                return function(*args, **kwargs)
            finally:
                nvtx.pop()
        return annotated

    def record(self, rounds: list[float], iterations: int, **loop: Any) -> None:
        """The benchmark's run from its rounds (per-call seconds), into the session's runs;
        ``loop`` goes to the run's ``config.benchmark``."""
        from ..measure import op_run

        port = self._port
        config = {**self.config,
                  "benchmark": {"rounds": len(rounds), "iterations": iterations, **loop}}
        timing = getattr(port.timer, "timing", "host")  # what timed the rounds
        port.add_run(op_run(run_id_of(self.request.node), self.stat, rounds, iterations,
                            self._opperf.device, timing, kind=self.kind, config=config,
                            flops=self.flops, bytes=self.bytes))

    def _finish(self) -> None:
        if self._opperf.enabled:
            self._port.per_op.finish(self)


@pytest.fixture
def opperf_benchmark(request: pytest.FixtureRequest, opperf: OpPerf) -> Iterator[OpBenchmark]:
    """Per-op benchmarks through pytest-benchmark, contributed to the opperf results."""
    bench = OpBenchmark(request, opperf)
    yield bench
    bench._finish()


