"""The plugin of an A/B side process (``-p pytest_opperf.ab.side``): the controller's orders.

The controller starts ``<python> -m pytest <args> -p pytest_opperf.ab.side
--opperf ...`` once per side with ``OPPERF_AB_FD`` naming its end of a
socket (:mod:`.protocol`). After collection the side sends the test ids and
the compiled extension modules it has loaded (:func:`loaded_extensions`, for the
controller's check that both sides load the same: :mod:`.extensions`), then
runs the tests it is told to, one at a time, and answers at each hand-over
point: after every ``run.step()`` of a measured window (the time spent
waiting is not the window's: ``measure.Run`` leaves it out), and at every
per-op benchmark, whose rounds the controller asks for in blocks instead of
pytest-benchmark calibrating them (a block may name the CPU its calling
thread runs on; each answer names the CPU it ended on; a block's seed places a memory-bound
call's arrays in the memory both sides share, :mod:`.arena`). At the end of a
test it sends the test's reports and the runs it measured, in the envelope of
:mod:`pytest_opperf.records.handback`. The side never gates, reports or writes files:
the controller's process does.

:class:`SidePlugin` talks to the controller; :class:`SideSession` is the side's role
(:mod:`pytest_opperf.glue.roles` chooses it when this plugin is loaded): its port sends the runs to
the side, hands the baton over after each step and times per-op benchmarks with
:class:`ControllerRounds`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import importlib.machinery
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

import pytest

from ..core.port import PerOpTimer, Window
from ..glue.session import OpPerfSession
from ..glue.settings import SETTINGS, Settings
from ..records.handback import Envelope
from .arena import ARENA_FD_ENV, SharedArena, eligible
from .extensions import Extension
from .protocol import Channel, ProtocolError, child_fd
from .tests_from import origins

PLUGIN_NAME = "opperf-ab-side"
MAX_CALIBRATE_ITERATIONS = 1 << 20


class SidePlugin:
    def __init__(self, config: pytest.Config, channel: Channel) -> None:
        self.config = config
        self.channel = channel
        self.name = os.environ.get("OPPERF_AB_SIDE", "side")
        self.errors: list[dict[str, Any]] = []
        self.reports: list[Any] = []
        self.runs: list[Any] = []  # the runs of the test now running (RunResult)
        self.revisit = False  # the test now running ran before (no counting pass)
        self.arena: SharedArena | None = None  # memory both sides share (:mod:`.arena`)
        self.arena_why = ""  # why there is none ("": there is)
        try:
            self.arena = SharedArena.from_env()
            if self.arena is None:
                self.arena_why = f"the controller gave no shared memory ({ARENA_FD_ENV} unset)"
        except Exception as exc:  # noqa: BLE001 - told to the controller, which notes it
            self.arena_why = f"the shared memory cannot be mapped: {type(exc).__name__}: {exc}"

    # --- the orders -----------------------------------------------------------------------

    def receive(self) -> dict[str, Any]:
        try:
            message = self.channel.receive()
        except ProtocolError:
            os._exit(70)  # the controller is gone: nothing left to do or to report to
        if message.get("cmd") == "finish":
            os._exit(0)  # ordered to end, mid-test (the controller is closing down)
        return message

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.channel.send(message)
        except ProtocolError:
            os._exit(70)

    def fail(self, text: str) -> NoReturn:
        self.send({"ev": "error", "message": text})
        os._exit(3)

    # --- pytest hooks -----------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not session.config.stash[SETTINGS].enabled:
            self.fail("--opperf is off on the side")

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.errors.append(self._serial(report))

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.reports.append(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # the side runs where the controller starts it: its checkout's root, or the directory
        # under it the session was started in (an extension elsewhere in the checkout then reads
        # as outside it)
        loaded = loaded_extensions(session.config.invocation_params.dir)
        # where the modules the controller names (tests from elsewhere: .tests_from) came from
        self.send({"ev": "collected", "ids": [item.nodeid for item in session.items],
                   "errors": self.errors, "extensions": [e.to_dict() for e in loaded],
                   "arena": self.arena_why, "origins": origins(),
                   "rootdir": str(session.config.rootpath)})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        items = {item.nodeid: item for item in session.items}
        ran: set[str] = set()
        while True:
            message = self.receive()
            if message.get("cmd") != "run":
                self.fail(f"expected a 'run' order, got {message!r}")
            nodeid = str(message.get("nodeid"))
            item = items.get(nodeid)
            if item is None:
                self.fail(f"no collected test {nodeid!r}")
            nextitem = items.get(str(message.get("next")))
            if nodeid in ran and isinstance(item, pytest.Function):
                item._initrequest()  # a second visit: fresh fixture values, as in rerunfailures
            # work counts are the same on every visit: the first visit's counting pass is enough
            self.revisit = nodeid in ran
            ran.add(nodeid)
            self.reports = []
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            runs = list(self.runs)
            self.runs.clear()
            back = Envelope("ab-side", runs, nodeid=nodeid,
                            failed=any(r.failed for r in self.reports),
                            reports=[self._serial(r) for r in self.reports])
            self.send({"ev": "done", **back.to_dict()})

    def _serial(self, report: Any) -> dict[str, Any]:
        return self.config.hook.pytest_report_to_serializable(config=self.config, report=report)

    # --- hand-over points ----------------------------------------------------------------------

    def after_step(self, run: Any) -> None:
        """After each ``run.step()``: hand the baton over, wait for it back."""
        self.send({"ev": "step", "run": run.id, "step": run.batches})
        message = self.receive()
        if message.get("cmd") != "go":
            self.fail(f"expected 'go' after a step of {run.id}, got {message!r}")

    @contextlib.contextmanager
    def on_cpu(self, cpu: Any, nodeid: str) -> Iterator[None]:
        """Keep the calling thread on ``cpu`` (None: where the scheduler puts it) and give it
        its CPUs back after. Only this thread: pool threads stay free. A thread the block starts
        (a pool made on first use) inherits the one CPU; it gets the CPUs back after the block
        too, or it would stay there for the process's life."""
        if cpu is None:
            yield
            return
        try:
            before = os.sched_getaffinity(0)
            threads = _thread_ids()
            os.sched_setaffinity(0, {int(cpu)})
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            self.fail(f"cannot run the blocks of {nodeid} on CPU {cpu!r} as the controller "
                      f"asks: {exc}")
        try:
            yield
        finally:
            os.sched_setaffinity(0, before)
            for tid in _thread_ids() - threads:
                with contextlib.suppress(OSError):  # it ended meanwhile
                    os.sched_setaffinity(tid, before)


class ControllerRounds:
    """A side's per-op timer: a per-op benchmark whose rounds the controller asks for (no
    calibration by pytest-benchmark), on the session's ``timer``."""

    def __init__(self, side: SidePlugin, timer: Any) -> None:
        self.side = side
        self.timer = timer or time.perf_counter

    def call(self, bench: Any, function: Callable[..., Any], args: tuple,
             kwargs: dict[str, Any]) -> Any:
        return self._rounds(bench, function, args, kwargs)

    def pedantic(self, bench: Any, target: Callable[..., Any], args: tuple,
                 kwargs: dict[str, Any] | None, setup: Callable[[], Any] | None,
                 teardown: Callable[..., Any] | None, rounds: int, warmup_rounds: int,
                 iterations: int) -> Any:
        return self._rounds(bench, target, args, kwargs or {}, setup, teardown)

    def finish(self, bench: Any) -> None:
        """Nothing left: the run was recorded when the controller said ``go``."""

    def _rounds(self, bench: Any, target: Callable[..., Any], args: tuple,
                kwargs: dict[str, Any], setup: Callable[[], Any] | None = None,
                teardown: Callable[..., Any] | None = None) -> Any:
        from ..core.identity import run_id_of
        from ..core.oploop import pedantic_round

        side, timer = self.side, self.timer
        result: list[Any] = [None]
        arena = side.arena
        # a block ordered with a seed runs on copies of the arrays in memory both sides share
        placeable = setup is None and arena is not None and eligible((args, kwargs))
        placed: list[bool] = []  # per block: whether it ran placed

        def one_round(iterations: int, call: tuple[tuple, dict[str, Any]]) -> float:
            elapsed, result[0] = pedantic_round(target, *call, iterations, timer, setup,
                                                teardown)
            return elapsed

        node = bench.request.node
        side.send({"ev": "bench", "run": run_id_of(node), "stat": bench.stat})
        per_call: list[float] = []
        iterations = 1
        while True:
            message = side.receive()
            cmd = message.get("cmd")
            if cmd == "calibrate":
                iterations = 1
                elapsed = one_round(1, (args, kwargs))  # also the first warm-up call
                floor = float(message.get("min_round_s", 0.0))
                while setup is None and elapsed < floor and iterations < MAX_CALIBRATE_ITERATIONS:
                    iterations *= 2
                    elapsed = one_round(iterations, (args, kwargs))
                side.send({"ev": "calibrated", "iterations": iterations, "round_s": elapsed})
            elif cmd == "block":
                iterations = 1 if setup is not None else int(message["iterations"])
                seed = message.get("place")
                place = (placeable and isinstance(seed, int) and arena is not None
                         and arena.broken is None)
                with side.on_cpu(message.get("cpu"), node.nodeid):
                    if place:
                        assert arena is not None and isinstance(seed, int)
                        times = self._placed_block(arena, one_round, (args, kwargs), seed,
                                                   iterations, int(message["rounds"]), result)
                    else:
                        times = self._timed(one_round, (args, kwargs), iterations,
                                            int(message["rounds"]))
                    ran_on = current_cpu()
                placed.append(place)
                per_call.extend(times)
                answer = {"ev": "block", "per_call_s": times, "cpu": ran_on}
                if arena is not None and arena.broken is not None:
                    answer["arena"] = arena.broken  # the controller places no more pairs
                side.send(answer)
            elif cmd == "go":
                break
            else:
                side.fail(f"expected calibrate|block|go at benchmark {node.nodeid}, "
                          f"got {message!r}")
        if per_call:
            placement = ("shared" if placed and all(placed)
                         else "private" if not any(placed) else "mixed")
            bench.record(per_call, iterations, ab=True, median_s=statistics.median(per_call),
                         placement=placement)
        if arena is not None and arena.broken is not None and any(placed):
            raise RuntimeError(f"opperf A/B: {arena.broken}; this side places no more arrays "
                               "in shared memory")
        return result[0]

    @staticmethod
    def _placed_block(arena: SharedArena, one_round: Callable[..., float],
                      call: tuple[tuple, dict[str, Any]], seed: int, iterations: int,
                      rounds: int, result: list[Any]) -> list[float]:
        """A block on copies of the arrays in the shared memory, from where ``seed`` says; the
        result copied out of it after, and nothing of the block left in it."""
        with arena.place(call, seed) as copies:
            times = ControllerRounds._timed(one_round, copies, iterations, rounds)
            del copies
        result[0] = arena.private(result[0])
        arena.kept()
        return times

    @staticmethod
    def _timed(one_round: Callable[..., float], call: tuple[tuple, dict[str, Any]],
               iterations: int, rounds: int) -> list[float]:
        """A block's per-call times of ``rounds`` rounds on ``call``'s arguments, after one
        untimed call (a pause lets thread pools fall asleep: it wakes them)."""
        one_round(1, call)
        return [one_round(iterations, call) / iterations for _ in range(rounds)]


class SideSession(OpPerfSession):
    """The role of an A/B side: its runs go to the controller test by test (:class:`SidePlugin`
    sends them), its windows hand the baton over after each step, its per-op rounds are the
    controller's."""

    def __init__(self, config: pytest.Config, settings: Settings, side: SidePlugin) -> None:
        super().__init__(config, settings)
        self.side = side

    def add_run(self, run: Any) -> None:
        self.side.runs.append(run)  # the controller keeps the runs, test by test

    def per_op(self, timer: Any) -> PerOpTimer:
        return ControllerRounds(self.side, timer)

    def window(self, test: str) -> Window:
        window = super().window(test)
        return Window(window.annotate, self.side.after_step,
                      0 if self.side.revisit else window.count_steps, window.count_timeout_s,
                      count_root=window.count_root)


_FINGERPRINTS: dict[str, tuple[int, str] | None] = {}  # per real path, for the process's life


def fingerprint(path: str) -> tuple[int, str] | None:
    """The size and sha256 of the file at ``path`` (None: it cannot be read), hashed once per
    path and process."""
    if path not in _FINGERPRINTS:
        digest, size = hashlib.sha256(), 0
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
                    size += len(chunk)
            _FINGERPRINTS[path] = (size, digest.hexdigest())
        except OSError:
            _FINGERPRINTS[path] = None
    return _FINGERPRINTS[path]


def loaded_extensions(root: str | Path,
                      modules: Mapping[str, Any] | None = None) -> list[Extension]:
    """The compiled extension modules in ``modules`` (default: ``sys.modules``; those whose
    ``__file__`` ends in an ``importlib.machinery.EXTENSION_SUFFIXES`` suffix), by name, each
    with its path relative to the checkout ``root`` when under it, else absolute (links
    resolved), and its file's :func:`fingerprint` (:mod:`.extensions`)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    real_root = os.path.realpath(root)
    out = []
    for name, module in sorted(dict(sys.modules if modules is None else modules).items()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not file.endswith(suffixes):
            continue
        real = os.path.realpath(file)
        try:
            relative = os.path.relpath(real, real_root)
        except ValueError:  # another drive
            relative = os.pardir
        inside = relative != os.pardir and not relative.startswith(os.pardir + os.sep)
        size, sha = fingerprint(real) or (None, None)
        out.append(Extension(name, Path(relative).as_posix() if inside else real, inside, size,
                             sha))
    return out


@functools.cache
def _sched_getcpu() -> Any:
    """libc's ``sched_getcpu``, or None where the C library has no such call (or cannot load)."""
    try:
        call = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError, TypeError):
        return None
    call.restype, call.argtypes = ctypes.c_int, []
    return call


def _thread_ids() -> set[int]:
    """The kernel's ids of this process's threads (none where ``/proc`` does not list them)."""
    try:
        return {int(name) for name in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def current_cpu() -> int | None:
    """The CPU the calling thread runs on now, or None where that cannot be known."""
    call = _sched_getcpu()
    cpu = -1 if call is None else int(call())
    return cpu if cpu >= 0 else None


@pytest.hookimpl(tryfirst=True)  # before the opperf session is made: it must know it is a side
def pytest_configure(config: pytest.Config) -> None:
    fd = child_fd()
    if fd is None:
        raise pytest.UsageError("opperf: pytest_opperf.ab.side is the plugin of an A/B side "
                                "process; it is loaded by --opperf-compare, not by hand")
    config.pluginmanager.register(SidePlugin(config, Channel.from_fd(fd)), PLUGIN_NAME)
