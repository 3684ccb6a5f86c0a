"""What per-function work counts cost: the counting pass's time and the results file's size.

    python benchmarks/explain_overhead.py --rounds 5                 # against the parent commit
    python benchmarks/explain_overhead.py --rounds 5 --before main   # against another revision

One process: the reference framework's training step of a workload (``--workload``, default
``small``) on the CPU is counted ``--rounds`` times by each of two counters, interleaved (before,
after, before, after...): the counter of the ``--before`` revision's
``pytest_opperf/workcounts/workcount.py`` (the counts per stat only) and this checkout's (per stat
and per function). Each round counts ``--steps`` steps (the pass's default, 2) and is timed with
``perf_counter``, the garbage collector held off as the pass holds it. It prints the median time
of each and their ratio (the acceptance bound: 1.3), and checks that both give the same counts
per stat.

The size: for each ``--json FILE`` (a session's ``--opperf-json`` file, made by the caller, say
of the main job and of the e2e tests alone), its size, the size of the same file written without
its runs' ``work.functions``, and their ratio (the bound: 1.10). The same session both ways: two
sessions' files differ by more than the tables do, since a per-op run keeps as many samples as
its time allows.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_opperf import timers  # noqa: E402
from pytest_opperf.workcounts import workcount  # noqa: E402


def before_module(rev: str) -> Any:
    """The ``rev`` revision's workcount module, loaded inside this checkout's package (its
    relative imports resolve to this checkout's timers and core.stats)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show",
                             f"{rev}:pytest_opperf/workcounts/workcount.py"],
                            check=True, capture_output=True, text=True).stdout
    name = "pytest_opperf.workcounts._workcount_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "pytest_opperf.workcounts"
    module.__file__ = workcount.__file__  # its own frames are skipped as this one's are
    sys.modules[name] = module
    exec(compile(source, workcount.__file__, "exec"), module.__dict__)
    return module


def counted(module: Any, step: Any, steps: int) -> tuple[float, dict[str, dict[str, int]]]:
    """One pass of ``steps`` steps with ``module``'s counter, as the plugin's pass does it (the
    steps, each step's take, the kept counts: :meth:`WorkCounts.of_steps`, with the functions'
    rows where the module has them): its seconds and the counts per stat."""
    with timers.recording() as table:
        counter = module.Counter(table)
        start = time.perf_counter()
        per_step, functions = [], []
        for _ in range(steps):
            counter.start()
            try:
                step()
            finally:
                counter.stop()
            if hasattr(counter, "functions"):
                per_step.append(counter.take(str(ROOT)))
                functions.append(counter.functions)
            else:
                per_step.append(counter.take())
        seconds = time.perf_counter() - start
        if functions:
            work = module.WorkCounts.of_steps(per_step, seconds, functions)
            work.to_dict()  # the packed rows, as the results file gets them
        else:
            work = module.WorkCounts.of_steps(per_step, seconds)
        return time.perf_counter() - start, work.stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--workload", default="small")
    parser.add_argument("--before", default="HEAD~1", help="the revision to compare with")
    parser.add_argument("--json", type=Path, action="append", default=[],
                        help="a results file whose size to split (repeatable)")
    args = parser.parse_args()
    from reference_framework.benchmark import WORKLOADS, run_benchmark

    config = WORKLOADS[args.workload].replace(device="CPU", iterations=2)
    result = run_benchmark(config)
    step = result.extra_step
    assert step is not None
    old = before_module(args.before)
    times: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for name, module in (("before", old), ("after", workcount)):
            seconds, counts = counted(module, step, args.steps)
            times[name].append(seconds)
            if name == "before":
                expected = counts
            elif counts != expected:
                raise SystemExit("the two counters gave other counts per stat: "
                                 f"{sorted(set(counts) ^ set(expected))[:5]}")
    b, a = statistics.median(times["before"]), statistics.median(times["after"])
    print(f"counting pass, {args.workload} workload, {args.steps} steps, {args.rounds} rounds "
          f"interleaved: before ({args.before}) median {b:.3f} s "
          f"{[round(t, 3) for t in times['before']]}; after median {a:.3f} s "
          f"{[round(t, 3) for t in times['after']]}; ratio {a / b:.3f} (bound 1.3)")
    for path in args.json:
        with_tables, without = sizes(path)
        print(f"results file {path}: {with_tables} bytes; without work.functions {without} "
              f"bytes; ratio {with_tables / without:.3f} (bound 1.10)")


def sizes(path: Path) -> tuple[int, int]:
    """The bytes of a results file as written, and as written without ``work.functions``."""
    from pytest_opperf.records.reader import read_results
    from pytest_opperf.results import dumps_results

    results = read_results(path)
    full = len(dumps_results(results).encode())
    for run in results.runs:
        if run.work is not None:
            run.work.functions = None
    return full, len(dumps_results(results).encode())


if __name__ == "__main__":
    main()
