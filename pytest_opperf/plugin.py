"""pytest glue for pytest-opperf: options, the fixtures, the session object, report and exit status.

Everything that computes lives in the pure modules (measure, results, gate,
report); this module translates hooks into calls. Without ``--opperf`` only
the options and the two fixtures exist, and the fixtures only count: no
recording, no report, no gate. With it, an :class:`OpPerfSession` is
registered with the plugin manager and does the work.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_opperf.device import CPU_HOST, DeviceInfo

if TYPE_CHECKING:
    from pytest_opperf.gate import Thresholds, Verdict
    from pytest_opperf.measure import CountingRun, Run
    from pytest_opperf.results import ResultSet, RunResult

SESSION_PLUGIN = "opperf-session"

WORKLOADS = ("tiny", "small", "full", "auto")
DEVICES = ("auto", "cpu", "gpu")
TIMINGS = ("events", "sync")
SORTS = ("total", "avg", "max", "min", "count", "name")  # report.SORT_KEYS; a test keeps them equal
KINDS = ("e2e", "op", "overhead")


def _choice(option: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in choices:
            import argparse

            raise argparse.ArgumentTypeError(f"expected one of {'|'.join(choices)}, got {value!r}")
        return value

    parse.__name__ = option  # argparse names the type in some messages
    return parse


def _seconds(value: str) -> str:
    try:
        ok = float(value) > 0
    except ValueError:
        ok = False
    if not ok:
        import argparse

        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {value!r}")
    return value


def _path(value: str) -> str:
    if not value.strip():
        import argparse

        raise argparse.ArgumentTypeError(f"expected a path, got {value!r}")
    return value


# (option suffix, metavar, parser, default, help); every option is also ini key opperf_<suffix>
_OPTIONS: tuple[tuple[str, str, Callable[[str], str] | None, str | None, str], ...] = (
    ("workload", "NAME", _choice("workload", WORKLOADS), "auto",
     "size of the e2e workload: tiny|small|full|auto (auto: full on GPU, small on CPU)"),
    ("device", "NAME", _choice("device", DEVICES), "auto",
     "where the framework runs: auto|cpu|gpu (gpu without a usable GPU is a usage error)"),
    ("timing", "MODE", _choice("timing", TIMINGS), "events",
     "GPU timing: events (CUDA events, one sync per step) | sync (sync around every op)"),
    ("thresholds", "PATH", _path, None, "thresholds file (TOML) with absolute limits and regression tolerances"),
    ("baseline", "PATH", _path, None,
     "compare against a results file, or a directory holding <device_class>-<workload>.json"),
    ("save", "PATH", _path, None,
     "write this session's results as a baseline (atomic replace; a directory gets "
     "<device_class>-<workload>.json)"),
    ("json", "PATH", _path, None, "write the results JSON"),
    ("markdown", "PATH", _path, None, "write the markdown report (also appended to $GITHUB_STEP_SUMMARY when set)"),
    ("trace", "PATH", _path, None, "write a Chrome trace (chrome://tracing, Perfetto) of one step per run"),
    ("sort", "COLUMN", _choice("sort", SORTS), "total", "stat table order: total|avg|max|min|count|name"),
    # A/B in one job (pytest_opperf/ab): ini keys with underscores, opperf_compare_python...
    ("compare", "REV|DIR", _path, None,
     "A/B: run the base side too (a git revision of the rootdir's repository, or a checkout) and "
     "compare head against base, interleaved"),
    ("compare-python", "PATH", _path, None,
     "A/B: the base side's interpreter (an environment with the base build installed; default: this one)"),
    ("compare-timeout", "SECONDS", _seconds, "600", "A/B: the longest a side may take to answer (a hang ends both)"),
    ("compare-undecided", "MODE", _choice("compare-undecided", ("warn", "fail")), "warn",
     "A/B: undecided metrics warn (shown in the gate line) or fail the gate: warn|fail"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opperf", "operator performance measurement and gate (pytest-opperf)")
    group.addoption("--opperf", action="store_true", default=None, dest="opperf",
                    help="measure, report and gate operator performance (default: off; ini opperf_enabled)")
    parser.addini("opperf_enabled", "turn pytest-opperf on, as --opperf does", type="bool", default=False)
    for name, metavar, parse, default, text in _OPTIONS:
        shown = f"default: {default}" if default else "default: none"
        key = name.replace("-", "_")
        group.addoption(f"--opperf-{name}", metavar=metavar, type=parse, default=None, dest=f"opperf_{key}",
                        help=f"{text} ({shown}; ini opperf_{key})")
        parser.addini(f"opperf_{key}", f"default for --opperf-{name}", default=default or "")
    parser.addini("opperf_executor_stat", "stat whose total is executor time (default: ExecutorRunTimer)",
                  default="ExecutorRunTimer")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_opperf import hookspec

    pluginmanager.add_hookspecs(hookspec)


@dataclass(frozen=True)
class Settings:
    """The options after command line, ini and defaults; paths absolute."""

    enabled: bool = False
    workload: str = "auto"
    device: str = "auto"
    timing: str = "events"
    sort: str = "total"
    executor_stat: str = "ExecutorRunTimer"
    paths: dict[str, Path] = field(default_factory=dict)  # thresholds, baseline, save, json, markdown, trace
    labels: dict[str, str] = field(default_factory=dict)  # how each was given, for messages
    compare: str | None = None  # A/B: REV|DIR as given
    compare_python: str | None = None  # A/B: the base interpreter, resolved
    compare_timeout: float = 600.0
    compare_undecided: str = "warn"
    origins: dict[str, Path] = field(default_factory=dict)  # the directory relative values are taken from

    def label(self, name: str) -> str:
        return self.labels.get(name, f"--opperf-{name.replace('_', '-')}")

    def origin(self, name: str, default: Path) -> Path:
        return self.origins.get(name, default)


def _settings(config: pytest.Config) -> Settings:
    """Resolve and validate every option; a bad ini value is a usage error naming key and value."""
    values: dict[str, Any] = {}
    paths: dict[str, Path] = {}
    labels: dict[str, str] = {}
    ini_dir = config.inipath.parent if config.inipath else config.rootpath
    origins: dict[str, Path] = {}
    for name, _, parse, default, _ in _OPTIONS:
        key = name.replace("-", "_")
        given = config.getoption(f"opperf_{key}")
        base = config.invocation_params.dir
        label = f"--opperf-{name}"
        if given is None:
            given = config.getini(f"opperf_{key}") or None
            base, label = ini_dir, f"ini opperf_{key}"
            if given is not None and parse is not None:
                try:
                    given = parse(given)
                except Exception as exc:  # argparse.ArgumentTypeError
                    raise pytest.UsageError(f"opperf: {label}: {exc}") from None
        if name in ("thresholds", "baseline", "save", "json", "markdown", "trace"):
            if given:
                paths[name] = Path(base, given)
                labels[name] = f"{label} {given}"
        elif name.startswith("compare"):
            values[key] = _compare_value(key, given or default, base)
            origins[key] = base
            if given:
                labels[key] = f"{label}={given}" if label.startswith("--") else f"{label} = {given}"
        else:
            values[name] = given or default
    enabled = config.getoption("opperf")
    if enabled is None:
        enabled = bool(config.getini("opperf_enabled"))
    executor_stat = config.getini("opperf_executor_stat") or "ExecutorRunTimer"
    if values.get("compare") and not enabled and config.getoption("opperf_compare"):
        raise pytest.UsageError("opperf: --opperf-compare needs --opperf (or ini opperf_enabled)")
    return Settings(enabled=enabled, executor_stat=executor_stat, paths=paths, labels=labels, origins=origins,
                    **values)


def _compare_value(key: str, value: Any, base: Path) -> Any:
    """The A/B options: the timeout as a float, the base interpreter found (a name on PATH, or a path)."""
    if key == "compare_timeout":
        return float(value)
    if key == "compare_python" and value:
        import shutil

        found = shutil.which(value) if os.sep not in value else str(Path(base, value))
        return found or value  # a python that does not run is a usage error at session start
    return value


_SETTINGS = pytest.StashKey[Settings]()
_DEVICE = pytest.StashKey[DeviceInfo]()


def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash[_SETTINGS] = _settings(config)
    if settings.enabled:
        config.pluginmanager.register(OpPerfSession(config, settings), SESSION_PLUGIN)


@pytest.hookimpl(trylast=True)
def pytest_opperf_select_device(config: pytest.Config, requested: str) -> DeviceInfo:
    """The fallback when no conftest or plugin chooses: the CPU, host clock."""
    if requested == "gpu":
        raise pytest.UsageError(
            "opperf: --opperf-device=gpu: no plugin provides a GPU device "
            "(implement pytest_opperf_select_device in the suites' conftest.py)")
    return CPU_HOST


def select_device(config: pytest.Config) -> DeviceInfo:
    """The session's device (asked of the hook once per process)."""
    device = config.stash.get(_DEVICE, None)
    if device is None:
        requested = config.stash[_SETTINGS].device
        device = config.hook.pytest_opperf_select_device(config=config, requested=requested)
        if not isinstance(device, DeviceInfo):
            raise pytest.UsageError(
                f"opperf: pytest_opperf_select_device returned {device!r}, expected a "
                "pytest_opperf.device.DeviceInfo")
        config.stash[_DEVICE] = device
    return device


def resolved_workload(settings: Settings, device: DeviceInfo) -> str:
    if settings.workload != "auto":
        return settings.workload
    return "full" if device.is_gpu else "small"


@dataclass(frozen=True)
class SessionInfo:
    """What a suite may know about the session, also at collection time."""

    enabled: bool  # --opperf
    device: DeviceInfo
    workload: str  # tiny|small|full, auto resolved
    timing: str  # events|sync


def session_info(config: pytest.Config) -> SessionInfo:
    """The session's settings for suites, e.g. in ``pytest_generate_tests`` to
    parametrise by the workload (the device hook is asked at most once)."""
    settings = config.stash[_SETTINGS]
    device = select_device(config)
    return SessionInfo(settings.enabled, device, resolved_workload(settings, device), settings.timing)


# --- fixtures ------------------------------------------------------------------------


class OpPerf:
    """The ``opperf`` fixture: measured windows for e2e suites (see the README)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._config = request.config
        self._settings = request.config.stash[_SETTINGS]
        self._session: OpPerfSession | None = request.config.pluginmanager.get_plugin(SESSION_PLUGIN)
        self._windows = 0

    @property
    def enabled(self) -> bool:
        """Whether ``--opperf`` is on; off, windows only count steps."""
        return self._session is not None

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
        """
        from pytest_opperf import measure

        if kind not in KINDS:
            raise ValueError(f"opperf.measure: kind must be one of {'|'.join(KINDS)}, got {kind!r}")
        self._windows += 1
        if self._session is None:
            yield measure.CountingRun()
            return
        run_id = self._request.node.nodeid
        if name is not None:
            run_id = f"{run_id}#{name}"
        elif self._windows > 1:
            run_id = f"{run_id}#{self._windows}"
        run = measure.Run(run_id, kind, config, self.device, self.timing, self._settings.executor_stat,
                          trace="trace" in self._settings.paths, handover=self._session.step_handover)
        with measure.measure_window(run):
            yield run
        for note in run.count_warnings:
            warnings.warn(_warning("OpPerfStepCountWarning", f"{run_id}: {note}"), stacklevel=3)
        self._session.add_run(run.result)


def _warning(name: str, message: str) -> Warning:
    from pytest_opperf import hookspec

    return getattr(hookspec, name)(message)


@pytest.fixture
def opperf(request: pytest.FixtureRequest) -> OpPerf:
    """Measured windows for e2e suites: ``with opperf.measure() as run: ... run.step(examples=n)``."""
    return OpPerf(request)


class OpBenchmark:
    """The ``opperf_benchmark`` fixture: pytest-benchmark with a device-aware timer,
    each benchmark also a run of kind ``op`` (or ``overhead``) in the opperf results.

    Use it like pytest-benchmark's ``benchmark`` (call it, or ``.pedantic(...)``);
    ``describe(stat=..., kind=..., config=..., flops=..., bytes=...)`` names the
    stat and gives per-call work. Without ``--opperf`` the target runs once.
    """

    def __init__(self, request: pytest.FixtureRequest, opperf: OpPerf) -> None:
        self._request = request
        self._opperf = opperf
        self._bench: Any = None
        self.stat: str = getattr(request.node, "originalname", None) or request.node.name
        self.kind = "op"
        self.config: dict[str, Any] = {}
        self.flops: float | None = None
        self.bytes: float | None = None

    def describe(self, stat: str | None = None, kind: str | None = None, config: dict[str, Any] | None = None,
                 flops: float | None = None, bytes: float | None = None) -> OpBenchmark:
        if kind is not None and kind not in ("op", "overhead"):
            raise ValueError(f"opperf_benchmark.describe: kind must be op|overhead, got {kind!r}")
        self.stat = stat or self.stat
        self.kind = kind or self.kind
        self.config = dict(config) if config is not None else self.config
        self.flops = flops if flops is not None else self.flops
        self.bytes = bytes if bytes is not None else self.bytes
        return self

    def _benchmark(self) -> Any:
        session = self._opperf._session
        assert session is not None
        timer = session.benchmark_timer()
        if timer is not None:
            node = self._request.node
            marker = node.get_closest_marker("benchmark")
            kwargs = dict(marker.kwargs) if marker else {}
            node.add_marker(pytest.mark.benchmark(**{**kwargs, "timer": timer}), append=False)
        self._bench = self._request.getfixturevalue("benchmark")
        return self._bench

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._opperf.enabled:
            return function(*args, **kwargs)
        ab = self._opperf._session.ab_benchmark if self._opperf._session is not None else None
        if ab is not None:  # an A/B side: the controller asks for the rounds
            return ab(self, function, args, kwargs)
        return self._benchmark()(function, *args, **kwargs)

    def pedantic(self, target: Callable[..., Any], args: tuple = (), kwargs: dict[str, Any] | None = None,
                 setup: Callable[[], Any] | None = None, teardown: Callable[..., Any] | None = None,
                 rounds: int = 1, warmup_rounds: int = 0, iterations: int = 1) -> Any:
        if not self._opperf.enabled:
            kwargs = kwargs or {}
            if setup is not None:
                made = setup()
                if made:
                    args, kwargs = made
            result = target(*args, **kwargs)
            if teardown is not None:
                teardown(*args, **kwargs)
            return result
        ab = self._opperf._session.ab_benchmark if self._opperf._session is not None else None
        if ab is not None:  # an A/B side: the controller asks for the rounds
            return ab(self, target, args, kwargs or {}, setup=setup, teardown=teardown)
        return self._benchmark().pedantic(target, args=args, kwargs=kwargs, setup=setup, teardown=teardown,
                                          rounds=rounds, warmup_rounds=warmup_rounds, iterations=iterations)

    def _finish(self) -> None:
        session = self._opperf._session
        bench = self._bench
        if session is None or bench is None or getattr(bench, "has_error", False):
            return
        meta = bench.stats
        if not meta or not meta.stats.data:  # pytest-benchmark disabled: the target ran untimed
            session.untimed_benchmarks += 1
            warnings.warn(_warning("OpPerfBenchmarkWarning",
                                   f"{self._request.node.nodeid}: not timed, pytest-benchmark is disabled "
                                   "(--benchmark-disable, or xdist)"), stacklevel=2)
            return
        from pytest_opperf.measure import op_run

        config = dict(self.config)
        config["benchmark"] = {"rounds": len(meta.stats.data), "iterations": meta.iterations}
        timing = getattr(session.benchmark_timer(), "timing", "host")  # what timed the rounds
        session.add_run(op_run(
            self._request.node.nodeid, self.stat, list(meta.stats.data), meta.iterations, self._opperf.device,
            timing, kind=self.kind, config=config, flops=self.flops, bytes=self.bytes))


@pytest.fixture
def opperf_benchmark(request: pytest.FixtureRequest, opperf: OpPerf) -> Iterator[OpBenchmark]:
    """Per-op benchmarks through pytest-benchmark, contributed to the opperf results."""
    bench = OpBenchmark(request, opperf)
    yield bench
    bench._finish()


# --- the session ---------------------------------------------------------------------


class OpPerfSession:
    """Exists only with ``--opperf``: collects runs, gates, reports, writes files.

    On an xdist worker it only collects and hands its runs to the controller
    through ``workeroutput``; the controller merges, gates and reports once.
    """

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        # an xdist worker, or an A/B side: only collects runs and hands them over
        self.is_worker = hasattr(config, "workerinput") or config.pluginmanager.has_plugin("opperf-ab-side")
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
        self.written: list[str] = []
        self.errors: list[str] = []
        self.session: pytest.Session | None = None
        self.merged = False
        self.sections: list[tuple[str, list[str]]] = []  # from pytest_opperf_report_sections
        self._timer: Any = None
        self._timer_made = False
        # A/B (pytest_opperf/ab): the controller in the main process; hand-over points on a side
        self.ab: Any = None  # ab.session.ABSession
        self.compare: Any = None  # ab.paired.CompareResult
        self.step_handover: Callable[[Any], None] | None = None  # set on a side: after each run.step()
        self.ab_benchmark: Callable[..., Any] | None = None  # set on a side: runs per-op benchmarks

    def add_run(self, run: RunResult) -> None:
        self.runs.append(run)

    def benchmark_timer(self) -> Any:
        """One timer per session: pytest-benchmark measures each new timer's precision (1 s)."""
        if not self._timer_made:
            from pytest_opperf.device import benchmark_timer

            self._timer = benchmark_timer(self.device, self.settings.timing)
            self._timer_made = True
        return self._timer

    # --- start: fail fast on every unusable input ---------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session
        self.device = select_device(self.config)
        self.workload = resolved_workload(self.settings, self.device)
        if self.is_worker:
            return
        if self.device.note:
            self.notes.append(self.device.note)
        self._check_outputs()
        self._load_thresholds()
        self._load_baseline()
        if self.settings.compare:
            from pytest_opperf.ab.session import ABSession

            self.ab = ABSession.start(self)
        from pytest_opperf.results import commit_info, machine_info, same_hardware

        self.machine = machine_info(self.device)
        self.config.hook.pytest_opperf_machine_info(config=self.config, info=self.machine)
        self.commit = commit_info(self.config.rootpath)
        if self.baseline is not None:
            other = same_hardware(self.baseline.machine, self.machine)
            if other:
                self._warn(f"baseline {self.baseline_name} is from other hardware ({other}); "
                           "relative checks still run", report=False)

    def _warn(self, message: str, report: bool = True) -> None:
        """An OpPerfBaselineWarning now (filterable; ``-W error`` makes it a usage error)."""
        if report:
            self.warnings.append(message)
        try:
            self.config.issue_config_time_warning(_warning("OpPerfBaselineWarning", message), stacklevel=2)
        except Warning as exc:
            raise pytest.UsageError(f"opperf: warning turned into an error: {exc}") from None

    def _check_outputs(self) -> None:
        for name in ("save", "json", "markdown", "trace"):
            path = self.settings.paths.get(name)
            if path is None or (name == "save" and path.is_dir()):
                continue
            if path.is_dir():
                raise pytest.UsageError(f"opperf: {self.settings.label(name)}: is a directory, expected a file")
            if not path.parent.is_dir():
                raise pytest.UsageError(
                    f"opperf: {self.settings.label(name)}: directory {path.parent} does not exist")

    def _load_thresholds(self) -> None:
        path = self.settings.paths.get("thresholds")
        if path is None:
            return
        from pytest_opperf.gate import ThresholdsError, load_thresholds

        try:
            self.thresholds = load_thresholds(path)
        except ThresholdsError as exc:
            raise pytest.UsageError(f"opperf: {self.settings.label('thresholds')}: {exc}") from None

    def _load_baseline(self) -> None:
        from pytest_opperf.results import ResultsError, baseline_file, read_results

        path = self.settings.paths.get("baseline")
        if path is None:
            return
        label = self.settings.label("baseline")
        if not path.exists():
            raise pytest.UsageError(f"opperf: {label}: no such file or directory")
        if path.is_dir():
            path = baseline_file(path, self.device.device_class, self.workload)
            if not path.exists():
                self._warn(f"no baseline {path} for device class {self.device.device_class!r} and workload "
                           f"{self.workload!r}: only absolute limits are checked")
                return
        try:
            self.baseline = read_results(path)
        except ResultsError as exc:
            raise pytest.UsageError(f"opperf: {label}: {exc}") from None
        self.baseline_name = str(path)

    # --- xdist ------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        from pytest_opperf.results import ResultsError, ResultSet

        output = getattr(node, "workeroutput", None) or {}
        data = output.get("opperf")
        name = getattr(getattr(node, "gateway", None), "id", "worker")
        if error:
            self.notes.append(f"worker {name} went down ({error}); its runs may be missing")
        if not data:
            return
        try:
            payload = json.loads(data)
            worker = ResultSet.from_dict(payload["results"], source=f"worker {name}")
        except (ValueError, KeyError, ResultsError) as exc:
            self.errors.append(f"results of worker {name} unreadable: {exc}")
            return
        self.runs.extend(worker.runs)
        self.untimed_benchmarks += int(payload.get("untimed", 0))
        self.merged = True

    # --- end: gate, files, report ---------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Iterator[None]:
        yield
        if self.is_worker:
            return
        if self.ab is not None and self.ab.aborted:
            return  # no comparison: no gate to pass; the session fails with the reason
        try:
            self._gate(session)
        except Exception as exc:  # the gate could not decide: never pass silently
            self.errors.append(f"internal error in the gate: {type(exc).__name__}: {exc}")
            session.testsfailed += 1

    def _results(self) -> ResultSet:
        from pytest_opperf.results import ResultSet

        runs = sorted(self.runs, key=lambda r: r.id) if self.merged else list(self.runs)
        return ResultSet(runs=runs, machine=self.machine, commit=self.commit, session={
            "device": self.device.name, "device_class": self.device.device_class, "workload": self.workload,
            "timing": self.device.timing_label(self.settings.timing)})

    def _gate(self, session: pytest.Session) -> None:
        from pytest_opperf.gate import evaluate

        results = self.results = self._results()
        self.config.hook.pytest_opperf_modify_results(config=self.config, results=results)
        verdict = self.verdict = evaluate(results, self.thresholds, self.baseline, self.baseline_name)
        verdict.warnings[:0] = self.warnings
        if self.untimed_benchmarks:
            verdict.notes.append(f"{self.untimed_benchmarks} per-op benchmark(s) ran untimed "
                                 "(pytest-benchmark disabled: --benchmark-disable, or xdist)")
        if self.ab is not None:
            self._gate_compare(session, results, verdict)
        results.gate = verdict.to_dict()
        if not verdict.passed:
            session.testsfailed += 1  # exit status 1, as a failed test gives
        self.sections = [(str(title), [str(line) for line in lines])
                         for answer in self.config.hook.pytest_opperf_report_sections(config=self.config,
                                                                                      results=results)
                         for title, lines in answer]

    def _gate_compare(self, session: pytest.Session, results: ResultSet, verdict: Verdict) -> None:
        """A/B: regressed metrics are violations; undecided ones warn (or fail); failed base tests fail."""
        compare = self.compare
        if compare is not None:
            results.compare = compare.to_dict()
            verdict.violations += compare.violations()
            verdict.checks += len(compare.decisions)
            undecided = [d for d in compare.decisions if d.verdict == "undecided"]
            verdict.undecided = len(undecided)
            if undecided and self.settings.compare_undecided == "fail":
                from pytest_opperf.ab.session import undecided_violations

                verdict.violations += undecided_violations(undecided)
        verdict.violations += self.ab.problem_violations()

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
        if self.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    def _hand_over(self) -> None:
        from pytest_opperf.results import ResultSet

        if not hasattr(self.config, "workerinput"):
            return  # an A/B side: its runs went to the controller test by test
        payload = {"results": ResultSet(runs=self.runs).to_dict(with_trace=True),
                   "untimed": self.untimed_benchmarks}
        self.config.workeroutput["opperf"] = json.dumps(payload)  # type: ignore[attr-defined]

    def _write(self, name: str, write: Callable[[Path], None], path: Path | None = None,
               label: str | None = None) -> None:
        path = path or self.settings.paths.get(name)
        if path is None:
            return
        try:
            write(path)
        except (OSError, ValueError) as exc:
            self.errors.append(f"{label or self.settings.label(name)}: cannot write {path}: {exc}")
        else:
            self.written.append(f"{name}: {path}")

    def _write_files(self) -> None:
        from pytest_opperf import report
        from pytest_opperf.results import baseline_file, write_json_atomic, write_results, write_text_atomic

        results = self.results
        assert results is not None
        self._write("json", lambda p: write_results(p, results))
        save = self.settings.paths.get("save")
        if save is not None:
            if not results.runs:
                self.notes.append(f"{self.settings.label('save')}: not saved, no measured runs")
            else:
                target = baseline_file(save, self.device.device_class, self.workload) if save.is_dir() else save
                self._write("save", lambda p: write_results(p, results), target)
        if "markdown" in self.settings.paths or os.environ.get("GITHUB_STEP_SUMMARY"):
            text = report.markdown(results, self.verdict, self.settings.sort, self.sections)
            if self.compare is not None:
                from pytest_opperf.ab import render

                text += "\n" + render.markdown(self.compare)
            self._write("markdown", lambda p: write_text_atomic(p, text))
            summary = os.environ.get("GITHUB_STEP_SUMMARY")
            if summary:
                def append(p: Path) -> None:
                    with open(p, "a", encoding="utf-8") as f:
                        f.write(text)

                self._write("step summary", append, Path(summary), label="GITHUB_STEP_SUMMARY")
        self._write("trace", lambda p: write_json_atomic(p, report.chrome_trace(results)))

    @pytest.hookimpl(trylast=True)  # last: the verdict closes the output, after pytest-benchmark's table
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
        try:
            self._summary(terminalreporter)
        except Exception as exc:  # a report hook must never raise: say so and fail
            terminalreporter.write_line(f"opperf: internal error while reporting: {type(exc).__name__}: {exc}",
                                        red=True)
            if self.session is not None:
                self.session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def _summary(self, tr: Any) -> None:
        from pytest_opperf import report

        tr.write_sep("=", "opperf")
        if self.results is None:
            tr.write_line("opperf: no results (the session stopped before running tests)")
        else:
            sections = list(self.sections)
            if self.compare is not None:
                from pytest_opperf.ab import render

                sections.insert(0, ("A/B: head against base", render.terminal_lines(self.compare)))
            for line in report.terminal_lines(self.results, self.verdict, self.settings.sort, self.notes,
                                              sections):
                tr.write_line(line)
        for line in self.written:
            tr.write_line(f"wrote {line}")
        for line in self.errors:
            tr.write_line(f"error: {line}", red=True)
        for line in self.ab.lines if self.ab is not None else ():
            tr.write_line(f"opperf: {line}" if line.startswith("A/B") else line, red=True)
        if self.verdict is not None and not self.verdict.passed:
            tr.write_sep("=", "opperf gate", red=True)
            for line in report.gate_lines(self.verdict):
                tr.write_line(line, red=True)
