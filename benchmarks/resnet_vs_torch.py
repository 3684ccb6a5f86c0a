"""CPU training-step time of the reference framework's ResNet against the same network in PyTorch.

    python benchmarks/resnet_vs_torch.py [--batch_size 8] [--image_size 224] [--depth 50]
                                         [--steps 5] [--pause 1.0] [--profile]

Both sides train the same ResNet (built by hand in torch: bottleneck v1.5, no
conv bias, batch norm, 3x3/2 max-pooled stem, global average pooling, fc;
parameter counts are checked equal) on the same batch of synthetic Flowers
images with SGD + momentum (lr 0.01, mu 0.9). A step is forward, loss,
backward and update, with the loss read back. Steps are interleaved - torch,
ours with the report's executor, ours with every executor overhead off - with
a pause between them, so that a busy neighbour or a warming CPU affects all
three alike; the medians are printed. ``--profile`` then runs ``--steps`` more
steps of ours without overheads and prints their Stat= table.

Needs torch (CPU build: pip install torch --index-url https://download.pytorch.org/whl/cpu).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from tabulate import tabulate

import reference_framework as rf
from pytest_opperf import timers
from reference_framework import layers
from reference_framework.models.resnet import DEPTHS, bottleneck

LR, MU = 0.01, 0.9
CLASSES = 102


def batch(size: int, image_size: int) -> tuple[np.ndarray, np.ndarray]:
    data = next(iter(rf.batch(rf.dataset.flowers.train(image_size=image_size, seed=0),
                              batch_size=size)()))
    images = np.stack([x.reshape(3, image_size, image_size) for x, _ in data]).astype(np.float32)
    labels = np.array([[y] for _, y in data], dtype=np.int64)
    return images, labels


def ours(images: np.ndarray, labels: np.ndarray, depth: int,
         no_overheads: bool) -> tuple[Callable[[], float], int]:
    """A training step of the reference framework, and its parameter count."""
    main, startup, scope = rf.Program(), rf.Program(), rf.Scope()
    with rf.unique_name_guard(), rf.program_guard(main, startup):
        image = layers.data("data", list(images.shape[1:]))
        label = layers.data("label", [1], "int64")
        loss = layers.mean(layers.cross_entropy(rf.models.resnet(image, CLASSES, depth), label))
        rf.optimizer.Momentum(learning_rate=LR, momentum=MU).minimize(loss)
    exe = rf.Executor(rf.CPUPlace(), cache_ops=no_overheads, reuse_local_scope=no_overheads)
    exe.run(startup, scope=scope)
    feed = {"data": images, "label": labels}

    def step() -> float:
        return float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope,
                             use_program_cache=no_overheads)[0][0])

    params = sum(math.prod(p.shape) for p in main.global_block().all_parameters())
    return step, params


def torch_resnet(torch, depth: int):
    """The same ResNet in torch, built by hand (torchvision is not assumed)."""
    from torch import nn  # imported by the caller already
    stages, block = DEPTHS[depth]
    if block is not bottleneck:
        raise SystemExit(f"--depth {depth}: only the bottleneck depths (50, 101, 152) are built in "
                         "torch here")

    def conv_bn(cin: int, cout: int, k: int, stride: int = 1, relu: bool = True) -> list:
        mods = [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
                nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)]
        return mods + [nn.ReLU()] if relu else mods

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, ch: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(*conv_bn(cin, ch, 1), *conv_bn(ch, ch, 3, stride),
                                      *conv_bn(ch, ch * 4, 1, relu=False))
            self.short = (nn.Sequential(*conv_bn(cin, ch * 4, 1, stride, relu=False))
                          if cin != ch * 4 or stride != 1 else nn.Identity())

        def forward(self, x):
            return torch.relu(self.short(x) + self.body(x))

    mods = [*conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, (blocks, ch) in enumerate(zip(stages, (64, 128, 256, 512), strict=True)):
        for i in range(blocks):
            mods.append(Bottleneck(cin, ch, 2 if stage > 0 and i == 0 else 1))
            cin = ch * 4
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, CLASSES)]
    return nn.Sequential(*mods)


def theirs(torch, images: np.ndarray, labels: np.ndarray,
           depth: int) -> tuple[Callable[[], float], int]:
    torch.manual_seed(0)
    model = torch_resnet(torch, depth).train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MU)
    x, y = torch.from_numpy(images), torch.from_numpy(labels.reshape(-1))
    loss_fn = torch.nn.functional.cross_entropy  # log-softmax + NLL: our softmax + cross_entropy

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.item())

    return step, sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--depth", type=int, default=50, choices=[50, 101, 152])
    p.add_argument("--steps", type=int, default=5, help="measured steps per side (default 5)")
    p.add_argument("--warmup", type=int, default=1,
                   help="unmeasured first steps per side (default 1)")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between steps (default 1.0)")
    p.add_argument("--profile", action="store_true",
                   help="then time --steps more of our steps and print their Stat= table")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("resnet_vs_torch: torch is not installed; pip install torch --index-url "
              "https://download.pytorch.org/whl/cpu", file=sys.stderr)
        return 1

    images, labels = batch(args.batch_size, args.image_size)
    sides: dict[str, Callable[[], float]] = {}
    sides["torch"], torch_params = theirs(torch, images, labels, args.depth)
    sides["ours, report's executor"], params = ours(images, labels, args.depth, no_overheads=False)
    sides["ours, no executor overheads"], _ = ours(images, labels, args.depth, no_overheads=True)
    if params != torch_params:
        raise SystemExit(f"the two networks differ: ours has {params} parameters, torch's "
                         f"{torch_params}")

    times: dict[str, list[float]] = {name: [] for name in sides}
    losses: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(args.warmup + args.steps):
        for name, step in sides.items():
            time.sleep(args.pause)
            start = time.perf_counter()
            losses[name].append(step())
            if i >= args.warmup:
                times[name].append(time.perf_counter() - start)

    base = statistics.median(times["torch"])
    rows = [(name, statistics.median(t), min(t), args.batch_size / statistics.median(t),
             statistics.median(t) / base, " ".join(f"{v:.3f}" for v in losses[name][:4]))
            for name, t in times.items()]
    print(f"ResNet-{args.depth}, batch {args.batch_size}, {args.image_size}x{args.image_size}, "
          f"{CLASSES} classes, {params} parameters; {args.steps} measured steps each (after "
          f"{args.warmup} warm-up), "
          "interleaved, "
          f"{args.pause:g} s pauses; torch {torch.__version__} with {torch.get_num_threads()} "
          "threads, "
          f"numpy {np.__version__}")
    print(tabulate(rows, headers=["", "median s/step", "min s/step", "images/s", "x torch",
                                  "first losses"], floatfmt=".3f"))
    if args.profile:
        step = sides["ours, no executor overheads"]
        with timers.recording() as table:
            for _ in range(args.steps):
                step()
        print(f"\nour Stat= table over {args.steps} more steps (no executor overheads, no pauses), "
              "unit: ms")
        print("\n".join(timers.format_stat_lines(table)))
    return 0

if __name__ == "__main__":
    sys.exit(main())
