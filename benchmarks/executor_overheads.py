"""Per-run cost of the executor's overheads on a program the size of ResNet-50
training, and the cost of a timed region.

    python benchmarks/executor_overheads.py [--ops 1300] [--runs 30]

The program is a chain of cheap ops on tiny arrays, so a run's time is almost
all executor overhead. Printed: the cost per run of each overhead (program
clone, op creation, local scope creation + deletion) read from the executor's
own timers; then the whole ``Executor.run`` per op for each switch setting,
timed with nothing recording (so the timers cost nothing); then the cost of a
timed region with and without a recording. Medians over ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from typing import Any

import numpy as np
from tabulate import tabulate

import reference_framework as rf
from pytest_opperf import timers

SETTINGS = {
    "faithful (report)": ({}, False),
    "program cache": ({}, True),
    "cached ops": ({"cache_ops": True}, False),
    "reused local scope": ({"reuse_local_scope": True}, False),
    "all overheads off": ({"cache_ops": True, "reuse_local_scope": True}, True),
}


def build(n_ops: int) -> tuple[rf.Program, rf.Program]:
    """Adds against a parameter, with a mean every 10th op: ``n_ops`` ops in all."""
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup), rf.unique_name_guard():
        b, s = main.global_block(), startup.global_block()
        b.create_var(name="x", shape=[-1, 8], dtype="float32")
        prev, params = "x", []
        for i in range(n_ops - 1):
            if i % 10 == 9:
                out = b.create_var(name=f"m{i}")
                b.append_op(type="mean", inputs={"X": [prev]}, outputs={"Out": [out]})
                continue
            if i % 3 == 0:
                p = f"w{i}"
                b.create_parameter(name=p, shape=[8])
                s.create_parameter(name=p, shape=[8])
                s.append_op(type="fill_constant", outputs={"Out": [p]},
                            attrs={"shape": [8], "value": 0.001})
                params.append(p)
            out = b.create_var(name=f"h{i}")
            b.append_op(type="elementwise_add", inputs={"X": [prev], "Y": [params[-1]]},
                        outputs={"Out": [out]})
            prev = out.name
        b.create_var(name="loss")
        b.append_op(type="mean", inputs={"X": [prev]}, outputs={"Out": ["loss"]})
    return main, startup


def median_run_ms(exe: rf.Executor, main: rf.Program, feed: dict, use_cache: bool,
                  runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        exe.run(main, feed=feed, fetch_list=["loss"], use_program_cache=use_cache)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


def region_cost_ns(recording: bool, n: int = 200_000) -> float:
    def regions():
        for _ in range(n):
            with timers.timer("region"):
                pass

    def empty():
        for _ in range(n):
            pass

    def best(f):
        if recording:
            def f_rec():
                with timers.recording():
                    f()
            return min(timeit.repeat(f_rec, number=1, repeat=7))
        return min(timeit.repeat(f, number=1, repeat=7))

    return (best(regions) - best(empty)) / n * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1300)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()

    main_prog, startup = build(args.ops)
    n_ops = main_prog.num_ops() + 2  # + feed + fetch
    n_vars = len(main_prog.global_block().vars)
    feed = {"x": np.ones((4, 8), "float32")}
    print(f"program: {main_prog.num_ops()} ops (+1 feed, +1 fetch), {n_vars} variables; "
          f"{args.runs} runs each\n")

    # Not timeit: it turns the garbage collector off, and a clone allocates
    # enough objects to trigger collections when it runs for real.
    clone_times = []
    for _ in range(args.runs):
        t0 = time.perf_counter_ns()
        main_prog.clone()
        clone_times.append((time.perf_counter_ns() - t0) / 1e6)
    clone_ms = statistics.median(clone_times)

    rows: list[list[Any]] = []
    per_op_rows: list[list[Any]] = []
    with rf.scope_guard(rf.Scope()):
        for name, (kwargs, use_cache) in SETTINGS.items():
            exe = rf.Executor(rf.CPUPlace(), **kwargs)
            exe.run(startup)
            # warm caches
            exe.run(main_prog, feed=feed, fetch_list=["loss"], use_program_cache=use_cache)
            run_ms = median_run_ms(exe, main_prog, feed, use_cache, args.runs)
            with timers.recording() as table:
                for _ in range(args.runs):
                    exe.run(main_prog, feed=feed, fetch_list=["loss"], use_program_cache=use_cache)

            def per_run(stat: str) -> float:
                return table[stat].total_ms / args.runs if stat in table else 0.0

            kernel_ms = table.kernel_ms() / args.runs
            rows.append([name, per_run("ProgramCloneTimer"), per_run("CreateOpTimer"),
                         per_run("CreateLocalScopeTimer") + per_run("DeleteLocalScopeTimer"),
                         per_run("ExecutorRunTimer"), kernel_ms])
            per_op_rows.append([name, run_ms, run_ms / n_ops * 1e3])

    print("Overheads per run, from the executor's timers (ms; recording on):")
    print(tabulate(rows, headers=["setting", "clone", "op creation", "local scope create+delete",
                                  "ExecutorRunTimer", "op kernels"], floatfmt=".3f"))
    print(f"\nProgram.clone() alone: {clone_ms:.3f} ms per clone "
          f"({clone_ms / main_prog.num_ops() * 1e3:.2f} us per op)")
    print("\nWhole Executor.run, nothing recording (median):")
    faithful = per_op_rows[0][1]
    for row in per_op_rows:
        row.append(faithful / row[1])
    print(tabulate(per_op_rows, headers=["setting", "ms per run", "us per op",
                                         "speed-up vs faithful"],
                   floatfmt=(".3f", ".3f", ".2f", ".2f")))
    print("\nA timed region (`with timers.timer(name): pass`), net of the empty loop:")
    print(f"  recording:      {region_cost_ns(True):6.0f} ns")
    print(f"  not recording:  {region_cost_ns(False):6.0f} ns")


if __name__ == "__main__":
    main()
