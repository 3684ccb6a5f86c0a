"""How much fresh processes differ in ResNet-50's step, with host memory kept or not.

Runs the small workload's training loop in fresh processes, the four variants (the faithful and
the no-overheads executor, each with ``REFERENCE_FRAMEWORK_HOST_MEMORY`` ``retain`` and
``system``) interleaved process by process, and prints for each the median step and the standard
deviation of the processes' log median step, next to what the steps' own noise alone would give
(``1.25 * sd / sqrt(steps)``, the median's, from the spread of neighbouring steps). The
difference between the two is the spread an A/B's process pairs add to its intervals
(docs/reference-framework.md, "Host memory"). Start a CPU-bound job beside it to measure it
under load, as the figures in the docs were.

    python benchmarks/host_memory.py [--processes 6] [--steps 24] [--skip 4]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

from reference_framework.host_memory import ENV

_CHILD = r"""
import json, sys, time
from reference_framework.benchmark import WORKLOADS, run_benchmark
config = WORKLOADS["small"].replace(device="CPU", iterations=int(sys.argv[2]))
if sys.argv[1] == "no-overheads":
    config = config.no_overheads()
steps, last = [], [time.perf_counter()]
def on_batch(examples):
    now = time.perf_counter()
    steps.append(now - last[0])
    last[0] = now
run_benchmark(config, on_batch=on_batch)
print(json.dumps(steps))
"""

VARIANTS = [(executor, memory) for executor in ("faithful", "no-overheads")
            for memory in ("retain", "system")]


def _run(executor: str, memory: str, steps: int) -> list[float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, executor, str(steps)],
                         cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                         text=True, check=True, env={**os.environ, ENV: memory})
    return [float(s) for s in json.loads(out.stdout.strip().splitlines()[-1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=6, help="fresh processes per variant")
    parser.add_argument("--steps", type=int, default=24, help="steps per process")
    parser.add_argument("--skip", type=int, default=4, help="first steps of each process dropped")
    args = parser.parse_args()
    if args.processes < 2 or args.steps - args.skip < 2:
        parser.error("needs 2 processes and 2 steps past --skip at least")
    runs: dict[tuple[str, str], list[list[float]]] = {v: [] for v in VARIANTS}
    for _ in range(args.processes):
        for variant in VARIANTS:
            runs[variant].append(_run(*variant, args.steps)[args.skip:])
    print(f"{args.processes} processes per variant, {args.steps - args.skip} steps each "
          f"(the first {args.skip} dropped)")
    print("| executor, host memory | median step | sd of the processes' log median step "
          "| from the steps' noise alone |")
    print("|---|---:|---:|---:|")
    for (executor, memory), steps in runs.items():
        logs = [math.log(statistics.median(s)) for s in steps]
        # one step's log sd, from neighbouring steps' ratios (slow drifts cancel)
        neighbours = [math.log(s[i + 1] / s[i]) for s in steps for i in range(0, len(s) - 1, 2)]
        step_sd = statistics.pstdev(neighbours) / math.sqrt(2)
        noise = 1.25 * step_sd / math.sqrt(len(steps[0]))
        print(f"| {executor}, {memory} | {1e3 * math.exp(statistics.fmean(logs)):.0f} ms "
              f"| {statistics.stdev(logs):.4f} | {noise:.4f} |")


if __name__ == "__main__":
    main()
