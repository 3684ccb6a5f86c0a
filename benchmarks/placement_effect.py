"""Where a memory-bound call's arrays lie in memory, and what it does to its time.

    python benchmarks/placement_effect.py                        # 512 KiB and 128 KiB arrays
    python benchmarks/placement_effect.py --kib 512 --vary out   # only the output moves
    python benchmarks/placement_effect.py --kib 512 --huge       # on transparent huge pages
    python benchmarks/placement_effect.py --processes --kib 512  # two processes, as A/B sides

In one process (the default), a trial allocates two *placements* of
``numpy.add(a, b, out=o)``: two sets of fresh buffers (``--vary``: all three
arrays, the output only or the inputs only; the rest shared), each array at
the same offset within its page (``--huge``: within its 2 MiB huge page, in a
private anonymous mapping advised ``MADV_HUGEPAGE``). Then it times the two
in interleaved blocks of about 8 ms (the median of each block's rounds, as an
A/B side does), the order alternating, and prints the median ratio of the
pairs (placement 2 over 1) and their standard deviation. Earlier buffers stay
allocated, so every placement is new memory. Everything but where the arrays
lie is the same for the two placements: a ratio away from 1 with a small
spread of the pairs is the placement alone, drawn once per allocation, and
so once per process for a benchmark that allocates its arrays once.

With ``--processes``, each *process pair* is two fresh identical worker
processes that this one drives in pairs of blocks, the order of each pair's
two blocks drawn, one block at a time (as the A/B controller does; no CPU
pinning). ``--modes``: ``private``, each worker's own arrays, allocated once
(what a per-op benchmark has now: one placement per process); ``shared``,
the three arrays in one file under ``/dev/shm`` that both workers map, at an
offset drawn for each pair, the same for its two blocks (both blocks of a
pair read and write the same memory, and each pair is a new placement). Per
process pair it prints the median of the pairs' log ratios (B over A, in %)
and their standard deviation, then the spread of those medians: the bias of
a process pair that an A/B session's design effect widens its intervals for.

docs/ab-statistics.md, "Where the bias of a memory-bound call comes from". It
asserts nothing.
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
from typing import Any

import numpy as np

PAGE = 4096
HUGE_PAGE = 2 << 20
BLOCK_S = 0.008
PAIRS = 40
ROUNDS = 20
WARMUP_PAIRS = 8  # a process pair's first pairs, left out
SHARED_SIZE = 256 << 20


class Arena:
    """Fresh buffers for arrays of ``nbytes``, each starting on a page (or a huge page), kept
    alive until the end so that no later buffer reuses their memory."""

    def __init__(self, nbytes: int, huge: bool) -> None:
        self.nbytes, self.huge = nbytes, huge
        self.kept: list[Any] = []

    def array(self) -> np.ndarray:
        count = self.nbytes // 4
        if not self.huge:
            raw = np.empty(self.nbytes + PAGE, np.uint8)
            self.kept.append(raw)
            return np.ndarray((count,), np.float32, raw, -raw.ctypes.data % PAGE)
        size = (self.nbytes // HUGE_PAGE + 2) * HUGE_PAGE
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
        raw = np.frombuffer(region, np.uint8)
        self.kept.append((region, raw))
        return np.ndarray((count,), np.float32, raw, -raw.ctypes.data % HUGE_PAGE)


def placement(arena: Arena, shared: list[np.ndarray], vary: str) -> list[np.ndarray]:
    """``[a, b, out]``: fresh buffers where ``vary`` says, ``shared``'s elsewhere."""
    fresh = [arena.array() for _ in range(3)]
    fresh[0][:], fresh[1][:], fresh[2][:] = 1.5, 2.5, 0.0
    if vary == "out":
        return [shared[0], shared[1], fresh[2]]
    if vary == "in":
        return [fresh[0], fresh[1], shared[2]]
    return fresh


def block(arrays: list[np.ndarray], calls: int) -> float:
    """The median per-call time of ``ROUNDS`` rounds of ``calls`` calls."""
    a, b, out = arrays
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(calls):
            np.add(a, b, out=out)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def calls_per_round(arrays: list[np.ndarray]) -> int:
    """The calls per round that make a block last ``BLOCK_S`` at least (a warm-up call first)."""
    block(arrays, 1)
    calls = 1
    while block(arrays, calls) * calls * ROUNDS < BLOCK_S and calls < 1 << 16:
        calls *= 2
    return calls


def trial(one: list[np.ndarray], two: list[np.ndarray], calls: int) -> tuple[float, float]:
    """The median and standard deviation of ``PAIRS`` pair ratios two/one, the order of each
    pair's blocks alternating."""
    ratios = []
    for i in range(PAIRS):
        if i % 2:
            first, second = block(one, calls), block(two, calls)
        else:
            second, first = block(two, calls), block(one, calls)
        ratios.append(second / first)
    return statistics.median(ratios), statistics.stdev(ratios)


def measure(kib: int, vary: str, huge: bool, trials: int) -> tuple[list[float], int | None]:
    """The trials' median ratios, and the process's huge pages (kB) while they are mapped."""
    arena = Arena(kib * 1024, huge)
    shared = placement(arena, [], "all")
    calls = calls_per_round(shared)
    medians = []
    for index in range(trials):
        ratio, spread = trial(placement(arena, shared, vary), placement(arena, shared, vary), calls)
        medians.append(ratio)
        print(f"  trial {index}: placement 2 / 1 {ratio:.3f}, pairs' sd {spread:.3f}", flush=True)
    return medians, huge_kib()


def huge_kib() -> int | None:
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _worker(conn: Connection, path: str, count: int) -> None:
    """A side of ``--processes``: a block on each ``(mode, offset)`` received, until ``None``."""
    region = mmap.mmap(os.open(path, os.O_RDWR), SHARED_SIZE, flags=mmap.MAP_SHARED)
    shared = np.frombuffer(region, np.uint8)
    private = [np.full(count, 1.5, np.float32), np.full(count, 2.5, np.float32),
               np.zeros(count, np.float32)]
    stride = (count * 4 // PAGE + 1) * PAGE
    calls = 0  # per round, found on the first block
    while (order := conn.recv()) is not None:
        mode, offset = order
        arrays = private
        if mode == "shared":
            arrays = [np.ndarray((count,), np.float32, shared, offset + k * stride)
                      for k in range(3)]
            arrays[0][:], arrays[1][:] = 1.5, 2.5
        calls = calls or calls_per_round(arrays)
        conn.send(block(arrays, calls))


def process_pair(mode: str, path: str, count: int, rng: random.Random) -> list[float]:
    """The log ratios B/A of one process pair's pairs, its warm-up pairs left out."""
    context = mp.get_context("spawn")
    sides = []
    for _ in range(2):
        mine, theirs = context.Pipe()
        worker = context.Process(target=_worker, args=(theirs, path, count))
        worker.start()
        sides.append((worker, mine))
    stride = (count * 4 // PAGE + 1) * PAGE
    ratios = []
    try:
        for index in range(WARMUP_PAIRS + PAIRS):
            offset = rng.randrange(0, (SHARED_SIZE - 3 * stride) // PAGE) * PAGE
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


def processes(kib: int, modes: list[str], pairs_of_processes: int, seed: int) -> None:
    """``--processes``: each mode's process pairs, their medians and the spread of those."""
    with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="opperf-placement-") as backing:
        os.ftruncate(backing.fileno(), SHARED_SIZE)
        for mode in modes:
            rng = random.Random(seed)
            medians = []
            for number in range(pairs_of_processes):
                ratios = process_pair(mode, backing.name, kib * 1024 // 4, rng)
                medians.append(100 * statistics.median(ratios))
                print(f"{mode} process pair {number}: B/A {medians[-1]:+.1f} %, pairs' sd "
                      f"{100 * statistics.stdev(ratios):.1f} %", flush=True)
            print(f"{mode}: the process pairs' medians from {min(medians):+.1f} to "
                  f"{max(medians):+.1f} %, sd {statistics.stdev(medians):.1f} %", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kib", type=int, nargs="+", default=[512, 128],
                        help="size of each of the three float32 arrays, KiB")
    parser.add_argument("--vary", choices=("all", "out", "in"), default="all",
                        help="which arrays each placement allocates afresh")
    parser.add_argument("--huge", action="store_true",
                        help="arrays on transparent huge pages (MADV_HUGEPAGE)")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--processes", action="store_true",
                        help="two processes driven like A/B sides (--modes, --process-pairs)")
    parser.add_argument("--modes", nargs="+", choices=("private", "shared"),
                        default=["private", "shared"])
    parser.add_argument("--process-pairs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.processes:
        for kib in args.kib:
            processes(kib, args.modes, args.process_pairs, args.seed)
        return 0
    for kib in args.kib:
        print(f"numpy.add of {kib} KiB float32 arrays, vary {args.vary}"
              f"{', huge pages' if args.huge else ''}:")
        medians, huge = measure(kib, args.vary, args.huge, args.trials)
        print(f"  {len(medians)} trials: placement 2 / 1 from {min(medians):.3f} to "
              f"{max(medians):.3f}")
        if args.huge:
            print(f"  AnonHugePages of this process: {huge} kB (0: the kernel gave none)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
