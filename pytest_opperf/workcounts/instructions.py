"""``--opperf-instructions``: the CPU instructions of each counted step, under valgrind.

No hardware counters on shared virtual machines; valgrind's callgrind counts instructions exactly
(:mod:`pytest_opperf.workcounts.valgrind_run` runs the child,
:mod:`pytest_opperf.workcounts.callgrind` counts its steps). A process cannot be put under valgrind
once it runs, so after a run's counting pass the session runs the run's test again in a child
process under callgrind (instrumentation off until the pass: the child's window runs at valgrind's
cheapest slowdown, still several times slower than natively, much more for BLAS-heavy steps). In the
child (its role: :class:`pytest_opperf.glue.roles.ValgrindChild`), each window's counting pass is
done by callgrind instead of the Python tracer (:class:`ChildPass`): per step, the counters are
zeroed before it and dumped after it, so a step's count holds that step's instructions on the
calling thread only (``child_env`` holds the BLAS libraries to one thread). The run's
``work.instructions`` is the median over its steps; ``work.instructions_cpu`` the CPU and valgrind
that counted them, for instructions compare only on the same CPU model (BLAS picks its kernels by
the CPU's features).

Faults never fail the session: valgrind missing, a child that fails, crashes or runs past
``--opperf-count-timeout`` give one ``warning:`` line each, and the run keeps its timed results and
its Python work counts.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..glue import child
from ..records.handback import FILE, Envelope, HandBackError
from . import valgrind_run
from .callgrind import Callgrind
from .valgrind import ValgrindError

__all__ = ["CHILD_ENV", "ChildPass", "Instructions"]

CHILD_ENV = "OPPERF_INSTRUCTIONS_DIR"  # set in the child: where it leaves its envelope


class ChildPass:
    """In the child under callgrind: the counting pass of each window, counted by callgrind;
    labels ``w<i>-s<k>``, and ``windows[i]`` the run id of pass ``i`` (the child's envelope,
    :mod:`pytest_opperf.records.handback`, hands the list back)."""

    def __init__(self) -> None:
        self.windows: list[str] = []

    def __call__(self, run: Any, step: Callable[[], object], steps: int) -> None:
        index = len(self.windows)
        self.windows.append(run.id)
        counter = Callgrind()
        counter.start_pass()
        try:
            for k in range(steps):
                counter.begin_step()
                try:
                    step()
                finally:
                    counter.end_step(f"w{index}-s{k + 1}")
        finally:
            counter.end_pass()


class Instructions:
    """The parent's side: after a run's counting pass, its test again under callgrind (once per
    test, for all its windows); ``warnings`` holds a line per run that could not be counted."""

    def __init__(self, rootdir: Path, options: Mapping[str, str], timeout_s: float) -> None:
        self.rootdir = rootdir
        # the child's options (pytest_opperf.glue.child): the session's fixed ones, no outputs, no
        # gate
        self.options = dict(options)
        self.timeout_s = timeout_s
        self.warnings: list[str] = []
        self.problem = valgrind_run.problem()
        self._counted: dict[str, dict[str, list[int]] | str] = {}  # by test: steps by run, or why
        self._cpu: str | None = None

    def __call__(self, run: Any, step: Callable[[], object], steps: int) -> None:
        """Count ``run``'s instructions per step (its result's ``work`` gets them)."""
        work = run.result.work if run.result is not None else None
        if work is None:
            return
        if self.problem is not None:
            self._warn(f"--opperf-instructions: {self.problem}: no CPU instructions counted")
            return
        test = run.test  # its node id: a window's run id adds "#<name>"
        counted = self._counted.get(test)
        if counted is None:
            counted = self._counted[test] = self._child(test, steps)
        if isinstance(counted, str):
            self._warn(f"CPU instructions of {run.id} not counted: {counted}")
            return
        per_step = counted.get(run.id)
        if not per_step:
            self._warn(f"CPU instructions of {run.id} not counted: the test under valgrind ran "
                       "no counting pass of that window")
            return
        work.instructions = int(statistics.median_low(per_step))
        work.instructions_cpu = self._cpu

    def _warn(self, line: str) -> None:
        if line not in self.warnings:
            self.warnings.append(line)

    def _child(self, test: str, steps: int) -> dict[str, list[int]] | str:
        out = Path(tempfile.mkdtemp(prefix="opperf-instructions-"))
        try:
            options = dict(self.options, **{"count-steps": str(steps)})
            # the node id is one argument (no shell): only "::" means something to pytest in it
            argv = [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider",
                    "--opperf", *child.argv_options(options)]
            env = child.environment(options)
            env[CHILD_ENV] = str(out)
            try:
                counts = valgrind_run.run_counted(argv, out, timeout_s=self.timeout_s, env=env,
                                                  cwd=self.rootdir)
            except ValgrindError as exc:
                return str(exc)
            try:
                windows = Envelope.loads((out / FILE).read_text(), "the valgrind child",
                                         "valgrind-child").windows
            except (OSError, HandBackError) as exc:
                return f"the child's envelope is unreadable: {exc}"
            self._cpu = valgrind_run.counted_on()
            by_run: dict[str, list[int]] = {}
            for label, n in counts.items():
                index, _, _ = label[1:].partition("-s")
                if index.isdigit() and int(index) < len(windows):
                    by_run.setdefault(str(windows[int(index)]), []).append(n)
            return by_run
        finally:
            shutil.rmtree(out, ignore_errors=True)
