"""The plugin's own cost: wall time of a synthetic suite with and without --opperf.

The suite (written to a temp dir) has e2e tests whose steps time ~60 op
regions each (sleeps inside ExecutorRunTimer/CreateOpTimer/op regions, the
shape of an executor step). It has no per-op benchmarks: those run once
without --opperf and many rounds with it, which is their work, not the
plugin's overhead. Runs alternate between the two modes so that drift in
the machine's speed hits both alike; the medians are compared.

Sleeps make wall time noisy (timer slack and wake-ups on a shared machine),
and the process's CPU time is noisy for the same reason, but everything the
plugin adds is CPU work on the test thread, in three parts that can each be
measured without sleeps: a fixed cost per session (options, device, machine
and commit info, imports of the report modules, gate, the fsynced results
file; measured as the wall time of pytest.main on a one-step suite with no
work, with and without --opperf),
a cost per timed region while recording, and a cost per ``run.step()``.
The script prints the direct wall and CPU medians and the decomposition,
whose sum over the suite's regions and steps is the precise figure. Also reports the A/A
false-alarm count: the suite saved once as a baseline, then N reruns gated against it with
the default tolerances.

    python benchmarks/plugin_overhead.py [--reps 7] [--aa 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_opperf import measure, timers
from pytest_opperf.device import CPU_HOST

SUITE = '''
import time
import pytest
from pytest_opperf import timers

OPS = ["conv2d", "batch_norm", "relu", "elementwise_add", "pool2d", "conv2d_grad",
       "batch_norm_grad", "relu_grad", "sum", "momentum"]

def nap(ms):
    time.sleep(ms / 1000)

def step():
    with timers.timer("ExecutorRunTimer"):
        for i in range(60):
            with timers.timer("CreateOpTimer"):
                pass
            with timers.timer(OPS[i % len(OPS)], kernel=True):
                nap(0.4)
    nap(2.0)  # the "Python" part of a step

@pytest.mark.parametrize("model", ["a", "b", "c", "d"])
def test_train(opperf, model):
    with opperf.measure(config={"model": model}) as run:
        nap(10)  # model building
        for _ in range({steps}):
            step()
            run.step(examples=32)
'''


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_suite(workdir: Path, *args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall and CPU seconds of one pytest run of the suite."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
           "no:hypothesispytest", "test_suite.py", *args]
    cpu = _cpu()
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    return time.perf_counter() - start, _cpu() - cpu, done


TIME_OF_MAIN = """
import sys, time
import pytest
t = time.perf_counter()
pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "test_suite.py",
             *sys.argv[1:]])
print(f"WALL {time.perf_counter() - t}", file=sys.stderr)
"""


def fixed_cost_ms(workdir: Path, reps: int) -> tuple[float, float]:
    """Median wall ms of pytest.main on a one-step suite without work, off and on."""
    suite = SUITE.replace("{steps}", "1")
    for work in ("nap(10)", "nap(0.4)", "nap(2.0)"):
        suite = suite.replace(work, "pass")
    (workdir / "test_suite.py").write_text(suite)
    (workdir / "time_of_main.py").write_text(TIME_OF_MAIN)
    wall: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(max(reps, 9)):
        for mode, extra in (("off", []), ("on", ["--opperf", "--opperf-json=r.json"])):
            done = subprocess.run([sys.executable, "time_of_main.py", *extra], cwd=workdir,
                                  capture_output=True, text=True)
            wall[mode].append(float(done.stderr.split("WALL ")[-1]) * 1e3)
    return statistics.median(wall["off"]), statistics.median(wall["on"])


def region_cost_us(n: int = 200_000) -> float:
    """Extra us per timed region while recording (as CreateOpTimer and op regions are timed)."""
    def loop() -> float:
        start = time.perf_counter()
        for _ in range(n // 2):
            with timers.timer("CreateOpTimer"):
                pass
            with timers.timer("conv2d", kernel=True):
                pass
        return time.perf_counter() - start

    off = min(loop() for _ in range(3))
    with timers.recording():
        on = min(loop() for _ in range(3))
    return (on - off) / n * 1e6


def step_cost_us(stats: int = 12, n: int = 5000) -> float:
    run = measure.Run("x", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with measure.measure_window(run):
        for i in range(stats):
            with timers.timer(f"stat{i}"):
                pass
        start = time.perf_counter()
        for _ in range(n):
            run.step(examples=1)
        return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7, help="runs per mode (default 7)")
    parser.add_argument("--steps", type=int, default=40, help="steps per e2e test (default 40)")
    parser.add_argument("--aa", type=int, default=20,
                        help="A/A reruns against a saved baseline (default 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "test_suite.py").write_text(SUITE.replace("{steps}", str(args.steps)))
        # without a bytecode cache every session compiles the plugin's modules again
        cache = "off" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
        python = sys.version.split()[0]
        env_note = f"{os.cpu_count()} cores, Python {python}, bytecode cache {cache}"
        run_suite(workdir)  # warm the bytecode caches
        wall: dict[str, list[float]] = {"off": [], "on": []}
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(args.reps):
            for mode, extra in (("off", ()), ("on", ("--opperf", "--opperf-json=r.json"))):
                w, c, done = run_suite(workdir, *extra)
                assert done.returncode == 0, done.stdout + done.stderr
                wall[mode].append(w)
                cpu[mode].append(c)
        w_off, w_on = statistics.median(wall["off"]), statistics.median(wall["on"])
        c_off, c_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
        print(f"synthetic suite ({env_note}): 4 e2e tests x {args.steps} steps x 60 op regions, "
              f"{args.reps} runs per mode")
        for mode, label in (("off", "without"), ("on", "with   ")):
            print(f"  {label} --opperf: wall median {statistics.median(wall[mode]):.3f} s (runs "
                  f"{', '.join(f'{t:.2f}' for t in wall[mode])}); CPU median "
                  f"{statistics.median(cpu[mode]):.3f} s")
        print(f"  direct: wall {(w_on - w_off) * 1e3:+.1f} ms = {(w_on / w_off - 1) * 100:+.2f} %; "
              f"CPU {(c_on - c_off) * 1e3:+.1f} ms = {(c_on - c_off) / w_off * 100:+.2f} % of the "
              "wall time (both noisy: sleeps)")
        regions, steps = 4 * args.steps * 121, 4 * args.steps
        f_off, f_on = fixed_cost_ms(workdir, args.reps)
        per_region, per_step = region_cost_us(), step_cost_us()
        total_ms = (f_on - f_off) + regions * per_region / 1e3 + steps * per_step / 1e3
        print(f"  decomposition: fixed {f_on - f_off:.1f} ms per session (pytest.main, {f_off:.0f} "
              "-> "
              f"{f_on:.0f} ms, medians) + {regions} regions x {per_region:.2f} us + {steps} steps "
              "x "
              f"{per_step:.1f} us = {total_ms:.1f} ms = {total_ms / 1e3 / w_off * 100:.2f} % of "
              f"{w_off:.2f} s")
        (workdir / "test_suite.py").write_text(SUITE.replace("{steps}", str(args.steps)))
        if args.aa:
            _, _, done = run_suite(workdir, "--opperf", "--opperf-save=base.json")
            assert done.returncode == 0, done.stdout + done.stderr
            alarms = 0
            failed_runs = 0
            for i in range(args.aa):
                _, _, done = run_suite(workdir, "--opperf", "--opperf-baseline=base.json",
                                       f"--opperf-json=aa{i}.json")
                gate = json.loads((workdir / f"aa{i}.json").read_text())["gate"]
                alarms += len(gate["violations"])
                failed_runs += done.returncode != 0
                for v in gate["violations"]:
                    print(f"  false alarm in rerun {i + 1}: {v['run']} {v['metric']}: "
                          f"{v['message']}")
            print(f"A/A: {args.aa} reruns against one saved baseline, default tolerances: {alarms} "
                  f"false alarm(s), {failed_runs} failed session(s)")


if __name__ == "__main__":
    main()
