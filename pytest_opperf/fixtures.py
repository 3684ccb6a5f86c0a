"""The fixtures ``opperf`` (measured windows) and ``opperf_benchmark`` (per-op benchmarks)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any

import pytest

from pytest_opperf import benchmark_adapter, hookspec
from pytest_opperf.device import DeviceInfo
from pytest_opperf.identity import run_id_of
from pytest_opperf.recorder import RECORDER, Recorder
from pytest_opperf.settings import SETTINGS, resolved_workload, select_device

if TYPE_CHECKING:
    from pytest_opperf.measure import CountingRun, Run


class OpPerf:
    """The ``opperf`` fixture: measured windows for e2e suites (see docs/usage.md)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._config = request.config
        self._settings = request.config.stash[SETTINGS]
        self._recorder: Recorder | None = self._config.stash.get(RECORDER, None)
        self._windows = 0
        self._names: set[str | None] = set()
        self._open: str | None = None  # the id of the window open now

    @property
    def enabled(self) -> bool:
        """Whether ``--opperf`` is on; off, windows only count steps."""
        return self._recorder is not None

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
        from pytest_opperf import measure  # heavy: only for tests that measure
        from pytest_opperf.results import RUN_KINDS, json_problem

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
        recorder = self._recorder
        if recorder is None:
            with measure.counting_window() as counting:
                yield counting
            return
        run = measure.Run(run_id, kind, config, self.device, self.timing,
                          self._settings.executor_stat, trace="trace" in self._settings.paths,
                          annotate=recorder.nvtx, handover=recorder.step_handover,
                          count_steps=recorder.count_steps,
                          count_timeout_s=recorder.count_timeout_s,
                          instructions=recorder.instructions,
                          callgrind_pass=recorder.callgrind_pass, test=test)
        self._open = run_id
        try:
            with measure.measure_window(run):
                yield run
        finally:
            self._open = None
        for note in run.count_warnings:
            warnings.warn(hookspec.OpPerfStepCountWarning(f"{run_id}: {note}"), stacklevel=3)
        assert run.result is not None  # set when the window closed normally
        recorder.add_run(run.result)


@pytest.fixture
def opperf(request: pytest.FixtureRequest) -> OpPerf:
    """Measured windows: ``with opperf.measure() as run: ... run.step(examples=n)``."""
    return OpPerf(request)


class OpBenchmark:
    """The ``opperf_benchmark`` fixture: pytest-benchmark with a device-aware timer,
    each benchmark also a run of kind ``op`` (or ``overhead``) in the opperf results.

    Use it like pytest-benchmark's ``benchmark`` (call it, or ``.pedantic(...)``);
    ``describe(stat=..., kind=..., config=..., flops=..., bytes=...)`` names the
    stat and gives per-call work. Without ``--opperf`` the target runs once."""

    def __init__(self, request: pytest.FixtureRequest, opperf: OpPerf) -> None:
        self._request = request
        self._opperf = opperf
        self._bench: Any = None
        self.stat: str = getattr(request.node, "originalname", None) or request.node.name
        self.kind = "op"
        self.config: dict[str, Any] = {}
        self.flops: float | None = None
        self.bytes: float | None = None
        self._own_rounds: tuple[list[float], int] | None = None  # timed by pytest_opperf.oploop

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
    def _recorder(self) -> Recorder:
        recorder = self._opperf._recorder
        assert recorder is not None  # only asked for with --opperf
        return recorder

    def _benchmark(self) -> Any:
        timer = self._recorder.benchmark_timer()
        if timer is not None:
            benchmark_adapter.use_timer(self._request.node, timer)
        self._bench = self._request.getfixturevalue("benchmark")
        return self._bench

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._opperf.enabled:
            return function(*args, **kwargs)
        recorder = self._recorder
        if recorder.ab_benchmark is not None:  # an A/B side: the controller asks for the rounds
            return recorder.ab_benchmark(self, function, args, kwargs)
        if recorder.own_loop:
            return self._own_loop(partial(function, *args, **kwargs))
        return self._benchmark()(self._annotated(function), *args, **kwargs)

    def pedantic(self, target: Callable[..., Any], args: tuple = (),
                 kwargs: dict[str, Any] | None = None, setup: Callable[[], Any] | None = None,
                 teardown: Callable[..., Any] | None = None, rounds: int = 1,
                 warmup_rounds: int = 0, iterations: int = 1) -> Any:
        if not self._opperf.enabled:
            from pytest_opperf.oploop import pedantic_round

            return pedantic_round(target, args, kwargs, 1, perf_counter, setup, teardown)[1]
        recorder = self._recorder
        if recorder.ab_benchmark is not None:  # an A/B side: the controller asks for the rounds
            return recorder.ab_benchmark(self, target, args, kwargs or {}, setup=setup,
                                        teardown=teardown)
        if recorder.own_loop:
            return self._own_pedantic(target, args, kwargs, setup, teardown, rounds, warmup_rounds,
                                      iterations)
        return self._benchmark().pedantic(
            self._annotated(target), args=args, kwargs=kwargs, setup=setup, teardown=teardown,
            rounds=rounds, warmup_rounds=warmup_rounds, iterations=iterations)

    # --- per-op timing without pytest-benchmark: L2 flush, per-GPU xdist workers ----------

    def _annotated(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` inside an NVTX range named by the stat, with ``--opperf-nvtx``."""
        nvtx = self._recorder.nvtx
        if nvtx is None:
            return function

        def annotated(*args: Any, **kwargs: Any) -> Any:
            nvtx.push(self.stat)
            try:
                return function(*args, **kwargs)
            finally:
                nvtx.pop()
        return annotated

    def _own_loop(self, call: Callable[[], Any]) -> Any:
        from pytest_opperf.oploop import LoopSettings, time_rounds

        recorder = self._recorder
        option = partial(benchmark_adapter.loop_option, self._request.config)
        settings = LoopSettings(min_rounds=int(option("min_rounds")), max_time=option("max_time"),
                                min_time=option("min_time"))
        result = call()  # the call whose result the test gets (and one more warm-up)
        timer = recorder.benchmark_timer() or perf_counter
        self._own_rounds = time_rounds(self._annotated(call), timer, settings, recorder.flush)
        return result

    def _own_pedantic(self, target: Callable[..., Any], args: tuple, kwargs: dict[str, Any] | None,
                      setup: Callable[[], Any] | None, teardown: Callable[..., Any] | None,
                      rounds: int, warmup_rounds: int, iterations: int) -> Any:
        from pytest_opperf.oploop import pedantic_round

        recorder = self._recorder
        timer = recorder.benchmark_timer() or perf_counter
        per_call, result = [], None
        for i in range(warmup_rounds + rounds):
            elapsed, result = pedantic_round(self._annotated(target), args, kwargs, iterations,
                                             timer, setup, teardown, recorder.flush)
            if i >= warmup_rounds:
                per_call.append(elapsed / iterations)
        self._own_rounds = (per_call, iterations)
        return result

    def _finish(self) -> None:
        recorder = self._opperf._recorder
        if recorder is None:
            return
        node = self._request.node
        if self._own_rounds is not None:
            rounds, iterations = self._own_rounds
            if rounds:
                flushed = {"l2_flush": True} if recorder.flush is not None else {}
                self._add_run(recorder, run_id_of(node), rounds, iterations, loop="opperf",
                              **flushed)
            return
        if self._bench is None or benchmark_adapter.failed(self._bench):
            return
        measured = benchmark_adapter.rounds(self._bench)
        if measured is None:  # pytest-benchmark disabled: the target ran untimed
            recorder.untimed()
            warnings.warn(hookspec.OpPerfBenchmarkWarning(
                f"{node.nodeid}: not timed, pytest-benchmark is disabled (--benchmark-disable, "
                "or xdist)"), stacklevel=2)
            return
        self._add_run(recorder, run_id_of(node), *measured)

    def _add_run(self, recorder: Recorder, run_id: str, rounds: list[float], iterations: int,
                 **loop: Any) -> None:
        from pytest_opperf.measure import op_run

        config = {**self.config,
                  "benchmark": {"rounds": len(rounds), "iterations": iterations, **loop}}
        timing = getattr(recorder.benchmark_timer(), "timing", "host")  # what timed the rounds
        recorder.add_run(op_run(run_id, self.stat, rounds, iterations, self._opperf.device, timing,
                               kind=self.kind, config=config, flops=self.flops, bytes=self.bytes))


@pytest.fixture
def opperf_benchmark(request: pytest.FixtureRequest, opperf: OpPerf) -> Iterator[OpBenchmark]:
    """Per-op benchmarks through pytest-benchmark, contributed to the opperf results."""
    bench = OpBenchmark(request, opperf)
    yield bench
    bench._finish()


