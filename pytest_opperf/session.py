"""The session of an ``--opperf`` run (the plugin imports this module only then)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_opperf import (
    benchmark_adapter,
    gpu_env,
    hookspec,
    inputs,
    instructions,
    nvtx_ranges,
    report,
)
from pytest_opperf.device import CPU_HOST, DeviceInfo, benchmark_timer
from pytest_opperf.gate import add_compare, evaluate
from pytest_opperf.handback import HandBack, HandBackError
from pytest_opperf.identity import baseline_variant, run_id_of
from pytest_opperf.machine import commit_info, machine_info, same_hardware
from pytest_opperf.measure import op_run
from pytest_opperf.outputs import Outputs, check_outputs
from pytest_opperf.recorder import RECORDER, Recorder
from pytest_opperf.results import (
    ResultSet,
    RunResult,
    baseline_file,
)
from pytest_opperf.settings import Settings, resolved_workload, select_device, usage_errors
from pytest_opperf.thresholds import Thresholds
from pytest_opperf.verdict import Verdict
from pytest_opperf.xdist_gpu import different_models


class OpPerfSession:
    """Exists only with ``--opperf``: collects runs, gates, reports, writes files.

    On an xdist worker it only collects and hands its runs to the controller
    through ``workeroutput``; the controller merges, gates and reports once."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        # an xdist worker, or an A/B side: only collects runs and hands them over
        self.is_worker = hasattr(config, "workerinput") or config.pluginmanager.has_plugin(
            "opperf-ab-side")
        self.runs: list[RunResult] = []
        self.untimed_benchmarks = 0
        self.device: DeviceInfo = CPU_HOST
        self.workload = "small"
        self.thresholds: Thresholds | None = None
        self.baseline: ResultSet | None = None
        self.baseline_name: str | None = None
        self.machine: dict[str, Any] = {}
        self.commit: dict[str, Any] | None = None
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.results: ResultSet | None = None
        self.verdict: Verdict | None = None
        self.errors: list[str] = []
        self.session: pytest.Session | None = None
        self.merged = False
        self.workers_down = 0
        self.sections: list[tuple[str, list[str]]] = []  # from pytest_opperf_report_sections
        self._timer: Any = None
        self._timer_made = False
        self.plain_benchmarks = 0  # tests with pytest-benchmark's `benchmark` fixture, not recorded
        self.interrupted: str | None = None  # why the test loop stopped early
        self.instructions: instructions.Instructions | None = None  # --opperf-instructions
        self.started = time.perf_counter()  # the session's start (pytest_sessionstart)
        self.deselected = 0
        self.failed_tests = 0
        self.tests_run = 0  # tests that reached their setup (skipped ones too)
        self.collect_only = bool(config.getoption("collectonly", False))
        self.no_gate: str | None = None  # why the gate did not run: no test ran
        self.outputs = Outputs(settings, self.errors, self.notes)  # the files it writes
        # GPU additions (see _gpu_start): NVTX ranges, the L2 flush, per-op timing without
        # pytest-benchmark, the per-GPU workers' devices, and NVML snapshots
        self.nvtx: Any = None
        self.flush: Callable[[], None] | None = None
        self.own_loop = settings.l2_flush or (settings.gpu_workers and self.is_worker)
        self.worker_devices: dict[str, dict[str, Any]] = {}
        self.gpu_env: dict[str, Any] = {}
        if settings.nvtx:
            with usage_errors("--opperf-nvtx", nvtx_ranges.NvtxUnavailable):
                self.nvtx = nvtx_ranges.load()
        self.ab: Any = None  # ab.session.ABSession: the A/B controller in the main process
        # the fixtures' (and an A/B side's) narrow view of this session
        self.recorder = Recorder(add_run=self.add_run, untimed=self._untimed,
                                 benchmark_timer=self.benchmark_timer, nvtx=self.nvtx,
                                 own_loop=bool(self.own_loop), count_steps=settings.count_steps,
                                 count_timeout_s=settings.count_timeout)
        config.stash[RECORDER] = self.recorder

    @property
    def compare(self) -> Any:
        """The A/B session's result (ab.paired.CompareResult), when it ran to its end."""
        return self.ab.compare if self.ab is not None else None

    def _untimed(self) -> None:
        self.untimed_benchmarks += 1

    def add_run(self, run: RunResult) -> None:
        if any(r.id == run.id for r in self.runs):
            raise ValueError(f"opperf: run id {run.id!r} is measured twice in this session (run "
                             "ids must be unique: name the windows with measure(name=...))")
        self.runs.append(run)

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
        try:
            self.recorder.add_run(op_run(run_id_of(item), stat, rounds, iterations, self.device,
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

    def partial(self) -> list[str]:
        """Why this session did not measure every run it could have (empty: it did)."""
        reasons = []
        if self.interrupted:
            reasons.append(f"interrupted: {self.interrupted}")
        if self.deselected:
            reasons.append(f"{self.deselected} test(s) deselected")
        if self.failed_tests:
            reasons.append(f"{self.failed_tests} test report(s) failed, their runs are not "
                           "recorded")
        if self.untimed_benchmarks:
            reasons.append(f"{self.untimed_benchmarks} per-op benchmark(s) untimed")
        if self.workers_down:
            reasons.append(f"{self.workers_down} xdist worker(s) went down")
        return reasons

    def benchmark_timer(self) -> Any:
        """One timer per session: pytest-benchmark measures each new timer's precision (1 s)."""
        if not self._timer_made:
            self._timer = benchmark_timer(self.device, self.settings.timing)
            self._timer_made = True
        return self._timer

    # --- start: fail fast on every unusable input ---------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session
        self.started = time.perf_counter()
        self.device = select_device(self.config)
        self.workload = resolved_workload(self.settings, self.device)
        self._gpu_start()
        self._instructions_start()
        if self.is_worker:
            return
        if self.device.note:
            self.notes.append(self.device.note)
        problem = benchmark_adapter.version_problem()
        if problem:
            self._warn(problem, category=hookspec.OpPerfBenchmarkWarning)
        check_outputs(self.settings)
        inputs.check_history(self.settings)
        self.thresholds = inputs.read_thresholds(self.settings)
        self.baseline, self.baseline_name = inputs.read_baseline(
            self.settings, self.device.device_class, self.workload, self._variant(), self._warn)
        if self.settings.compare and not self.collect_only:  # collecting only: no A/B
            from pytest_opperf.ab.session import ABSession

            self.ab = ABSession.start(self.config, self.settings, self.thresholds,
                                      self.runs.extend)
        self.machine = machine_info(self.device)
        if self.gpu_env:
            self.machine["gpu_env"] = self.gpu_env
        self.config.hook.pytest_opperf_machine_info(config=self.config, info=self.machine)
        self.commit = commit_info(self.config.rootpath)
        if self.baseline is not None:
            other = same_hardware(self.baseline.machine, self.machine)
            if other:
                self._warn(f"baseline {self.baseline_name} is from other hardware ({other}): its "
                           "times are drift only; counts and limits still gate", report=False)

    def _gpu_start(self) -> None:
        """The L2 flush (a usage error on a device without one) and the NVML facts at the start."""
        if self.settings.l2_flush:
            if self.device.flush_cache is None:
                raise pytest.UsageError(f"opperf: --opperf-l2-flush: device {self.device.name} has "
                                        "no cache flush (a GPU device of "
                                        "pytest_opperf_select_device provides one)")
            self.flush = self.recorder.flush = self.device.flush_cache
        if self.device.is_gpu:
            self.gpu_env = {"start": gpu_env.snapshot(self.device.pci_bus_id)}

    def _gpu_end(self, verdict: Verdict) -> None:
        """NVML facts at the end, throttling warnings, and the per-GPU workers' same-model check."""
        if self.gpu_env:
            self.gpu_env["end"] = gpu_env.snapshot(self.device.pci_bus_id)
        notes, warnings = gpu_env.findings(self.gpu_env, self.worker_devices)
        verdict.notes += notes
        verdict.warnings += warnings
        if self.worker_devices:
            self.machine["workers"] = self.worker_devices
        differ = different_models(self.worker_devices)
        if differ:
            self.errors.append(f"the workers ran on different GPU models ({differ}): their runs "
                               "are not one measurement; run them on identical GPUs")
            if self.session is not None:
                self.session.testsfailed += 1
            verdict.notes.append("workers on different GPU models: see the error below")

    def _instructions_start(self) -> None:
        """``--opperf-instructions``: the parent counts each run's test again under valgrind; in
        that child (its environment says so) callgrind does the counting passes."""
        child = os.environ.get(instructions.CHILD_ENV)
        if child:
            self.recorder.callgrind_pass = instructions.ChildPass(child)
        elif self.settings.instructions:
            from pytest_opperf.options import child_options

            options = child_options(self.settings, workload=self.workload)
            self.instructions = instructions.Instructions(self.config.rootpath, options,
                                                          self.settings.count_timeout)
            self.recorder.instructions = self.instructions

    def _variant(self) -> str:
        timing = self.device.timing_label(self.settings.timing)
        return baseline_variant(timing, self.settings.l2_flush)

    def _warn(self, message: str, report: bool = True,
              category: type[Warning] = hookspec.OpPerfBaselineWarning) -> None:
        """A warning now, in the report too (filterable; ``-W error`` makes it a usage error);
        none when only collecting: no gate, no report to warn about."""
        if self.collect_only:
            return
        if report:
            self.warnings.append(message)
        with usage_errors("warning turned into an error", Warning):
            self.config.issue_config_time_warning(category(message), stacklevel=2)

    # --- xdist ------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        data = output.get("opperf")
        name = getattr(getattr(node, "gateway", None), "id", "worker")
        if error:
            self.workers_down += 1
            self.notes.append(f"worker {name} went down ({error}); its runs may be missing")
        if not data:
            return
        try:
            back = HandBack.loads(data, f"worker {name}")
        except HandBackError as exc:
            self.errors.append(f"results of worker {name} unreadable: {exc}")
            return
        self.runs.extend(back.runs)
        self.untimed_benchmarks += back.untimed
        self.plain_benchmarks += back.plain
        self.deselected = max(self.deselected, back.deselected)  # every worker collects all
        if back.device is not None:
            self.worker_devices[name] = back.device
        self.merged = True

    # --- end: gate, files, report ---------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, None]:
        outcome = yield
        if self.is_worker:
            return
        exc = (outcome.exception if hasattr(outcome, "exception")
               else (outcome.excinfo or (None, None))[1])
        if self.ab is not None and self.ab.aborted:
            return  # no comparison: no gate to pass; the session fails with the reason
        if exc is not None:  # Ctrl-C, -x / --maxfail, or a plugin stopping the loop
            self.interrupted = str(exc) or type(exc).__name__
        elif self.collect_only or (not self.tests_run and not self.runs):
            # nothing ran (--collect-only, -k matching nothing): nothing to gate or write, and
            # no empty session in the history; pytest's own exit status stands
            self.no_gate = ("--collect-only" if self.collect_only else
                            "collection errors" if session.testsfailed else "no test selected")
            return
        elif session.shouldstop or session.shouldfail:
            self.interrupted = str(session.shouldstop or session.shouldfail)
        try:
            self._gate(session)
        except Exception as exc:  # the gate could not decide: never pass silently
            self.errors.append(f"internal error in the gate: {type(exc).__name__}: {exc}")
            session.testsfailed += 1

    def _results(self) -> ResultSet:
        runs = sorted(self.runs, key=lambda r: r.id) if self.merged else list(self.runs)
        session: dict[str, Any] = {
            "device": self.device.name, "device_class": self.device.device_class,
            "workload": self.workload, "timing": self.device.timing_label(self.settings.timing)}
        if self.settings.l2_flush:
            session["l2_flush"] = True
        return ResultSet(runs=runs, machine=self.machine, commit=self.commit, session=session)

    def _gate(self, session: pytest.Session) -> None:
        results = self.results = self._results()
        self.config.hook.pytest_opperf_modify_results(config=self.config, results=results)
        verdict = self.verdict = evaluate(results, self.thresholds, self.baseline,
                                          self.baseline_name)
        if self.interrupted:
            verdict.incomplete = (f"session interrupted ({self.interrupted}), not every run was "
                                  "measured")
        verdict.warnings[:0] = self.warnings
        if self.instructions is not None:
            verdict.warnings += self.instructions.warnings
        counted = [r.work for r in results.runs if r.work is not None]
        if counted:
            spent = sum(w.pass_s for w in counted)
            whole = time.perf_counter() - self.started
            verdict.notes.append(f"counting passes: {len(counted)} run(s), {spent:.1f} s in all "
                                 f"({spent / whole:.0%} of the session's {whole:.0f} s so far)"
                                 if whole > 0 else f"counting passes: {len(counted)} run(s)")
        self._gpu_end(verdict)
        if self.untimed_benchmarks:
            verdict.notes.append(f"{self.untimed_benchmarks} per-op benchmark(s) ran untimed "
                                 "(pytest-benchmark disabled: --benchmark-disable, or xdist)")
        if self.plain_benchmarks:
            verdict.notes.append(f"{self.plain_benchmarks} test(s) use pytest-benchmark's plain "
                                 "`benchmark` fixture and are not in the opperf results (use "
                                 "opperf_benchmark, or --opperf-record-benchmarks to record them "
                                 "as per-op runs)")
        if self.ab is not None:
            self._gate_compare(session, results, verdict)
        results.gate = verdict.to_dict()
        if not verdict.passed:
            session.testsfailed += 1  # exit status 1, as a failed test gives
        answers = self.config.hook.pytest_opperf_report_sections(config=self.config,
                                                                 results=results)
        self.sections = [(str(title), [str(line) for line in lines])
                         for answer in answers for title, lines in answer]

    def _gate_compare(self, session: pytest.Session, results: ResultSet, verdict: Verdict) -> None:
        """A/B: regressed metrics and failed base tests are violations; undecided warn (or fail)."""
        if self.compare is not None:
            results.compare = self.compare.to_dict()
        add_compare(verdict, self.compare, self.ab.problems,
                    undecided_fail=self.settings.compare_undecided == "fail")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            self._hand_over()
            return
        if self.results is None:
            return
        try:
            self._write_files()
        except Exception as exc:
            self.errors.append(f"internal error while writing files: {type(exc).__name__}: {exc}")
        self._append_history(exitstatus)
        if self.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    def _append_history(self, exitstatus: int) -> None:
        """The session (results, verdict) into the history, all or nothing, after the files."""
        source = self.settings.history
        if source is None or self.results is None:
            return
        label = self.settings.label("history")
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self.notes.append(f"{label}: not appended, the session was interrupted")
            return
        from pytest_opperf.history.errors import HistoryError
        from pytest_opperf.history.sources import redact
        from pytest_opperf.history.store import append_session

        try:
            sid = append_session(source, self.results, getattr(self.results, "compare", None),
                                 self.config.rootpath)
        except HistoryError as exc:
            self.errors.append(f"{label}: {exc}")
        else:
            self.outputs.written.append(f"history: {redact(source)} (session {sid})")

    def _hand_over(self) -> None:
        if not hasattr(self.config, "workerinput"):
            return  # an A/B side: its runs went to the controller test by test
        device = None
        if self.device.is_gpu:  # for the controller's same-model check and NVML warnings
            if self.gpu_env:
                self.gpu_env["end"] = gpu_env.snapshot(self.device.pci_bus_id)
            device = {"name": self.device.name, "gpu_model": self.device.gpu_model,
                      "pci_bus_id": self.device.pci_bus_id,
                      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                      "gpu_env": self.gpu_env}
        back = HandBack(self.runs, self.untimed_benchmarks, self.plain_benchmarks,
                        self.deselected, device)
        self.config.workeroutput["opperf"] = back.dumps()  # type: ignore[attr-defined]

    def _write_files(self) -> None:
        results = self.results
        assert results is not None

        def markdown() -> str:
            text = report.markdown(results, self.verdict, self.settings.sort, self.sections)
            if self.compare is not None:
                from pytest_opperf.ab import render

                text += "\n" + render.markdown(self.compare)
            return text

        def baseline_in(directory: Path) -> Path:
            return baseline_file(directory, self.device.device_class, self.workload,
                                 self._variant())

        self.outputs.write_all(results, markdown, baseline_in, self.partial())

    @pytest.hookimpl(trylast=True)  # the verdict closes the output, after pytest-benchmark's table
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
        try:
            self._summary(terminalreporter)
        except Exception as exc:  # a report hook must never raise: say so and fail
            terminalreporter.write_line("opperf: internal error while reporting: "
                                        f"{type(exc).__name__}: {exc}", red=True)
            if self.session is not None:
                self.session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def _summary(self, tr: Any) -> None:
        if self.no_gate is not None and not self.errors:
            tr.write_line(f"opperf: no test ran ({self.no_gate}): the opperf gate did not run and "
                          "no file was written")
            return
        tr.write_sep("=", "opperf")
        width = tr.config.get_terminal_writer().fullwidth  # COLUMNS when set
        if self.results is None:
            tr.write_line("opperf: no results (the session stopped before running tests)")
        else:
            sections = list(self.sections)
            if self.compare is not None:
                from pytest_opperf.ab import render

                ab_lines = render.terminal_lines(self.compare, width)
                sections.insert(0, ("A/B: head against base", ab_lines))
            for line in report.terminal_lines(self.results, self.verdict, self.settings.sort,
                                              self.notes, sections, width):
                tr.write_line(line)
        for line in self.outputs.written:
            tr.write_line(f"wrote {line}")
        for line in self.outputs.save_notes:
            tr.write_line(f"note: {line}")
        for line in self.errors:
            tr.write_line(f"error: {line}", red=True)
        for line in self.ab.lines if self.ab is not None else ():
            tr.write_line(f"opperf: {line}" if line.startswith("A/B") else line, red=True)
        if self.verdict is not None and not self.verdict.passed:
            tr.write_sep("=", "opperf gate", red=True)
            for line in report.gate_lines(self.verdict, width):
                tr.write_line(line, red=True)
