"""The main role of an ``--opperf`` session: it reads the inputs, gates, reports and writes files.

:class:`MainSession` is the role of a plain session; the xdist controller
(:class:`pytest_opperf.glue.roles.XdistController`) and the A/B main process
(:class:`pytest_opperf.ab.session.ABMain`) are its subclasses. It reads its inputs through
:mod:`.inputs` and writes its files through :mod:`.outputs`.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from .. import hookspec
from ..comparison.gate import evaluate
from ..comparison.thresholds import Thresholds
from ..comparison.verdict import Verdict
from ..core.identity import baseline_variant
from ..core.machine import commit_info, machine_info, same_hardware
from ..gpu import gpu_env
from ..gpu.xdist_gpu import different_models
from ..reports import report
from ..results import ResultSet, baseline_file
from . import benchmark_adapter, inputs
from .outputs import Outputs, check_outputs
from .session import OpPerfSession
from .settings import Settings, usage_errors

__all__ = ["MainSession"]


class MainSession(OpPerfSession):
    """Collects runs, gates, reports, writes files."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        super().__init__(config, settings)
        self.thresholds: Thresholds | None = None
        self.baseline: ResultSet | None = None
        self.baseline_name: str | None = None
        self.machine: dict[str, Any] = {}
        self.commit: dict[str, Any] | None = None
        self.warnings: list[str] = []
        self.results: ResultSet | None = None
        self.verdict: Verdict | None = None
        self.sections: list[tuple[str, list[str]]] = []  # from pytest_opperf_report_sections
        self.interrupted: str | None = None  # why the test loop stopped early
        self.no_gate: str | None = None  # why the gate did not run: no test ran
        self.outputs = Outputs(settings, self.errors, self.notes)  # the files it writes
        self.merged = False  # runs merged from xdist workers: sorted by id
        self.workers_down = 0
        self.worker_devices: dict[str, dict[str, Any]] = {}  # the per-GPU workers' devices

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

    # --- start: fail fast on every unusable input ---------------------------------------

    def start_role(self) -> None:
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
        self.start_more()
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

    def start_more(self) -> None:
        """What a subclass starts once the inputs are read (the A/B: its sides)."""

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

    # --- end: gate, files, report ---------------------------------------------------------

    def aborted(self) -> bool:
        """Whether the session ended with nothing to gate (the A/B: no comparison)."""
        return False

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, None]:
        outcome = yield
        exc = (outcome.exception if hasattr(outcome, "exception")
               else (outcome.excinfo or (None, None))[1])
        if self.aborted():
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
        self.gate_more(results, verdict)
        results.gate = verdict.to_dict()
        if not verdict.passed:
            session.testsfailed += 1  # exit status 1, as a failed test gives
        answers = self.config.hook.pytest_opperf_report_sections(config=self.config,
                                                                 results=results)
        self.sections = [(str(title), [str(line) for line in lines])
                         for answer in answers for title, lines in answer]

    def gate_more(self, results: ResultSet, verdict: Verdict) -> None:
        """What a subclass adds to the results and the verdict (the A/B: its comparison)."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
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
        from ..history.errors import HistoryError
        from ..history.sources import redact
        from ..history.store import append_session

        try:
            sid = append_session(source, self.results, getattr(self.results, "compare", None),
                                 self.config.rootpath)
        except HistoryError as exc:
            self.errors.append(f"{label}: {exc}")
        else:
            self.outputs.written.append(f"history: {redact(source)} (session {sid})")

    def _write_files(self) -> None:
        results = self.results
        assert results is not None

        def markdown() -> str:
            return (report.markdown(results, self.verdict, self.settings.sort, self.sections)
                    + self.markdown_more())

        def baseline_in(directory: Path) -> Path:
            return baseline_file(directory, self.device.device_class, self.workload,
                                 self._variant())

        self.outputs.write_all(results, markdown, baseline_in, self.partial())

    def markdown_more(self) -> str:
        """What a subclass appends to the markdown report (the A/B: its comparison)."""
        return ""

    @pytest.hookimpl(trylast=True)  # the verdict closes the output, after pytest-benchmark's table
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        try:
            self._summary(terminalreporter)
        except Exception as exc:  # a report hook must never raise: say so and fail
            terminalreporter.write_line("opperf: internal error while reporting: "
                                        f"{type(exc).__name__}: {exc}", red=True)
            if self.session is not None:
                self.session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def summary_sections(self, width: int) -> list[tuple[str, list[str]]]:
        """The sections of the terminal report before the hooks' (the A/B: its table)."""
        return []

    def summary_errors(self) -> list[str]:
        """Lines shown in red after the errors (the A/B: why it aborted)."""
        return []

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
            sections = self.summary_sections(width) + list(self.sections)
            for line in report.terminal_lines(self.results, self.verdict, self.settings.sort,
                                              self.notes, sections, width):
                tr.write_line(line)
        for line in self.outputs.written:
            tr.write_line(f"wrote {line}")
        for line in self.outputs.save_notes:
            tr.write_line(f"note: {line}")
        for line in self.errors:
            tr.write_line(f"error: {line}", red=True)
        for line in self.summary_errors():
            tr.write_line(f"opperf: {line}" if line.startswith("A/B") else line, red=True)
        if self.verdict is not None and not self.verdict.passed:
            tr.write_sep("=", "opperf gate", red=True)
            for line in report.gate_lines(self.verdict, width):
                tr.write_line(line, red=True)
