"""What every role of an ``--opperf`` session does (the plugin imports this module only then).

:class:`OpPerfSession` is the part the roles share: it selects the device, collects the runs the
fixtures hand it, and builds the role's port (:class:`pytest_opperf.core.port.Port`) once, when the
session starts. Each role (:mod:`pytest_opperf.glue.roles` chooses one per process) is a subclass:
the main role (:class:`pytest_opperf.glue.main_session.MainSession`) gates, reports and writes
files; a child role collects and hands its runs back (:mod:`pytest_opperf.records.handback`). A
subclass changes what it must through :meth:`~OpPerfSession.start_role`,
:meth:`~OpPerfSession.per_op` and :meth:`~OpPerfSession.window`, and its own hooks; nothing here
asks which role it is.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

from ..core.identity import run_id_of
from ..core.oploop import LoopSettings, OwnLoop
from ..core.port import PerOpTimer, Port, Window
from ..device import CPU_HOST, DeviceInfo, benchmark_timer
from ..gpu import gpu_env, nvtx_ranges
from ..measure import op_run
from ..results import RunResult
from ..workcounts import instructions
from . import benchmark_adapter
from .settings import (
    PORT,
    Settings,
    resolved_workload,
    select_device,
    usage_errors,
)

__all__ = ["OpPerfSession"]


class OpPerfSession:
    """Exists only with ``--opperf``, registered as ``opperf-session``: collects runs."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.runs: list[RunResult] = []
        self.untimed_benchmarks = 0
        self.plain_benchmarks = 0  # tests with pytest-benchmark's `benchmark` fixture, not recorded
        self.device: DeviceInfo = CPU_HOST
        self.workload = "small"
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.session: pytest.Session | None = None
        self.started = time.perf_counter()  # the session's start (pytest_sessionstart)
        self.deselected = 0
        self.failed_tests = 0
        self.tests_run = 0  # tests that reached their setup (skipped ones too)
        self.collect_only = bool(config.getoption("collectonly", False))
        # GPU additions (see _gpu_start): NVTX ranges, the L2 flush, NVML snapshots
        self.nvtx: Any = None
        self.flush: Callable[[], None] | None = None
        self.gpu_env: dict[str, Any] = {}
        self.port: Port | None = None  # built when the session starts
        self.instructions: instructions.Instructions | None = None  # --opperf-instructions
        self._froze = False  # whether this session froze the heap (pytest_collection_finish)
        if settings.nvtx:
            with usage_errors("--opperf-nvtx", nvtx_ranges.NvtxUnavailable):
                self.nvtx = nvtx_ranges.load()

    def _untimed(self) -> None:
        self.untimed_benchmarks += 1

    def add_run(self, run: RunResult) -> None:
        if any(r.id == run.id for r in self.runs):
            raise ValueError(f"opperf: run id {run.id!r} is measured twice in this session (run "
                             "ids must be unique: name the windows with measure(name=...))")
        self.runs.append(run)

    # --- the port: what the fixtures may do, built once -----------------------------------

    def per_op(self, timer: Any) -> PerOpTimer:
        """How this role times per-op benchmarks: pytest-benchmark, or with the L2 flush the
        plugin's own loop (pytest-benchmark has no hook between rounds)."""
        if self.flush is not None:
            return self.oploop(timer)
        return benchmark_adapter.ThroughBenchmark(timer, self._untimed)

    def oploop(self, timer: Any) -> OwnLoop:
        """The plugin's own per-op loop, with pytest-benchmark's options of the same names."""
        def option(name: str) -> float:
            return benchmark_adapter.loop_option(self.config, name)

        settings = LoopSettings(min_rounds=int(option("min_rounds")), max_time=option("max_time"),
                                min_time=option("min_time"))
        return OwnLoop(settings, timer, self.flush)

    def window(self, test: str) -> Window:
        """What a measured window of ``test`` gets; with ``--opperf-instructions``, each
        counted run's CPU instructions are counted after its pass, in a valgrind child."""
        return Window(annotate=self.nvtx, count_steps=self.settings.count_steps,
                      count_timeout_s=self.settings.count_timeout, after_count=self.instructions,
                      count_root=str(self.config.rootpath))

    def _build_port(self) -> Port:
        # one timer per session: pytest-benchmark measures each new timer's precision (1 s)
        timer = benchmark_timer(self.device, self.settings.timing)
        return Port(add_run=self.add_run, untimed=self._untimed, timer=timer,
                    per_op=self.per_op(timer), window=self.window, nvtx=self.nvtx)

    # --- start ---------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session
        self.started = time.perf_counter()
        self.device = select_device(self.config)
        self.workload = resolved_workload(self.settings, self.device)
        self._gpu_start()
        if self.settings.instructions:  # never in a child: the option is stripped for it
            from .options import child_options

            options = child_options(self.settings, workload=self.workload)
            self.instructions = instructions.Instructions(self.config.rootpath, options,
                                                          self.settings.count_timeout)
        self.start_role()
        self.port = self.config.stash[PORT] = self._build_port()

    def start_role(self) -> None:
        """What the role does at the start, before its port is built (nothing here)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Freeze the heap once collected (``gc.freeze()``, after a full collection): the
        collector's full collections then skip pytest's items and every suite's imports (torch
        and paddle alone are about 245,000 objects, 100-140 ms a collection here), which would
        otherwise land in whatever step or call a collection interrupts. A measured window pays
        for the garbage its own code leaves, not for the size of the session around it. Undone
        when pytest unconfigures (:meth:`pytest_unconfigure`), unless something had frozen
        objects before: a process that runs sessions in turn (pytester) does not keep them."""
        if not self.collect_only:
            self._froze = gc.get_freeze_count() == 0
            gc.collect()
            gc.freeze()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._froze:
            gc.unfreeze()
            self._froze = False

    def _gpu_start(self) -> None:
        """The L2 flush (a usage error on a device without one) and the NVML facts at the start."""
        if self.settings.l2_flush:
            if self.device.flush_cache is None:
                raise pytest.UsageError(f"opperf: --opperf-l2-flush: device {self.device.name} has "
                                        "no cache flush (a GPU device of "
                                        "pytest_opperf_select_device provides one)")
            self.flush = self.device.flush_cache
        if self.device.is_gpu:
            self.gpu_env = {"start": gpu_env.snapshot(self.device.pci_bus_id)}

    # --- plain pytest-benchmark fixtures and --benchmark-only ------------------------------

    @pytest.hookimpl(trylast=True)  # after pytest-benchmark's own
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[Any]) -> None:
        benchmark_adapter.check_items(items)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Generator[None, Any, None]:
        outcome = yield
        own = "opperf_benchmark" in getattr(item, "fixturenames", ())
        if call.when != "call" or not outcome.get_result().passed or own:
            return
        measured = benchmark_adapter.rounds(getattr(item, "funcargs", {}).get("benchmark"))
        if measured is None:
            return
        if not self.settings.record_benchmarks:
            self.plain_benchmarks += 1
            return
        stat = getattr(item, "originalname", None) or item.name
        rounds, iterations = measured
        config = {"benchmark": {"rounds": len(rounds), "iterations": iterations},
                  "timer": "pytest-benchmark"}
        assert self.port is not None  # built when the session started
        try:
            self.port.add_run(op_run(run_id_of(item), stat, rounds, iterations, self.device,
                                     "host", config=config))
        except ValueError as exc:  # its id is taken (the test also opened a window): say so
            self.errors.append(f"{item.nodeid}: plain benchmark not recorded: {exc}")

    # --- what a partial session did not measure ----------------------------------------

    def pytest_deselected(self, items: list[Any]) -> None:
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self.failed_tests += 1
        if report.when == "setup":
            self.tests_run += 1
