"""The collected heap frozen or not: the training step's time and its noise, with a big heap.

An ``--opperf`` session freezes its heap once collected (``gc.freeze()``,
docs/ab-statistics.md), so that the collector's full collections skip the
modules every suite imported. This script shows why: it trains the small ResNet-50 workload in
child processes that first import ``--imports`` (default: torch and paddle, when installed, as
the suites' collection does), with the heap frozen and not, in turn, and prints per process the
median step and the standard deviation of ``log(step[i+1] / step[i])`` over disjoint
neighbouring pairs (the noise an A/B pair of steps sees).

    python benchmarks/gc_freeze.py                      # 2 processes of each, 60 steps
    python benchmarks/gc_freeze.py --runs 3 --steps 80 --imports torch

It asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import gc, json, math, statistics, sys, time
for name in sys.argv[3:]:
    __import__(name)
objects = len(gc.get_objects())
if sys.argv[2] == "frozen":
    gc.collect()
    gc.freeze()
from reference_framework.benchmark import WORKLOADS, run_benchmark
steps, last = [], [time.perf_counter()]
def on_batch(examples):
    now = time.perf_counter()
    steps.append(now - last[0])
    last[0] = now
run_benchmark(WORKLOADS["small"].replace(device="CPU", iterations=int(sys.argv[1])),
              on_batch=on_batch)
steady = steps[3:]
logs = [math.log(steady[i + 1] / steady[i]) for i in range(0, len(steady) - 1, 2)]
print(json.dumps({"objects": objects, "median_ms": statistics.median(steady) * 1e3,
                  "neighbour_sd": statistics.pstdev(logs)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="processes of each kind")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--imports", default=None,
                        help="modules each child imports first (comma-separated; default: torch "
                             "and paddle, those installed)")
    args = parser.parse_args()
    imports = ([m for m in args.imports.split(",") if m] if args.imports is not None else
               [m for m in ("torch", "paddle") if importlib.util.find_spec(m) is not None])
    print(f"imports: {', '.join(imports) or 'none'}; {args.steps} steps per process")
    for run in range(args.runs):
        for kind in ("not frozen", "frozen"):
            argv = [sys.executable, "-c", CHILD, str(args.steps), kind.replace(" ", "-"), *imports]
            out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"run {run + 1} {kind:10}: {got['objects']:7d} objects, step median "
                  f"{got['median_ms']:6.1f} ms, neighbour sd {got['neighbour_sd']:.3f}")


if __name__ == "__main__":
    main()
