"""The machine's own noise: how much two neighbouring runs of the same pure-Python block differ.

An A/B pair of e2e steps can be no tighter than two neighbouring runs of one fixed piece of work on
the same machine. This script times a pure-Python loop (no allocation, no BLAS, no threads) back to
back, in wall time and in the thread's CPU time, and prints per block length the standard
deviation of ``log(t[i+1] / t[i])`` over disjoint neighbouring pairs and the spread of the blocks
(the 5th and 95th percentiles over the median). When the CPU time is as noisy as the wall time,
the noise is the CPU's speed (frequency, a neighbour on the host), not the scheduler: no placement
or priority of the process removes it, only more pairs do.

    python benchmarks/machine_noise.py                       # blocks of 25, 100 and 350 ms
    python benchmarks/machine_noise.py --ms 350 --blocks 80

It asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time


def _loop(n: int) -> None:
    total = 0
    for i in range(n):
        total += i


def _calibrate(ms: float) -> int:
    """The loop count that takes about ``ms`` milliseconds here."""
    n = 100_000
    start = time.perf_counter()
    _loop(n)
    took = time.perf_counter() - start
    return max(1000, int(n * ms / 1000 / took))


def _spread(times: list[float]) -> tuple[float, float, float]:
    logs = [math.log(times[i + 1] / times[i]) for i in range(0, len(times) - 1, 2)]
    ordered = sorted(times)
    mid = statistics.median(ordered)
    low = ordered[int(0.05 * (len(ordered) - 1))] / mid
    high = ordered[int(0.95 * (len(ordered) - 1))] / mid
    return statistics.pstdev(logs), low, high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ms", type=float, nargs="+", default=[25.0, 100.0, 350.0],
                        help="block lengths (ms)")
    parser.add_argument("--blocks", type=int, default=60, help="blocks per length")
    args = parser.parse_args()
    for ms in args.ms:
        n = _calibrate(ms)
        wall, cpu = [], []
        for _ in range(args.blocks):
            w, c = time.perf_counter(), time.thread_time()
            _loop(n)
            wall.append(time.perf_counter() - w)
            cpu.append(time.thread_time() - c)
        for name, times in (("wall", wall), ("cpu", cpu)):
            sd, low, high = _spread(times)
            median = 1e3 * statistics.median(times)
            print(f"{ms:6.0f} ms blocks, {name:4}: median {median:7.1f} ms, "
                  f"neighbour sd {sd:.3f}, 5-95 % of the median {low:.2f}-{high:.2f}")


if __name__ == "__main__":
    main()
