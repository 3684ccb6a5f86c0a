"""Benchmark: conv2d forward + conv2d_grad at every distinct ResNet-50 conv shape.

Times the reference framework's conv2d followed by conv2d_grad (Input@GRAD and
Filter@GRAD) on the CPU and, when PyTorch is installed (the optional ``peer``
extra, CPU build), ``torch.nn.functional.conv2d`` forward plus autograd
backward for input and weight, interleaved shape by shape. Prints the table,
the geometric-mean and worst ratio ours/PyTorch, and the peak memory of the
largest conv (the 7x7 stem) forward + grad at batch 32.

    python benchmarks/conv_bench.py [--batch 8] [--repeats 7] [--pause 0.2]
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np
from tabulate import tabulate

import reference_framework as rf
from reference_framework.ops.conv import conv_output_size, release_workspace

torch: ModuleType | None
try:
    import torch
except ImportError:  # the peer is optional
    torch = None

# ResNet-50 (the "v1.5" bottleneck: the stage stride sits on the 3x3 conv).
STAGES = (3, 4, 6, 3)
WIDTHS = (64, 128, 256, 512)
EXPANSION = 4


@dataclass(frozen=True)
class ConvShape:
    c: int
    size: int  # input height = width
    oc: int
    k: int
    stride: int
    padding: int

    @property
    def out(self) -> int:
        return conv_output_size(self.size, self.k, self.stride, self.padding, 1)

    def label(self) -> str:
        return f"{self.k}x{self.k}/{self.stride} {self.c}->{self.oc} @{self.size}"

    def flops(self, batch: int) -> float:
        """Forward FLOPs; forward + both gradients is three times as many."""
        return 2.0 * batch * self.oc * self.out ** 2 * self.c * self.k ** 2


def resnet50_convs(image: int = 224) -> list[ConvShape]:
    """Every conv of ResNet-50, in network order."""
    convs = [ConvShape(3, image, 64, 7, 2, 3)]
    size = conv_output_size(image, 7, 2, 3, 1)
    size = (size + 2 - 3) // 2 + 1  # the 3x3/2 max pool, padding 1
    c = 64
    for stage, (blocks, width) in enumerate(zip(STAGES, WIDTHS, strict=True)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            out_size = conv_output_size(size, 3, stride, 1, 1)
            convs += [ConvShape(c, size, width, 1, 1, 0),
                      ConvShape(width, size, width, 3, stride, 1),
                      ConvShape(width, out_size, width * EXPANSION, 1, 1, 0)]
            if block == 0:  # projection shortcut
                convs.append(ConvShape(c, size, width * EXPANSION, 1, stride, 0))
            c, size = width * EXPANSION, out_size
    return convs


def distinct(convs: list[ConvShape]) -> list[tuple[ConvShape, int]]:
    """The distinct shapes in order of first use, with how often each is used."""
    uses: dict[ConvShape, int] = {}
    for s in convs:
        uses[s] = uses.get(s, 0) + 1
    return list(uses.items())


def _attrs(s: ConvShape) -> dict:
    return {"strides": [s.stride] * 2, "paddings": [s.padding] * 2}


def _inputs(s: ConvShape, batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, s.c, s.size, s.size), dtype=np.float32)
    w = rng.standard_normal((s.oc, s.c, s.k, s.k), dtype=np.float32) * np.float32(0.05)
    dy = rng.standard_normal((batch, s.oc, s.out, s.out), dtype=np.float32)
    return x, w, dy


def ours(s: ConvShape, batch: int) -> Callable[[], None]:
    x, w, dy = _inputs(s, batch)
    attrs = _attrs(s)

    def step() -> None:
        rf.run_op("conv2d", {"Input": x, "Filter": w}, attrs)
        rf.run_op("conv2d_grad", {"Input": x, "Filter": w, "Output@GRAD": dy}, attrs)
    return step


def peer(s: ConvShape, batch: int) -> Callable[[], None]:
    if torch is None:
        raise RuntimeError("conv_bench: the peer needs torch")
    x, w, dy = (torch.from_numpy(a) for a in _inputs(s, batch))
    x.requires_grad_(True)
    w.requires_grad_(True)
    functional = torch.nn.functional

    def step() -> None:
        x.grad = w.grad = None
        functional.conv2d(x, w, stride=s.stride, padding=s.padding).backward(dy)
    return step


def _time_ms(step: Callable[[], None], pause: float) -> float:
    # BLAS/OpenMP worker threads spin for ~0.1 s after a call and slow down
    # whatever runs next on the two cores: let the other side's go to sleep
    # first. Then one untimed call wakes this side's threads: waking a sleeping
    # pool costs milliseconds on this VM (torch's 1x1 64->64 conv took 41 ms
    # after a 0.2 s pause, 13 ms back to back), and a training step runs its
    # ops back to back, warm.
    time.sleep(pause)
    step()
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1e3


def measure(shapes: list[tuple[ConvShape, int]], batch: int, repeats: int,
            pause: float) -> list[dict]:
    rows = []
    for s, uses in shapes:
        steps = {"ours": ours(s, batch)}
        if torch is not None:
            steps["torch"] = peer(s, batch)
        for step in steps.values():
            step()  # warm-up: workspace, oneDNN primitives
        times: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(repeats):
            for name, step in steps.items():
                times[name].append(_time_ms(step, pause))
        row = {"shape": s, "uses": uses,
               **{name: statistics.median(t) for name, t in times.items()}}
        rows.append(row)
        print(f"  {s.label():<24} " + "  ".join(f"{n} {row[n]:8.2f} ms" for n in steps), flush=True)
    return rows


def stem_peak_memory_mib(batch: int) -> tuple[float, float]:
    """Peak memory of the stem's forward + grad beyond its inputs, in MiB: what
    tracemalloc saw numpy allocate, and the growth of the process's max RSS
    (meaningful when nothing larger ran before in this process)."""
    step = ours(resnet50_convs()[0], batch)  # inputs are allocated outside the measurement
    release_workspace()  # count the scratch buffers too
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before  # KiB on Linux
    release_workspace()
    return peak / 2**20, rss_growth / 2**10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7,
                        help="timed runs per shape and framework (median)")
    parser.add_argument("--pause", type=float, default=0.2,
                        help="seconds of rest before each timed run")
    parser.add_argument("--memory-batch", type=int, default=32,
                        help="batch of the stem peak-memory run (0: skip)")
    args = parser.parse_args()

    if args.memory_batch:  # first, while the process's max RSS is still low
        traced, rss = stem_peak_memory_mib(args.memory_batch)
        memory = (f"peak memory, stem 7x7/2 3->64 forward + grad at batch {args.memory_batch}: "
                  f"{traced:.0f} MiB allocated above its inputs (tracemalloc), max RSS grew "
                  f"{rss:.0f} MiB")
        print(memory)
    shapes = distinct(resnet50_convs())
    print(f"conv2d + conv2d_grad, float32, batch {args.batch}, {len(shapes)} distinct ResNet-50 "
          "shapes, "
          f"median of {args.repeats}; peer: "
          f"{'torch ' + torch.__version__ if torch else 'not installed'}")
    rows = measure(shapes, args.batch, args.repeats, args.pause)
    table = []
    for r in rows:
        s = r["shape"]
        gflops = 3 * s.flops(args.batch) / (r["ours"] / 1e3) / 1e9
        peer_cols = [r["torch"], r["ours"] / r["torch"]] if torch else ["-", "-"]
        table.append([s.label(), r["uses"], r["ours"], *peer_cols, gflops])
    print(tabulate(table, headers=["shape", "uses", "ours ms", "PyTorch ms", "ratio",
                                   "our GFLOP/s"], floatfmt=".2f"))
    total = sum(r["ours"] * r["uses"] for r in rows)
    print(f"ours, all {sum(r['uses'] for r in rows)} convs of one ResNet-50 step at batch "
          f"{args.batch}: {total:.0f} ms")
    if torch:
        ratios = [r["ours"] / r["torch"] for r in rows]
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        worst = max(zip(ratios, rows, strict=True), key=lambda t: t[0])
        print(f"geometric-mean ratio ours/PyTorch: {geomean:.2f} (target <= 1.3)")
        print(f"worst ratio: {worst[0]:.2f} at {worst[1]['shape'].label()} (target <= 2.0)")
    if args.memory_batch:
        print(memory)


if __name__ == "__main__":
    main()
