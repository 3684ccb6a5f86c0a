"""The role of this process, chosen once: the only module that asks what a process is.

``plugin.pytest_configure`` calls :func:`configure`, which picks exactly one role
(:func:`choose`) and, with ``--opperf``, registers that role's session as ``opperf-session``:

* ``plain``: a session on its own (:class:`pytest_opperf.glue.main_session.MainSession`);
* ``xdist-controller``: pytest-xdist's controller (:class:`XdistController`): it merges its
  workers' envelopes, then gates and reports once;
* ``xdist-worker`` and ``gpu-worker``: a worker (:class:`XdistWorker`; per GPU with
  ``--opperf-gpu-workers``, :class:`GpuWorker`, timing per-op benchmarks with its own loop): it
  collects and hands its runs back in ``workeroutput``;
* ``ab-main``: the A/B main process (:class:`pytest_opperf.ab.session.ABMain`);
* ``ab-side``: an A/B side (:class:`pytest_opperf.ab.side.SideSession`): it runs what the
  controller orders and hands each test's runs back over its socket;
* ``valgrind-child``: the child of ``--opperf-instructions`` (:class:`ValgrindChild`): callgrind
  counts its windows' counting passes; it hands back which pass was which run's.

The main roles gate, report and write files; the child roles collect and hand back, in the one
envelope of :mod:`pytest_opperf.records.handback`. Nothing else in the package tests what role it
runs in (tests/test_roles.py reads every module's AST to keep it so).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from ..core.port import PerOpTimer, Window
from ..gpu import gpu_env
from ..gpu.xdist_gpu import ENV_LIST, GpuWorkersError, visible_gpus
from ..records import atomic, handback
from ..workcounts import instructions
from . import shard_hook
from .main_session import MainSession
from .session import OpPerfSession
from .settings import SESSION_PLUGIN, Settings, usage_errors

if TYPE_CHECKING:
    from ..ab.side import SidePlugin

__all__ = ["ROLES", "GpuWorker", "Role", "ValgrindChild", "XdistController", "XdistWorker",
           "choose", "configure"]

Role = Literal["plain", "xdist-controller", "xdist-worker", "gpu-worker", "ab-main", "ab-side",
               "valgrind-child"]
ROLES: tuple[Role, ...] = ("plain", "xdist-controller", "xdist-worker", "gpu-worker", "ab-main",
                           "ab-side", "valgrind-child")
_SIDE_PLUGIN = "opperf-ab-side"  # pytest_opperf.ab.side.PLUGIN_NAME (-p pytest_opperf.ab.side)


def choose(config: pytest.Config, settings: Settings) -> Role:
    """The one role of this process."""
    if hasattr(config, "workerinput"):
        return "gpu-worker" if settings.gpu_workers else "xdist-worker"
    if config.pluginmanager.has_plugin(_SIDE_PLUGIN):
        return "ab-side"
    if os.environ.get(instructions.CHILD_ENV):
        return "valgrind-child"
    if settings.compare and not config.getoption("collectonly", False):  # collecting: no A/B
        return "ab-main"
    if config.getoption("dist", "no") != "no":
        return "xdist-controller"
    return "plain"


def configure(config: pytest.Config, settings: Settings) -> Role:
    """Choose the role; share the GPUs with ``--opperf-gpu-workers``; with ``--opperf`` register
    the role's session."""
    role = choose(config, settings)
    if settings.gpu_workers and role not in ("xdist-worker", "gpu-worker"):
        share_gpus(config)
    if settings.enabled:
        config.pluginmanager.register(_session(role, config, settings), SESSION_PLUGIN)
    return role


def _session(role: Role, config: pytest.Config, settings: Settings) -> OpPerfSession:
    if role == "ab-main":
        from ..ab.session import ABMain

        return ABMain(config, settings)
    if role == "ab-side":
        from ..ab.side import SideSession

        side: SidePlugin | None = config.pluginmanager.get_plugin(_SIDE_PLUGIN)
        assert side is not None  # the role was chosen for it
        return SideSession(config, settings, side)
    if role == "valgrind-child":
        return ValgrindChild(config, settings, Path(os.environ[instructions.CHILD_ENV]))
    return {"plain": MainSession, "xdist-controller": XdistController, "xdist-worker": XdistWorker,
            "gpu-worker": GpuWorker}[role](config, settings)


def share_gpus(config: pytest.Config) -> None:
    """On the controller: check the worker count and hand the GPU list to the workers."""
    workers = config.getoption("numprocesses", None)
    if not workers:
        raise pytest.UsageError("opperf: --opperf-gpu-workers needs pytest-xdist workers: add -n "
                                "auto (one worker per GPU)")
    with usage_errors("--opperf-gpu-workers", GpuWorkersError):
        gpus = visible_gpus()
    if workers > len(gpus):
        raise pytest.UsageError(f"opperf: --opperf-gpu-workers: -n {workers} workers for "
                                f"{len(gpus)} GPU(s) ({','.join(gpus)}); two workers on one GPU "
                                "would disturb each other's timings")
    previous = os.environ.get(ENV_LIST)
    os.environ[ENV_LIST] = ",".join(gpus)  # workers inherit the controller's environment

    def restore() -> None:
        if previous is None:
            os.environ.pop(ENV_LIST, None)
        else:
            os.environ[ENV_LIST] = previous

    config.add_cleanup(restore)


class XdistController(MainSession):
    """The main role on pytest-xdist's controller: its workers' runs, then one gate."""

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
            back = handback.Envelope.loads(data, f"worker {name}", "xdist-worker")
        except handback.HandBackError as exc:
            self.errors.append(f"results of worker {name} unreadable: {exc}")
            return
        self.runs.extend(back.runs)
        self.untimed_benchmarks += back.untimed
        self.plain_benchmarks += back.plain
        self.deselected = max(self.deselected, back.deselected)  # every worker collects all
        if back.device is not None:
            self.worker_devices[name] = back.device
        if back.shard is not None:
            shard_hook.took(self.config, back.shard)
        self.merged = True


class XdistWorker(OpPerfSession):
    """A worker: collects, and hands its envelope to the controller at its session's end."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        device = None
        if self.device.is_gpu:  # for the controller's same-model check and NVML warnings
            if self.gpu_env:
                self.gpu_env["end"] = gpu_env.snapshot(self.device.pci_bus_id)
            device = {"name": self.device.name, "gpu_model": self.device.gpu_model,
                      "pci_bus_id": self.device.pci_bus_id,
                      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                      "gpu_env": self.gpu_env}
        back = handback.Envelope("xdist-worker", self.runs, self.untimed_benchmarks,
                                 self.plain_benchmarks, self.deselected, device,
                                 shard=shard_hook.taken(self.config))
        self.config.workeroutput["opperf"] = back.dumps()  # type: ignore[attr-defined]


class GpuWorker(XdistWorker):
    """A worker of ``--opperf-gpu-workers``: its own GPU, and its own per-op loop
    (pytest-benchmark turns itself off under xdist)."""

    def per_op(self, timer: Any) -> PerOpTimer:
        return self.oploop(timer)


class ValgrindChild(OpPerfSession):
    """The child of ``--opperf-instructions`` under valgrind: callgrind counts each window's
    counting pass; at the end, its envelope names the run of each pass, in ``out_dir``."""

    def __init__(self, config: pytest.Config, settings: Settings, out_dir: Path) -> None:
        super().__init__(config, settings)
        self.out_dir = out_dir
        self.counter = instructions.ChildPass()

    def window(self, test: str) -> Window:
        window = super().window(test)
        return Window(window.annotate, window.after_step, window.count_steps,
                      window.count_timeout_s, counter=self.counter,
                      count_root=window.count_root)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        back = handback.Envelope("valgrind-child", self.runs, self.untimed_benchmarks,
                                 self.plain_benchmarks, self.deselected,
                                 windows=list(self.counter.windows))
        atomic.write_text_atomic(self.out_dir / handback.FILE, back.dumps())
