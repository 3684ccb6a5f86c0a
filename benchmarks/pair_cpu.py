"""Where a pair's two blocks run, and what it does to the pairs: two identical processes, A/A.

    python benchmarks/pair_cpu.py --trials 10 --modes free turn follow
    python benchmarks/pair_cpu.py --trials 25 --modes free --busy 1   # with one busy loop beside

Each trial starts two fresh processes that each time a small numpy call
(top-k of 8x102 floats, ~10-40 us) in blocks of 8 ms (the median of its
rounds, as an A/B side does), driven in pairs by this process in an order
drawn per pair, one block at a time. Modes, as in ``pytest_opperf.ab.controller``:

* ``free``: no pinning: each process runs where the scheduler puts it;
* ``turn``: both blocks of a pair pinned to one CPU, the CPUs in turn;
* ``follow``: the first block where the scheduler puts it, the second pinned
  to the CPU the first ended on (what the controller does).

Per trial it prints the median pair ratio B/A (a bias of one process over
the other for its whole life shows here) and the interquartile range of
the log pair ratios (the spread of the pairs); ``--busy N`` runs N busy
loops beside (the "other job"). It asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import random
import statistics
import time
from multiprocessing.connection import Connection

from pytest_opperf.ab.side import current_cpu

BLOCK_S = 0.008
WARMUP_PAIRS = 20


def _side(conn: Connection) -> None:
    import numpy as np

    x = np.random.default_rng(0).random((8, 102), dtype=np.float32)
    everywhere = os.sched_getaffinity(0)

    def call() -> object:
        idx = np.argsort(-x, axis=1)[:, :5]
        return np.take_along_axis(x, idx, 1)

    while (cpu := conn.recv()) is not None:
        if cpu >= 0:
            os.sched_setaffinity(0, {cpu})
        call()
        rounds = []
        end = time.perf_counter() + BLOCK_S
        while time.perf_counter() < end:
            start = time.perf_counter()
            for _ in range(30):
                call()
            rounds.append((time.perf_counter() - start) / 30)
        ended_on = current_cpu()
        if cpu >= 0:
            os.sched_setaffinity(0, everywhere)
        conn.send((statistics.median(rounds), ended_on))


def _busy() -> None:
    while True:
        pass


def trial(mode: str, pairs: int, cpus: list[int]) -> tuple[float, float]:
    """(median pair ratio B/A, interquartile range of the log pair ratios)."""
    context = mp.get_context("spawn")
    ends, processes = [], []
    for _ in range(2):
        mine, theirs = context.Pipe()
        process = context.Process(target=_side, args=(theirs,))
        process.start()
        ends.append(mine)
        processes.append(process)
    times: list[list[float]] = [[], []]
    for i in range(WARMUP_PAIRS + pairs):
        cpu = cpus[i % len(cpus)] if mode == "turn" else -1
        for side in random.sample([0, 1], 2):
            ends[side].send(cpu)
            per_call, ended_on = ends[side].recv()
            times[side].append(per_call)
            if mode == "follow" and cpu < 0 and ended_on in cpus:
                cpu = ended_on
    for end in ends:
        end.send(None)
    for process in processes:
        process.join()
    logs = [math.log(b / a) for a, b in zip(times[0][WARMUP_PAIRS:], times[1][WARMUP_PAIRS:],
                                            strict=True)]
    q1, _, q3 = statistics.quantiles(logs, n=4)
    return math.exp(statistics.median(logs)), q3 - q1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--modes", nargs="+", choices=["free", "turn", "follow"],
                        default=["free", "turn", "follow"])
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the trials")
    opts = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    busy = [mp.get_context("spawn").Process(target=_busy, daemon=True) for _ in range(opts.busy)]
    for process in busy:
        process.start()
    try:
        for mode in opts.modes:
            results = [trial(mode, opts.pairs, cpus) for _ in range(opts.trials)]
            ratios = [r for r, _ in results]
            print(f"{mode:6s} median pair ratio per trial: "
                  f"{' '.join(f'{r:.3f}' for r in ratios)}; range {min(ratios):.3f}-"
                  f"{max(ratios):.3f}; IQR of log pair ratios, median over trials "
                  f"{statistics.median(i for _, i in results):.3f}", flush=True)
    finally:
        for process in busy:
            process.terminate()


if __name__ == "__main__":
    main()
