"""pytest glue of A/B mode in the main process: the base, the two sides, the controller.

With ``--opperf --opperf-compare=REV|DIR`` the main pytest process runs no test itself (as
pytest-xdist's controller): at session start it resolves the base (a revision becomes a temporary
worktree, removed again however the session ends) and checks the base interpreter; it then skips
collection, and its test loop is the :class:`~.controller.Controller`: both sides collect, the tests
of both run in lockstep, the head's reports are shown as the session's own and its runs become the
session's results, and the CompareResult goes to the report, the JSON and the gate.
:class:`ABMain` is that process's role (:mod:`pytest_opperf.glue.roles`): the main role, with the
comparison in its gate and its reports.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..comparison.gate import add_compare
from ..comparison.thresholds import Thresholds
from ..comparison.verdict import Verdict
from ..glue import child
from ..glue.main_session import MainSession
from ..glue.options import CHILD_DEFAULTS, VALUED_OPTIONS, child_options
from ..glue.settings import Settings, usage_errors
from ..results import ResultSet, RunResult
from .checkout import (
    Base,
    CompareError,
    PythonInfo,
    Workspace,
    check_python,
    git_toplevel,
    interpreter_note,
    resolve_base,
    side_environment,
    this_python,
)
from .controller import Controller, Plan, TestOutcome
from .paired import CompareResult
from .processes import SideFailure, SideSpec
from .reclaim import reclaim
from .tests_from import PROBE_ENV, Staged, TestsFromError, judge, missing, resolve_source, stage

AB_PLUGIN_NAME = "opperf-ab"
# signals that end an A/B session as Ctrl-C does (SIGHUP: not on Windows); SIGINT is Ctrl-C
TRAPPED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                        if hasattr(signal, name))


def trap_signals(config: pytest.Config) -> None:
    """SIGTERM (a cancelled job) and SIGHUP (a closed terminal, a CI runner going away) end the
    session as Ctrl-C does, so the sides end and the worktree and temp directory go. The first of
    these signals (Ctrl-C included) interrupts; every later one is ignored until the session's
    cleanup is done: a second one (runners often send two) must not break the cleanup off with a
    traceback. A signal the process ignores (nohup) stays ignored. Restored by the last cleanup:
    install this before the cleanups it protects."""
    interrupted = False

    def interrupt(signum: int, frame: Any) -> None:
        nonlocal interrupted
        if interrupted:
            return  # the session is ending already
        interrupted = True
        raise KeyboardInterrupt() if signum == signal.SIGINT else KeyboardInterrupt(
            f"signal {signum}")

    old: dict[int, Any] = {}
    for sig in (signal.SIGINT, *TRAPPED_SIGNALS):
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue  # the process was started ignoring it (nohup): it stays ignored
        try:
            old[sig] = signal.signal(sig, interrupt)
        except ValueError:  # not the main thread
            break

    def restore() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    config.add_cleanup(restore)


def _relative(arg: str, invocation: Path, rootdir: Path) -> str:
    path, sep, rest = arg.partition("::")
    absolute = Path(invocation, path).resolve()
    try:
        rel = absolute.relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        raise CompareError(f"test path {arg!r} is outside the rootdir {rootdir}: both sides run "
                           "the tests by their path in the rootdir") from None
    return rel + sep + rest


def side_args(config: pytest.Config) -> tuple[list[str], list[str]]:
    """The arguments both sides get (test paths relative to the side's root), and those paths."""
    invocation = config.invocation_params.dir
    raw = list(config.invocation_params.args)
    source = getattr(config, "args_source", None)
    positional: list[str] = []
    if source == pytest.Config.ArgsSource.ARGS:
        given = set(config.args)
        raw = [a for a in raw if a not in given]
        positional = [_relative(a, invocation, config.rootpath) for a in config.args]
    elif source == pytest.Config.ArgsSource.TESTPATHS:
        positional = [_relative(a, invocation, config.rootpath) for a in config.args]
    else:
        positional = [_relative(".", invocation, config.rootpath)]
    return (child.strip_opperf_args(raw, VALUED_OPTIONS) + positional,
            [p.partition("::")[0] for p in positional])


def _reclaim(top: Path | None) -> None:
    """The worktrees and temporary directories that killed sessions of this repository left:
    removed now, in one line (:mod:`.reclaim`)."""
    if top is None:
        return
    reclaimed = reclaim(top)
    for line in filter(None, [reclaimed.line(), *reclaimed.problems]):
        sys.stderr.write(f"opperf: A/B: {line}\n")


class ABSession:
    """Registered as ``opperf-ab`` in the main process while an A/B session runs."""

    def __init__(self, config: pytest.Config, settings: Settings, thresholds: Thresholds | None,
                 add_runs: Callable[[list[RunResult]], None], base: Base, workspace: Workspace,
                 base_root: Path, python: str, with_plugin: bool) -> None:
        self.config = config
        self.settings = settings
        self.thresholds = thresholds or Thresholds()
        self.add_runs = add_runs  # the head's runs of each test's first visit: the session's
        self.compare: CompareResult | None = None  # when the A/B ran to its end
        self.base = base
        self.workspace = workspace
        self.base_root = base_root
        self.python = python
        self.with_plugin = with_plugin  # the base interpreter lacks the entry point: -p it
        self.controller: Controller | None = None
        self.aborted: str | None = None
        # (test, metric, why): not compared, the gate fails
        self.problems: list[tuple[str, str, str]] = []
        self.lines: list[str] = []  # shown in red after the report
        self.base_python: PythonInfo | None = None  # the base interpreter, as probed
        self.tests: Staged | None = None  # --opperf-tests-from: the files both sides run
        self.import_lines: list[str] = []  # where each side imported the code under test from

    # --- start: before any test runs, every bad input is a usage error ---------------------------

    @classmethod
    def start(cls, config: pytest.Config, settings: Settings, thresholds: Thresholds | None,
              add_runs: Callable[[list[RunResult]], None]) -> ABSession:
        """Check every input, prepare the base and register the A/B session; ``add_runs``
        receives the head's runs."""
        label = settings.label("compare")
        if config.getoption("numprocesses", None):
            raise pytest.UsageError(f"opperf: {label}: does not combine with pytest-xdist (-n): "
                                    "A/B runs one process per side")
        with usage_errors(label, CompareError):
            _, required = side_args(config)
        if config.inipath is not None:
            try:
                required.append(config.inipath.relative_to(config.rootpath).as_posix())
            except ValueError:
                pass
        with usage_errors(label, CompareError):
            base = resolve_base(settings.compare or "", config.rootpath,
                                settings.origin("compare", config.invocation_params.dir), required)
        tests = _staged(config, settings, base) if settings.tests_from else None
        python = settings.compare_python or sys.executable
        with usage_errors(settings.label("compare_python"), CompareError):
            info = check_python(python, config.rootpath)
        _reclaim(base.toplevel or git_toplevel(config.rootpath))
        trap_signals(config)  # from here on: its restore is the cleanup after the workspace's
        workspace = Workspace(base)
        def close_workspace() -> None:  # at the very end: the terminal report is written by then
            for problem in workspace.close():
                sys.stderr.write(f"opperf: A/B: {problem}\n")

        config.add_cleanup(close_workspace)
        with usage_errors(label, CompareError):
            base_root = workspace.prepare(Path(__file__).resolve().parent.parent,
                                          config.rootpath)
        if tests is not None:  # the base gets the head's files of the selection
            assert workspace.worktree is not None
            tests.lay_out(workspace.worktree)
        absent = [p for p in required if not (base_root / p).exists()]
        if absent:
            raise pytest.UsageError(f"opperf: {label}: the base {base.label} has no "
                                    f"{', '.join(absent)}")
        session = cls(config, settings, thresholds, add_runs, base, workspace, base_root, python,
                      not info.has_plugin_entry_point)
        session.base_python = info
        session.tests = tests
        config.pluginmanager.register(session, AB_PLUGIN_NAME)
        return session

    # --- the session ------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> bool:
        return True  # the sides collect

    def _specs(self) -> tuple[SideSpec, SideSpec]:
        settings = self.settings
        args, _ = side_args(self.config)
        # both sides record the trace events (the same cost); the head's are kept
        unused = self.workspace.path / "trace-unused.json"
        trace = str(unused) if "trace" in settings.paths else None
        options = child_options(settings, trace=trace)
        # on the command line too, for a base side of an earlier release (it reads only that);
        # those at their defaults left out (such a release may not know them)
        always = ("workload", "device", "timing")
        fixed = child.argv_options(options, {k: v for k, v in CHILD_DEFAULTS.items()
                                             if k not in always})
        specs = []
        for name, python, root, plugin in (("base", self.python, self.base_root, self.with_plugin),
                                           ("head", sys.executable, self.config.rootpath, False)):
            command = [python, "-m", "pytest", "-p", "pytest_opperf.ab.side"]
            command += ["-p", "pytest_opperf.plugin"] if plugin else []
            command += ["--opperf", *fixed, *args]
            command += ["--rootdir=."] if self.tests is not None else []  # ids alike
            env = child.environment(options, side_environment(self.workspace.shim, root))
            if self.tests is not None:
                env[PROBE_ENV] = ",".join(self.tests.imports)
            specs.append(SideSpec(name, command, Path(root), env, self.workspace.log(name)))
        return specs[0], specs[1]

    def _shard(self, controller: Controller, plan: Plan) -> Plan:
        """With ``--opperf-shard``: both sides run the shard of what they collected."""
        from ..glue.shard_hook import ab_selection

        keep = ab_selection(self.config, plan.order + plan.removed)
        return plan if keep is None else controller.restrict(keep)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        base_spec, head_spec = self._specs()
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        controller = self.controller = Controller(
            base_spec, head_spec, self.thresholds.compare, self.base.label,
            f"working tree {self.config.rootpath}",
            timeout_s=self.settings.compare_timeout,
            undecided=self.settings.compare_undecided,
            on_outcome=self._outcome,
            should_stop=lambda: bool(session.shouldfail or session.shouldstop))
        finished = False
        try:
            try:
                plan, errors = controller.start()
            except SideFailure as exc:
                self._abort(session, exc)
                return True
            if errors["base"]:
                first = self._report(errors["base"][0])
                self.aborted = "the base cannot collect the tests"
                raise pytest.UsageError(
                    f"opperf: {self.settings.label('compare')}: the base {self.base.label} "
                    f"cannot collect the tests: {first.nodeid or '<rootdir>'}: {_last_line(first)}")
            if errors["head"]:
                self.aborted = "the head cannot collect the tests"
                for data in errors["head"]:
                    self.config.hook.pytest_collectreport(report=self._report(data))
                raise session.Interrupted(f"{len(errors['head'])} error(s) during collection")
            if self.tests is not None:
                self._judge(controller, errors)
            plan = self._shard(controller, plan)
            session.testscollected = len(plan.order)
            if tr is not None:
                tr.write_line(f"opperf A/B: base {self.base.label}, head {self.config.rootpath}: "
                              f"{len(plan.common)} test(s) on both sides, "
                              f"{len(plan.added)} on the head only, "
                              f"{len(plan.removed)} on the base only")
            if tr is not None and self.tests is not None:
                tr.write_line(f"opperf A/B: {self.tests.describe()}")
                for line in self.import_lines:
                    tr.write_line(f"opperf A/B: imports: {line}")
            try:
                self.compare = self._with_interpreters(controller.run())
                self._explain(controller)
                self.lines += [f"A/B: {warning}" for warning in controller.warnings]
                finished = True
            except SideFailure as exc:
                self._abort(session, exc)
        finally:
            # a broken or interrupted session ends now
            controller.close(grace_s=10.0 if finished else 1.0)
        return True

    def _judge(self, controller: Controller, errors: dict[str, list[Any]]) -> None:
        """--opperf-tests-from: each side must import the code under test from its own checkout
        (:func:`.tests_from.judge`); a module neither side has is named."""
        label = self.settings.label("tests_from")
        found = {n: m.get("origins") or {} for n, m in controller.collected.items()}
        absent = missing(found, {"base": self.base.label, "head": "the working tree"})
        if absent is not None and errors["base"] and errors["head"]:
            self.aborted = absent
            raise pytest.UsageError(f"opperf: {label}: {absent}")
        if errors["base"] or errors["head"]:
            return  # said as without --opperf-tests-from
        assert self.workspace.worktree is not None and self.base.toplevel is not None
        judgement = judge({"base": self.workspace.worktree, "head": self.base.toplevel}, found)
        if judgement.problem is not None:
            self.aborted = judgement.problem
            raise pytest.UsageError(f"opperf: {label}: {judgement.problem}")
        self.import_lines = judgement.lines

    def _explain(self, controller: Controller) -> None:
        """Why each regressed or inconclusive metric got slower, and the differential profile
        beside the results JSON (else in ``opperf-results/``): :mod:`pytest_opperf.explain`."""
        from ..explain.session import explain_ab, rerun_command, rerun_options

        assert self.compare is not None
        json_path = self.settings.paths.get("json")
        out_dir = json_path.parent if json_path else Path(self.config.rootpath) / "opperf-results"
        options = rerun_options(self.config.invocation_params.args)
        explain_ab(self.compare, controller.counted, Path(self.config.rootpath),
                   self.base.commit if self.base.mode == "rev" else None, self.base.label,
                   out_dir, lambda test: rerun_command(test, self.base.given, options))

    def _with_interpreters(self, result: CompareResult) -> CompareResult:
        """Each side's interpreter in the result, and a note first when they differ."""
        head = this_python()
        base = self.base_python or PythonInfo(self.python, "?", False)
        result.interpreters = {"base": base.to_dict(), "head": head.to_dict()}
        note = interpreter_note(base, head)
        if note is not None:
            result.notes.insert(0, note)
        if self.tests is not None:
            result.notes += [self.tests.describe(),
                             *(f"imports: {line}" for line in self.import_lines)]
        return result

    def _abort(self, session: pytest.Session, exc: SideFailure) -> None:
        self.aborted = f"A/B aborted: {exc}"
        self.lines.append(self.aborted)
        if exc.tail:
            self.lines.append(f"last lines of the side's log ({len(exc.tail)}):")
            self.lines += [f"  {line}" for line in exc.tail]
        session.testsfailed += 1

    def _report(self, data: dict[str, Any]) -> Any:
        return self.config.hook.pytest_report_from_serializable(config=self.config, data=data)

    def _outcome(self, outcome: TestOutcome) -> None:
        if outcome.side == "base":
            if outcome.failed and outcome.visit == 0:
                reports = [self._report(d) for d in outcome.reports]
                why = next((_last_line(r) for r in reports if r.failed), "failed")
                self.problems.append((outcome.nodeid, "ab:base",
                                      f"the base side's {outcome.nodeid} failed ({why}): "
                                      "not compared"))
            return
        if outcome.visit > 0:
            if outcome.failed:
                self.problems.append((outcome.nodeid, "ab:rerun",
                                      f"the head side's {outcome.nodeid} failed when run "
                                      "again for more pairs"))
            return
        reports = [self._report(d) for d in outcome.reports]
        if reports:
            hook = self.config.hook
            hook.pytest_runtest_logstart(nodeid=outcome.nodeid, location=reports[0].location)
            for report in reports:
                hook.pytest_runtest_logreport(report=report)
            hook.pytest_runtest_logfinish(nodeid=outcome.nodeid, location=reports[0].location)
        self.add_runs(outcome.runs)



def _staged(config: pytest.Config, settings: Settings, base: Base) -> Staged:
    """--opperf-tests-from: the head's files of the selection, for the base's worktree."""
    label = settings.label("tests_from")
    given = settings.tests_from or ""
    with usage_errors(label, TestsFromError):
        if base.mode != "rev" or base.toplevel is None:
            raise TestsFromError(f"the base {base.label} is a checkout of yours, whose files are "
                                 "not overwritten: give --opperf-compare a revision")
        source = resolve_source(given, base.toplevel, head_is_worktree=True)
        if source.commit is not None:
            raise TestsFromError(f"expected worktree or head (the head side runs the working "
                                 f"tree in place), got {given!r}")
        _, paths = side_args(config)  # the selection's paths (not the ini file: the base's own)
        return stage(paths, config.rootpath, base.toplevel, source)
    raise AssertionError("unreachable")  # usage_errors raised


def _last_line(report: Any) -> str:
    text = str(getattr(report, "longreprtext", "") or "").strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else report.outcome
    return last[1:].strip() if last.startswith("E ") else last


class ABMain(MainSession):
    """The main role of ``--opperf-compare``: the A/B session (:class:`ABSession`) starts once
    the inputs are read; its comparison joins the results, the gate and the reports."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        super().__init__(config, settings)
        self.ab_run: ABSession | None = None

    def start_more(self) -> None:
        self.ab_run = ABSession.start(self.config, self.settings, self.thresholds,
                                      self.runs.extend)

    @property
    def compare(self) -> CompareResult | None:
        """The A/B session's result, when it ran to its end."""
        return self.ab_run.compare if self.ab_run is not None else None

    def aborted(self) -> bool:
        return self.ab_run is not None and bool(self.ab_run.aborted)

    def gate_more(self, results: ResultSet, verdict: Verdict) -> None:
        """A/B: regressed metrics and failed base tests are violations; undecided ones as
        ``--opperf-compare-undecided`` says (inconclusive ones fail by default)."""
        if self.compare is not None:
            results.compare = self.compare.to_dict()
        problems = self.ab_run.problems if self.ab_run is not None else []
        add_compare(verdict, self.compare, problems, self.settings.compare_undecided)

    def markdown_more(self) -> str:
        if self.compare is None:
            return ""
        from . import render

        return "\n" + render.markdown(self.compare)

    def summary_sections(self, width: int) -> list[tuple[str, list[str]]]:
        if self.compare is None:
            return []
        from . import render

        return [("A/B: head against base", render.terminal_lines(self.compare, width))]

    def summary_errors(self) -> list[str]:
        return list(self.ab_run.lines) if self.ab_run is not None else []

