"""A memory-bound call timed in pairs by two processes, as A/B sides: its arrays private to
each process, or in memory both processes share.

    python benchmarks/placement_pairs.py                       # both modes, 8 process pairs each
    python benchmarks/placement_pairs.py --modes shared --process-pairs 4

For each process pair this process starts two identical workers and drives
them in pairs of blocks, the order of each pair's two blocks drawn, one
block at a time (as the A/B controller does; no CPU pinning). A block is
the median per-call time of 20 rounds of ``numpy.add(a, b, out=o)`` on
512 KiB float32 arrays (``--kib``). Modes:

* ``private``: each worker allocates its three arrays once, in its own
  memory (what a per-op benchmark does now: one placement per process);
* ``shared``: the three arrays lie in one file under ``/dev/shm`` that both
  workers map, at an offset drawn for each pair, the same for its two
  blocks: both blocks of a pair read and write the same memory, and each
  pair is a new placement.

Per process pair it prints the median of the pairs' log ratios (B over A,
in %) and their standard deviation, after ``WARMUP_PAIRS`` discarded; then
the spread of those medians over the process pairs: the bias of a process
pair that an A/B session's design effect has to widen its intervals for
(docs/ab-statistics.md, "Where the bias of a memory-bound call comes
from"). It asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import mmap
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection

import numpy as np

PAGE = 4096
PAIRS = 48
WARMUP_PAIRS = 8
ROUNDS = 20


def _worker(conn: Connection, path: str, size: int, count: int) -> None:
    import numpy as np

    fd = os.open(path, os.O_RDWR)
    region = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
    shared = np.frombuffer(region, np.uint8)
    private = [np.full(count, 1.5, np.float32), np.full(count, 2.5, np.float32),
               np.zeros(count, np.float32)]
    stride = (count * 4 // PAGE + 1) * PAGE
    calls = 0  # per round, found on the first block
    while (order := conn.recv()) is not None:
        mode, offset = order
        if mode == "shared":
            a, b, out = (np.ndarray((count,), np.float32, shared, offset + k * stride)
                         for k in range(3))
            a[:], b[:] = 1.5, 2.5
        else:
            a, b, out = private
        np.add(a, b, out=out)
        if not calls:
            calls = 1
            while _round(a, b, out, calls) * calls * ROUNDS < 0.008 and calls < 1 << 16:
                calls *= 2
        conn.send(statistics.median(_round(a, b, out, calls) for _ in range(ROUNDS)))


def _round(a: np.ndarray, b: np.ndarray, out: np.ndarray, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        np.add(a, b, out=out)
    return (time.perf_counter() - start) / calls


def process_pair(mode: str, path: str, size: int, count: int, rng: random.Random) -> list[float]:
    """The log ratios B/A of one process pair's pairs, warm-up pairs left out."""
    ctx = mp.get_context("spawn")
    sides = []
    for _ in range(2):
        mine, theirs = ctx.Pipe()
        worker = ctx.Process(target=_worker, args=(theirs, path, size, count))
        worker.start()
        sides.append((worker, mine))
    stride = (count * 4 // PAGE + 1) * PAGE
    ratios = []
    try:
        for index in range(PAIRS):
            offset = rng.randrange(0, (size - 3 * stride) // PAGE) * PAGE
            got = {}
            for side in rng.sample([0, 1], 2):
                sides[side][1].send((mode, offset))
                got[side] = sides[side][1].recv()
            if index >= WARMUP_PAIRS:
                ratios.append(math.log(got[1] / got[0]))
    finally:
        for worker, conn in sides:
            conn.send(None)
            worker.join()
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", choices=("private", "shared"),
                        default=["private", "shared"])
    parser.add_argument("--process-pairs", type=int, default=8)
    parser.add_argument("--kib", type=int, default=512, help="size of each array, KiB")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    count = args.kib * 1024 // 4
    size = 256 << 20
    with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="opperf-placement-") as backing:
        os.ftruncate(backing.fileno(), size)
        for mode in args.modes:
            rng = random.Random(args.seed)
            medians = []
            for number in range(args.process_pairs):
                ratios = process_pair(mode, backing.name, size, count, rng)
                medians.append(100 * statistics.median(ratios))
                print(f"{mode} process pair {number}: B/A {medians[-1]:+.1f} %, pairs' sd "
                      f"{100 * statistics.stdev(ratios):.1f} %", flush=True)
            print(f"{mode}: the process pairs' medians from {min(medians):+.1f} to "
                  f"{max(medians):+.1f} %, sd {statistics.stdev(medians):.1f} %", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
