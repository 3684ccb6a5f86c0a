"""The collector's share of a training step at a lowered threshold: ab_acceptance's ``gc-3``.

``benchmarks/ab_acceptance.py``'s ``gc-3`` case slows the step by lowering the threshold of the
cyclic garbage collector's youngest generation (``gc.set_threshold(5)``): every step makes the same
Python calls, and the collections run inside it. This script shows that the slowdown is the same
in every process (where a memory-layout patch's is not): it trains the small ResNet-50 workload in
fresh child processes, each with one threshold, the heap collected and frozen first as an
``--opperf`` session does, and prints per process the median step, the collector's milliseconds
per step (``gc.callbacks``, start to stop) and the collections per step of each generation.

    python benchmarks/gc_pressure.py                        # thresholds 700 and 5, 3 processes each
    python benchmarks/gc_pressure.py --thresholds 700,10,5 --runs 2 --steps 30

It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import gc, json, statistics, sys, time
from reference_framework.benchmark import WORKLOADS, run_benchmark
gc.collect()
gc.freeze()
gc.set_threshold(int(sys.argv[2]), *gc.get_threshold()[1:])
seconds, started = [0.0], [0.0]
def timed(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        seconds[0] += time.perf_counter() - started[0]
gc.callbacks.append(timed)
steps, gc_ms, collections = [], [], []
last = [time.perf_counter(), 0.0, [g["collections"] for g in gc.get_stats()]]
def on_batch(examples):
    now, counts = time.perf_counter(), [g["collections"] for g in gc.get_stats()]
    steps.append(now - last[0])
    gc_ms.append((seconds[0] - last[1]) * 1e3)
    collections.append([a - b for a, b in zip(counts, last[2])])
    last[:] = [time.perf_counter(), seconds[0], counts]
run_benchmark(WORKLOADS["small"].replace(device="CPU", iterations=int(sys.argv[1])),
              on_batch=on_batch)
warm = 3
print(json.dumps({"median_ms": statistics.median(steps[warm:]) * 1e3,
                  "gc_ms": statistics.median(gc_ms[warm:]),
                  "collections": [statistics.median(c[g] for c in collections[warm:])
                                  for g in range(3)]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--thresholds", default="700,5",
                        help="youngest generation's thresholds, comma-separated (default 700,5)")
    parser.add_argument("--runs", type=int, default=3, help="processes of each threshold")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    thresholds = [int(t) for t in args.thresholds.split(",") if t]
    if not thresholds or min(thresholds) < 1 or args.runs < 1 or args.steps < 5:
        parser.error("expected thresholds >= 1, --runs >= 1 and --steps >= 5")
    print(f"small workload, {args.steps} steps per process (median after 3), thresholds "
          f"{', '.join(map(str, thresholds))} in turn, {args.runs} process(es) of each")
    rows: dict[int, list[dict]] = {t: [] for t in thresholds}
    for run in range(args.runs):
        for threshold in thresholds:
            done = subprocess.run([sys.executable, "-c", CHILD, str(args.steps), str(threshold)],
                                  cwd=ROOT, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"child (threshold {threshold}) failed:\n{done.stderr[-2000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows[threshold].append(row)
            print(f"run {run + 1} threshold {threshold:4d}: step {row['median_ms']:6.1f} ms, "
                  f"collector {row['gc_ms']:5.2f} ms/step ({row['gc_ms'] / row['median_ms']:.1%}), "
                  f"collections/step {row['collections']}", flush=True)
    print()
    for threshold, got in rows.items():
        gc_ms = [r["gc_ms"] for r in got]
        print(f"threshold {threshold:4d}: collector {min(gc_ms):.2f}-{max(gc_ms):.2f} ms/step, "
              f"median step {statistics.median(r['median_ms'] for r in got):.1f} ms")


if __name__ == "__main__":
    main()
