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
    ("history", "PATH|URL", _path, None,
     "append this session to a history: a SQLite file (created on first use) or a postgresql:// URL"),
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
    group.addoption("--opperf-record-benchmarks", action="store_true", default=None, dest="opperf_record_benchmarks",
                    help="also record tests using pytest-benchmark's plain `benchmark` fixture as per-op runs, "
                         "timed by pytest-benchmark's own timer (default: off, they are only counted; "
                         "ini opperf_record_benchmarks)")
    parser.addini("opperf_record_benchmarks", "record plain `benchmark` fixtures, as --opperf-record-benchmarks does",
                  type="bool", default=False)
    for name, text in _GPU_FLAGS:
        group.addoption(f"--opperf-{name.replace('_', '-')}", action="store_true", default=None,
                        dest=f"opperf_{name}", help=f"{text} (default: off; ini opperf_{name})")
        parser.addini(f"opperf_{name}", f"turn on --opperf-{name.replace('_', '-')}", type="bool", default=False)


# GPU switches (flags, each also an ini key): see docs/contract-additions.md
_GPU_FLAGS = (
    ("nvtx", "NVTX ranges around every op and step, named as in the report, for Nsight Systems (needs nvtx)"),
    ("l2_flush", "per-op benchmarks flush the GPU's L2 cache before each timed call (cold-cache timing)"),
    ("gpu_workers", "one pytest-xdist worker per GPU, each with its own CUDA_VISIBLE_DEVICES (use with -n auto)"),
)


def _flag(config: pytest.Config, name: str) -> bool:
    given = config.getoption(f"opperf_{name}", None)
    return bool(config.getini(f"opperf_{name}")) if given is None else bool(given)


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
    history: str | None = None  # a SQLite path (absolute) or a postgresql:// URL
    labels: dict[str, str] = field(default_factory=dict)  # how each was given, for messages
    save_dir: bool = False  # --opperf-save ends with a slash: a directory, created when missing
    record_benchmarks: bool = False  # plain pytest-benchmark `benchmark` fixtures become per-op runs
    nvtx: bool = False
    l2_flush: bool = False
    gpu_workers: bool = False
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
        if name == "history":
            if given:
                values[name] = given if "://" in given else str(Path(base, given))
                from pytest_opperf.history.store import redact

                labels[name] = f"{label} {redact(given)}"  # never a URL's password
        elif name in ("thresholds", "baseline", "save", "json", "markdown", "trace"):
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
    save_given = labels.get("save", "")
    save_dir = save_given.endswith(("/", os.sep))
    record = config.getoption("opperf_record_benchmarks")
    if record is None:
        record = bool(config.getini("opperf_record_benchmarks"))
    if values.get("compare") and not enabled and config.getoption("opperf_compare"):
        raise pytest.UsageError("opperf: --opperf-compare needs --opperf (or ini opperf_enabled)")
    return Settings(enabled=enabled, executor_stat=executor_stat, paths=paths, labels=labels, origins=origins,
                    save_dir=save_dir, record_benchmarks=record,
                    **{name: _flag(config, name) for name, _ in _GPU_FLAGS}, **values)


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
    if settings.gpu_workers and not hasattr(config, "workerinput"):
        _share_gpus(config)
    if settings.enabled:
        config.pluginmanager.register(OpPerfSession(config, settings), SESSION_PLUGIN)


# --- one xdist worker per GPU (pytest_opperf.xdist_gpu) --------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """A worker of a per-GPU session sees only its GPU, before any conftest can touch CUDA."""
    from pytest_opperf.xdist_gpu import set_worker_device

    set_worker_device(os.environ)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` with ``--opperf-gpu-workers``: one worker per GPU."""
    if not _flag(config, "gpu_workers"):
        return None
    from pytest_opperf.xdist_gpu import GpuWorkersError, visible_gpus

    try:
        return len(visible_gpus())
    except GpuWorkersError as exc:
        raise pytest.UsageError(f"opperf: --opperf-gpu-workers: {exc}") from None


def _share_gpus(config: pytest.Config) -> None:
    """On the controller: check the worker count and hand the GPU list to the workers."""
    from pytest_opperf.xdist_gpu import ENV_LIST, GpuWorkersError, visible_gpus

    workers = config.getoption("numprocesses", None)
    if not workers:
        raise pytest.UsageError("opperf: --opperf-gpu-workers needs pytest-xdist workers: add -n auto "
                                "(one worker per GPU)")
    try:
        gpus = visible_gpus()
    except GpuWorkersError as exc:
        raise pytest.UsageError(f"opperf: --opperf-gpu-workers: {exc}") from None
    if workers > len(gpus):
        raise pytest.UsageError(f"opperf: --opperf-gpu-workers: -n {workers} workers for {len(gpus)} GPU(s) "
                                f"({','.join(gpus)}); two workers on one GPU would disturb each other's timings")
    previous = os.environ.get(ENV_LIST)
    os.environ[ENV_LIST] = ",".join(gpus)  # workers inherit the controller's environment

    def restore() -> None:
        if previous is None:
            os.environ.pop(ENV_LIST, None)
        else:
            os.environ[ENV_LIST] = previous

    config.add_cleanup(restore)


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


def run_id_of(node: Any) -> str:
    """A test's run id: its node id with the file part relative to the rootdir.

    pytest names a file outside the rootdir relative to the argument it was
    collected from, so the same test would get another id when pytest is run
    from another directory, and match no baseline run."""
    nodeid = node.nodeid
    path = getattr(node, "path", None)
    if path is None:
        return nodeid
    _, sep, rest = nodeid.partition("::")
    rel = Path(os.path.relpath(path, node.config.rootpath)).as_posix()
    return f"{rel}::{rest}" if sep else rel


class OpPerf:
    """The ``opperf`` fixture: measured windows for e2e suites (see the README)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._config = request.config
        self._settings = request.config.stash[_SETTINGS]
        self._session: OpPerfSession | None = request.config.pluginmanager.get_plugin(SESSION_PLUGIN)
        self._windows = 0
        self._names: set[str | None] = set()
        self._open: str | None = None  # the id of the window open now

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
        from pytest_opperf.results import json_problem

        if kind not in KINDS:
            raise ValueError(f"opperf.measure: kind must be one of {'|'.join(KINDS)}, got {kind!r}")
        if self._open is not None:
            # the inner recording would take every region over and the outer window would undercount
            raise RuntimeError(f"opperf.measure: a window cannot open inside the open window {self._open!r}; "
                               "close it first (measured windows do not nest)")
        if name is not None and name in self._names:
            raise ValueError(f"opperf.measure: name {name!r} is already used by another window of this test; "
                             "give each window its own name (run ids must be unique)")
        self._names.add(name)
        self._windows += 1
        run_id = run_id_of(self._request.node)
        if name is not None:
            run_id = f"{run_id}#{name}"
        elif self._windows > 1:
            run_id = f"{run_id}#{self._windows}"
        problem = json_problem(config, "config") if config is not None else None
        if problem:
            raise ValueError(f"opperf.measure: run {run_id!r}: {problem}")
        if self._session is None:
            yield measure.CountingRun()
            return
        run = measure.Run(run_id, kind, config, self.device, self.timing, self._settings.executor_stat,
                          trace="trace" in self._settings.paths, annotate=self._session.nvtx,
                          handover=self._session.step_handover)
        self._open = run_id
        try:
            with measure.measure_window(run):
                yield run
        finally:
            self._open = None
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
        self._own_rounds: tuple[list[float], int] | None = None  # rounds timed by pytest_opperf.oploop

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
        if self._opperf._session.own_loop:
            return self._own_loop(lambda: function(*args, **kwargs))
        return self._benchmark()(self._annotated(function), *args, **kwargs)

    # --- per-op timing without pytest-benchmark: L2 flush, per-GPU xdist workers ----------

    def _annotated(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` inside an NVTX range named by the stat, with ``--opperf-nvtx``."""
        nvtx = self._opperf._session.nvtx
        if nvtx is None:
            return function

        def annotated(*args: Any, **kwargs: Any) -> Any:
            nvtx.push(self.stat)
            try:
                return function(*args, **kwargs)
            finally:
                nvtx.pop()
        return annotated

    def _target(self, call: Callable[[], Any]) -> Callable[[], Any]:
        return self._annotated(call)

    def _own_loop(self, call: Callable[[], Any]) -> Any:
        from pytest_opperf.oploop import LoopSettings, time_rounds

        session = self._opperf._session
        config = self._request.config

        def option(name: str, default: float) -> float:
            value = config.getoption(f"benchmark_{name}", None)
            return default if value is None else float(value)

        settings = LoopSettings(min_rounds=int(option("min_rounds", 5)), max_time=option("max_time", 1.0),
                                min_time=option("min_time", 0.000005))
        result = call()  # the call whose result the test gets (and one more warm-up)
        self._own_rounds = time_rounds(self._target(call), session.benchmark_timer() or _perf_counter, settings,
                                       before_round=session.flush)
        return result

    def _own_pedantic(self, target: Callable[..., Any], args: tuple, kwargs: dict[str, Any] | None,
                      setup: Callable[[], Any] | None, teardown: Callable[..., Any] | None, rounds: int,
                      warmup_rounds: int, iterations: int) -> Any:
        session = self._opperf._session
        timer = session.benchmark_timer() or _perf_counter
        per_call, result = [], None
        for i in range(warmup_rounds + rounds):
            a, k = args, kwargs or {}
            if setup is not None:
                made = setup()
                if made:
                    a, k = made
            if session.flush is not None:
                session.flush()
            call = self._target(lambda a=a, k=k: target(*a, **k))
            start = timer()
            for _ in range(iterations):
                result = call()
            elapsed = timer() - start
            if i >= warmup_rounds:
                per_call.append(elapsed / iterations)
            if teardown is not None:
                teardown(*a, **k)
        self._own_rounds = (per_call, iterations)
        return result

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
        if self._opperf._session.own_loop:
            return self._own_pedantic(target, args, kwargs, setup, teardown, rounds, warmup_rounds, iterations)
        return self._benchmark().pedantic(self._annotated(target), args=args, kwargs=kwargs, setup=setup,
                                          teardown=teardown, rounds=rounds, warmup_rounds=warmup_rounds,
                                          iterations=iterations)

    def _finish(self) -> None:
        session = self._opperf._session
        if session is not None and self._own_rounds is not None:
            self._finish_own(session)
            return
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
            run_id_of(self._request.node), self.stat, list(meta.stats.data), meta.iterations, self._opperf.device,
            timing, kind=self.kind, config=config, flops=self.flops, bytes=self.bytes))


    def _finish_own(self, session: OpPerfSession) -> None:
        from pytest_opperf.measure import op_run

        rounds, iterations = self._own_rounds
        if not rounds:
            return
        config = dict(self.config)
        config["benchmark"] = {"rounds": len(rounds), "iterations": iterations, "loop": "opperf",
                               **({"l2_flush": True} if session.flush is not None else {})}
        timing = getattr(session.benchmark_timer(), "timing", "host")
        session.add_run(op_run(self._request.node.nodeid, self.stat, rounds, iterations, self._opperf.device,
                               timing, kind=self.kind, config=config, flops=self.flops, bytes=self.bytes))


def _perf_counter() -> float:
    from time import perf_counter

    return perf_counter()


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
        self.workers_down = 0
        self.sections: list[tuple[str, list[str]]] = []  # from pytest_opperf_report_sections
        self._timer: Any = None
        self._timer_made = False
        self.plain_benchmarks = 0  # tests with pytest-benchmark's own `benchmark` fixture, not recorded
        self.interrupted: str | None = None  # why the test loop stopped early
        self.deselected = 0
        self.failed_tests = 0
        self.save_notes: list[str] = []  # what --opperf-save wrote (merged runs), for the report
        # GPU additions (see _gpu_start): NVTX ranges, the L2 flush, per-op timing without
        # pytest-benchmark, the per-GPU workers' devices, and NVML snapshots
        self.nvtx: Any = None
        self.flush: Callable[[], None] | None = None
        self.own_loop = settings.l2_flush or (settings.gpu_workers and self.is_worker)
        self.worker_devices: dict[str, dict[str, Any]] = {}
        self.gpu_env: dict[str, Any] = {}
        if settings.nvtx:
            from pytest_opperf.nvtx_ranges import NvtxUnavailable, load

            try:
                self.nvtx = load()
            except NvtxUnavailable as exc:
                raise pytest.UsageError(f"opperf: --opperf-nvtx: {exc}") from None
        # A/B (pytest_opperf/ab): the controller in the main process; hand-over points on a side
        self.ab: Any = None  # ab.session.ABSession
        self.compare: Any = None  # ab.paired.CompareResult
        self.step_handover: Callable[[Any], None] | None = None  # set on a side: after each run.step()
        self.ab_benchmark: Callable[..., Any] | None = None  # set on a side: runs per-op benchmarks

    def add_run(self, run: RunResult) -> None:
        if any(r.id == run.id for r in self.runs):
            raise ValueError(f"opperf: run id {run.id!r} is measured twice in this session (run ids must be "
                             "unique: name the windows with measure(name=...))")
        self.runs.append(run)

    # --- plain pytest-benchmark fixtures and --benchmark-only ------------------------------

    @pytest.hookimpl(trylast=True)  # after pytest-benchmark's own
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[Any]) -> None:
        for item in items:
            names = getattr(item, "fixturenames", ())
            if "benchmark" in names:
                defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).get("benchmark") or ()
                last = defs[-1] if defs else None
                if last is not None and "opperf_benchmark" in last.argnames:
                    raise pytest.UsageError(
                        f"opperf: {item.nodeid}: the `benchmark` fixture is redefined on top of opperf_benchmark "
                        f"(in {last.baseid + '/' if last.baseid else ''}conftest.py), which pytest-benchmark cannot "
                        "run; record plain benchmark "
                        "fixtures with --opperf-record-benchmarks instead")
            elif "opperf_benchmark" in names:
                # --benchmark-only skips what does not request `benchmark` by name; opperf_benchmark
                # requests it when the test calls it, so it is a benchmark all the same
                item.own_markers[:] = [m for m in item.own_markers if not (
                    m.name == "skip" and str(m.kwargs.get("reason", "")).startswith("Skipping non-benchmark"))]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        if call.when != "call" or not report.passed or "opperf_benchmark" in getattr(item, "fixturenames", ()):
            return
        bench = getattr(item, "funcargs", {}).get("benchmark")
        meta = getattr(bench, "stats", None)
        if bench is None or not meta or not meta.stats.data:
            return
        if not self.settings.record_benchmarks:
            self.plain_benchmarks += 1
            return
        from pytest_opperf.measure import op_run

        stat = getattr(item, "originalname", None) or item.name
        config = {"benchmark": {"rounds": len(meta.stats.data), "iterations": meta.iterations},
                  "timer": "pytest-benchmark"}
        try:
            self.add_run(op_run(run_id_of(item), stat, list(meta.stats.data), meta.iterations, self.device, "host",
                                config=config))
        except ValueError as exc:  # its id is taken (the test also opened a measured window): say so, never raise
            self.errors.append(f"{item.nodeid}: plain benchmark not recorded: {exc}")

    # --- what a partial session did not measure ----------------------------------------

    def pytest_deselected(self, items: list[Any]) -> None:
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self.failed_tests += 1

    def partial(self) -> list[str]:
        """Why this session did not measure every run it could have (empty: it did)."""
        reasons = []
        if self.interrupted:
            reasons.append(f"interrupted: {self.interrupted}")
        if self.deselected:
            reasons.append(f"{self.deselected} test(s) deselected")
        if self.failed_tests:
            reasons.append(f"{self.failed_tests} test report(s) failed, their runs are not recorded")
        if self.untimed_benchmarks:
            reasons.append(f"{self.untimed_benchmarks} per-op benchmark(s) untimed")
        if self.workers_down:
            reasons.append(f"{self.workers_down} xdist worker(s) went down")
        return reasons

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
        self._gpu_start()
        if self.is_worker:
            return
        if self.device.note:
            self.notes.append(self.device.note)
        self._check_outputs()
        self._check_history()
        self._load_thresholds()
        self._load_baseline()
        if self.settings.compare:
            from pytest_opperf.ab.session import ABSession

            self.ab = ABSession.start(self)
        from pytest_opperf.results import commit_info, machine_info, same_hardware

        self.machine = machine_info(self.device)
        if self.gpu_env:
            self.machine["gpu_env"] = self.gpu_env
        self.config.hook.pytest_opperf_machine_info(config=self.config, info=self.machine)
        self.commit = commit_info(self.config.rootpath)
        if self.baseline is not None:
            other = same_hardware(self.baseline.machine, self.machine)
            if other:
                self._warn(f"baseline {self.baseline_name} is from other hardware ({other}); "
                           "relative checks still run", report=False)

    def _gpu_start(self) -> None:
        """The L2 flush (a usage error on a device without one) and the NVML facts at the start."""
        if self.settings.l2_flush:
            if self.device.flush_cache is None:
                raise pytest.UsageError(f"opperf: --opperf-l2-flush: device {self.device.name} has no cache flush "
                                        "(a GPU device of pytest_opperf_select_device provides one)")
            self.flush = self.device.flush_cache
        if self.device.is_gpu:
            from pytest_opperf import gpu_env

            self.gpu_env = {"start": gpu_env.snapshot(self.device.pci_bus_id)}

    def _gpu_end(self, verdict: Verdict) -> None:
        """NVML facts at the end, throttling warnings, and the per-GPU workers' same-model check."""
        from pytest_opperf import gpu_env
        from pytest_opperf.xdist_gpu import different_models

        if self.gpu_env:
            self.gpu_env["end"] = gpu_env.snapshot(self.device.pci_bus_id)
            error = self.gpu_env["start"].get("error")
            if error:
                verdict.notes.append(f"GPU environment (NVML) not recorded: {error}")
            verdict.warnings += gpu_env.throttling(self.gpu_env["start"], self.gpu_env["end"])
        for name, info in sorted(self.worker_devices.items()):
            env = info.get("gpu_env") or {}
            verdict.warnings += [f"worker {name}: {w}" for w in gpu_env.throttling(env.get("start"), env.get("end"))]
        if self.worker_devices:
            self.machine["workers"] = self.worker_devices
        differ = different_models(self.worker_devices)
        if differ:
            self.errors.append(f"the workers ran on different GPU models ({differ}): their runs are not one "
                               "measurement; run them on identical GPUs")
            if self.session is not None:
                self.session.testsfailed += 1
            verdict.notes.append("workers on different GPU models: see the error below")

    def _variant(self) -> str:
        from pytest_opperf.identity import baseline_variant

        return baseline_variant(self.device.timing_label(self.settings.timing), self.settings.l2_flush)

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
            if name == "save" and self.settings.save_dir:
                existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), None)
                if existing is not None and not existing.is_dir():
                    raise pytest.UsageError(f"opperf: {self.settings.label(name)}: {existing} is not a directory")
                continue
            if path.is_dir():
                raise pytest.UsageError(f"opperf: {self.settings.label(name)}: is a directory, expected a file")
            if not path.parent.is_dir():
                raise pytest.UsageError(
                    f"opperf: {self.settings.label(name)}: directory {path.parent} does not exist")

    def _check_history(self) -> None:
        if self.settings.history is None:
            return
        from pytest_opperf.history.store import HistoryError, check_target

        try:
            check_target(self.settings.history)
        except HistoryError as exc:
            raise pytest.UsageError(f"opperf: {self.settings.label('history')}: {exc}") from None

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
        if not os.path.lexists(path):
            raise pytest.UsageError(f"opperf: {label}: no such file or directory")
        if path.is_dir():
            path = baseline_file(path, self.device.device_class, self.workload, self._variant())
            if not os.path.lexists(path):  # a broken link or a link loop is an error, read below
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
            self.workers_down += 1
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
        self.plain_benchmarks += int(payload.get("plain", 0))
        self.deselected = max(self.deselected, int(payload.get("deselected", 0)))  # every worker collects all
        if isinstance(payload.get("device"), dict):
            self.worker_devices[name] = payload["device"]
        self.merged = True

    # --- end: gate, files, report ---------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Iterator[None]:
        outcome = yield
        if self.is_worker:
            return
        exc = outcome.exception if hasattr(outcome, "exception") else (outcome.excinfo or (None, None))[1]
        if exc is not None:  # Ctrl-C, -x / --maxfail, or a plugin stopping the loop
            self.interrupted = str(exc) or type(exc).__name__
        elif session.shouldstop or session.shouldfail:
            self.interrupted = str(session.shouldstop or session.shouldfail)
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
        session = {"device": self.device.name, "device_class": self.device.device_class, "workload": self.workload,
                   "timing": self.device.timing_label(self.settings.timing)}
        if self.settings.l2_flush:
            session["l2_flush"] = True
        return ResultSet(runs=runs, machine=self.machine, commit=self.commit, session=session)

    def _gate(self, session: pytest.Session) -> None:
        from pytest_opperf.gate import evaluate

        results = self.results = self._results()
        self.config.hook.pytest_opperf_modify_results(config=self.config, results=results)
        verdict = self.verdict = evaluate(results, self.thresholds, self.baseline, self.baseline_name)
        if self.interrupted:
            verdict.incomplete = f"session interrupted ({self.interrupted}), not every run was measured"
        verdict.warnings[:0] = self.warnings
        self._gpu_end(verdict)
        if self.untimed_benchmarks:
            verdict.notes.append(f"{self.untimed_benchmarks} per-op benchmark(s) ran untimed "
                                 "(pytest-benchmark disabled: --benchmark-disable, or xdist)")
        if self.plain_benchmarks:
            verdict.notes.append(f"{self.plain_benchmarks} test(s) use pytest-benchmark's plain `benchmark` "
                                 "fixture and are not in the opperf results (use opperf_benchmark, or "
                                 "--opperf-record-benchmarks to record them as per-op runs)")
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
        self._append_history(exitstatus)
        if self.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    def _append_history(self, exitstatus: int) -> None:
        """The session (results and verdict) into the history, all or nothing, after the other files."""
        source = self.settings.history
        if source is None or self.results is None:
            return
        label = self.settings.label("history")
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self.notes.append(f"{label}: not appended, the session was interrupted")
            return
        from pytest_opperf.history.store import HistoryError, append_session, redact

        try:
            sid = append_session(source, self.results, getattr(self.results, "compare", None), self.config.rootpath)
        except HistoryError as exc:
            self.errors.append(f"{label}: {exc}")
        else:
            self.written.append(f"history: {redact(source)} (session {sid})")

    def _hand_over(self) -> None:
        from pytest_opperf.results import ResultSet

        if not hasattr(self.config, "workerinput"):
            return  # an A/B side: its runs went to the controller test by test
        payload = {"results": ResultSet(runs=self.runs).to_dict(with_trace=True),
                   "untimed": self.untimed_benchmarks, "deselected": self.deselected,
                   "plain": self.plain_benchmarks}
        if self.device.is_gpu:  # for the controller's same-model check and NVML warnings
            from pytest_opperf import gpu_env

            if self.gpu_env:
                self.gpu_env["end"] = gpu_env.snapshot(self.device.pci_bus_id)
            payload["device"] = {"name": self.device.name, "gpu_model": self.device.gpu_model,
                                 "pci_bus_id": self.device.pci_bus_id,
                                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                 "gpu_env": self.gpu_env}
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
        from pytest_opperf.results import write_json_atomic, write_results, write_text_atomic

        results = self.results
        assert results is not None
        self._drop_unwritable_runs(results)
        self._write("json", lambda p: write_results(p, results))
        save = self.settings.paths.get("save")
        if save is not None:
            if not results.runs:
                self.notes.append(f"{self.settings.label('save')}: not saved, no measured runs")
            else:
                self._save(save)
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

    def _drop_unwritable_runs(self, results: ResultSet) -> None:
        """Runs that JSON cannot hold (a hook put NaN or an object in them) are left out of every
        file, each with an error naming the run and the field; the other runs are written."""
        from pytest_opperf.results import json_problem

        keep = []
        for run in results.runs:
            problem = json_problem(run.to_dict(), "run")
            if problem:
                self.errors.append(f"run {run.id!r} not written: {problem}")
            else:
                keep.append(run)
        results.runs[:] = keep

    def _save(self, save: Path) -> None:
        """``--opperf-save``: a partial session merges the runs it did not measure, or refuses (see save.py)."""
        from pytest_opperf.results import baseline_file, write_results
        from pytest_opperf.save import SaveRefused, baseline_to_save

        results = self.results
        assert results is not None
        if self.settings.save_dir:
            try:
                save.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self.errors.append(f"{self.settings.label('save')}: cannot create directory {save}: {exc}")
                return
        target = (baseline_file(save, self.device.device_class, self.workload, self._variant())
                  if save.is_dir() else save)
        try:
            saved = baseline_to_save(results, target, self.partial())
        except SaveRefused as exc:
            self.errors.append(f"{self.settings.label('save')}: {exc}")
            return
        self._write("save", lambda p: write_results(p, saved.results), target)
        if saved.note and any(line == f"save: {target}" for line in self.written):
            self.save_notes.append(saved.note)

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
        width = tr.config.get_terminal_writer().fullwidth  # COLUMNS when set
        if self.results is None:
            tr.write_line("opperf: no results (the session stopped before running tests)")
        else:
            sections = list(self.sections)
            if self.compare is not None:
                from pytest_opperf.ab import render

                ab_lines = render.terminal_lines(self.compare, width)
                sections.insert(0, ("A/B: head against base", ab_lines))
            for line in report.terminal_lines(self.results, self.verdict, self.settings.sort, self.notes,
                                              sections, width):
                tr.write_line(line)
        for line in self.written:
            tr.write_line(f"wrote {line}")
        for line in self.save_notes:
            tr.write_line(f"note: {line}")
        for line in self.errors:
            tr.write_line(f"error: {line}", red=True)
        for line in self.ab.lines if self.ab is not None else ():
            tr.write_line(f"opperf: {line}" if line.startswith("A/B") else line, red=True)
        if self.verdict is not None and not self.verdict.passed:
            tr.write_sep("=", "opperf gate", red=True)
            for line in report.gate_lines(self.verdict, width):
                tr.write_line(line, red=True)
