"""The reference report's ResNet training benchmark: ``python -m reference_framework.benchmark``.

:func:`run_benchmark` is the report's ``run_benchmark`` loop: the clock starts
before the model is built, so building, the startup program and reading
count; then per pass ``accuracy.reset``, and per batch the per-sample
conversion to arrays, ``exe.run(main, feed, fetch_list=[avg_cost] +
accuracy.metrics)``, ``accuracy.eval`` and a progress line. It opens no timing
recording: :func:`main` opens one around it (CUDA events on a GPU) and prints
the report's ``Stat=`` table and Python share; the e2e pytest suite wraps it
in its own measured window and ends a step in ``on_batch``.

Sizes (:data:`WORKLOADS`): ``full`` is the report's run (batch 32, 224x224,
80 iterations, 102 classes), ``small`` fits CPU CI, ``tiny`` takes seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import resource
except ImportError:  # not a Unix
    resource = None  # type: ignore[assignment]

from pytest_opperf import timers
from pytest_opperf.stattree import Shares, StatTree

from . import layers
from .backend import (
    CPUPlace,
    CudaEventClock,
    CUDAPlace,
    Place,
    device_name,
    gpu_available,
    gpu_unavailable_reason,
)
from .data import batch, dataset, reader
from .evaluator import Accuracy
from .executor import Executor
from .framework import Program, Variable, program_guard, unique_name_guard
from .models.resnet import DEPTHS, resnet
from .optimizer import Momentum
from .scope import Scope, scope_guard

__all__ = [
    "WORKLOADS",
    "BenchmarkConfig",
    "BenchmarkResult",
    "TrainingProgram",
    "build_training_program",
    "main",
    "python_share",
    "run_benchmark",
]


@dataclass(frozen=True)
class BenchmarkConfig:
    """One benchmark run; the defaults are the reference report's run."""

    batch_size: int = 32
    iterations: int = 80  # batches in all, over every pass
    pass_num: int = 1
    image_size: int = 224
    depth: int = 50
    class_dim: int = 102
    stem_pool: str = "max"
    device: str = "CPU"  # CPU | GPU
    order: str = "NCHW"
    learning_rate: float = 0.01
    momentum: float = 0.9
    buf_size: int = 5120  # the shuffle buffer
    seed: int = 0  # weights, data and shuffling
    use_program_cache: bool = False  # the executor overheads; all off = the report's executor
    cache_ops: bool = False
    reuse_local_scope: bool = False

    def __post_init__(self) -> None:
        for name in ("batch_size", "iterations", "pass_num", "image_size", "class_dim", "buf_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"benchmark: {name} must be a positive int, given {value!r}")
        if self.device not in ("CPU", "GPU"):
            raise ValueError(f"benchmark: device must be 'CPU' or 'GPU', given {self.device!r}")
        if self.order != "NCHW":
            raise ValueError(f"benchmark: order {self.order!r} is not supported; the reference "
                             "framework's conv2d, pool2d and batch_norm take NCHW only")
        if self.depth not in DEPTHS:
            raise ValueError(f"benchmark: depth must be one of {sorted(DEPTHS)}, "
                             f"given {self.depth!r}")
        if self.stem_pool not in ("max", "avg"):
            raise ValueError(f"benchmark: stem_pool must be 'max' or 'avg', "
                             f"given {self.stem_pool!r}")
        if self.class_dim > dataset.flowers.classes:
            raise ValueError(f"benchmark: class_dim must be at most the dataset's "
                             f"{dataset.flowers.classes} classes, given {self.class_dim}")

    def replace(self, **changes: Any) -> BenchmarkConfig:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def no_overheads(self) -> BenchmarkConfig:
        """The same run with every avoidable executor overhead switched off."""
        return self.replace(use_program_cache=True, cache_ops=True, reuse_local_scope=True)


WORKLOADS: dict[str, BenchmarkConfig] = {
    "tiny": BenchmarkConfig(batch_size=4, image_size=32, iterations=3),
    "small": BenchmarkConfig(batch_size=8, image_size=64, iterations=10),
    "full": BenchmarkConfig(),
}


@dataclass
class BenchmarkResult:
    """What one run measured, plus the per-batch loss and accuracies."""

    config: BenchmarkConfig
    device: str
    examples: int
    batches: int
    wall_s: float
    losses: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)  # per batch
    pass_accuracies: list[float] = field(default_factory=list)  # per batch, over its pass so far
    # trains one more batch after the run (for a counting pass); set by run_benchmark
    extra_step: Callable[[], int] | None = field(default=None, repr=False, compare=False)

    @property
    def examples_per_sec(self) -> float:
        return self.examples / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def sec_per_batch(self) -> float:
        # Per batch: the report's "sec/batch" divided by the batch size instead.
        return self.wall_s / self.batches if self.batches else 0.0


def place_of(config: BenchmarkConfig) -> Place:
    return CUDAPlace(0) if config.device == "GPU" else CPUPlace()


@dataclass
class TrainingProgram:
    """The benchmark's programs and the variables its loop feeds and fetches."""

    main: Program
    startup: Program
    avg_cost: Variable
    accuracy: Accuracy
    image_shape: list[int]  # one sample, CHW


def build_training_program(config: BenchmarkConfig) -> TrainingProgram:
    """ResNet with cross-entropy loss, Momentum and an Accuracy evaluator, as the
    report's script built it (names are unique within the returned programs)."""
    dshape = [3, config.image_size, config.image_size]
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = config.seed
    with unique_name_guard(), program_guard(main, startup):
        image = layers.data("data", dshape, "float32")
        label = layers.data("label", [1], "int64")
        predict = resnet(image, config.class_dim, config.depth, config.stem_pool)
        cost = layers.cross_entropy(predict, label)
        avg_cost = layers.mean(cost)
        Momentum(learning_rate=config.learning_rate, momentum=config.momentum).minimize(avg_cost)
        accuracy = Accuracy(input=predict, label=label)
    return TrainingProgram(main, startup, avg_cost, accuracy, dshape)


def run_benchmark(config: BenchmarkConfig, on_batch: Callable[[int], None] | None = None,
                  log: Callable[[str], None] | None = None,
                  on_build: Callable[[Program], None] | None = None) -> BenchmarkResult:
    """Build, initialise and train ResNet on the synthetic Flowers data as the
    reference report's script did. ``on_build(main_program)`` is called once the
    training program is built; ``on_batch(examples)`` after each batch (after
    ``accuracy.eval``); ``log`` gets the progress lines. The result's
    ``extra_step()`` trains one more batch afterwards (a counting pass's step)."""
    place = place_of(config)
    start = time.perf_counter()
    scope = Scope()
    with scope_guard(scope):
        built = build_training_program(config)
        main, avg_cost, accuracy = built.main, built.avg_cost, built.accuracy
        dshape = built.image_shape
        if on_build is not None:
            on_build(main)

        train_reader = batch(
            reader.shuffle(dataset.flowers.train(image_size=config.image_size, seed=config.seed),
                           buf_size=config.buf_size, seed=config.seed),
            batch_size=config.batch_size)
        exe = Executor(place, cache_ops=config.cache_ops,
                       reuse_local_scope=config.reuse_local_scope)
        exe.run(built.startup)

        def train(data: list[Any]) -> tuple[Any, Any, Any, int]:
            images = np.array([x[0].reshape(dshape) for x in data]).astype("float32")
            labels = np.array([x[1] for x in data]).astype("int64").reshape([-1, 1])
            loss, acc = exe.run(main, feed={"data": images, "label": labels},
                                fetch_list=[avg_cost] + accuracy.metrics,
                                use_program_cache=config.use_program_cache)
            return loss, acc, accuracy.eval(exe), len(labels)

        result = BenchmarkResult(config, device_name(place), 0, 0, 0.0)
        batches: Any = iter(())  # the pass's batches, which the extra steps go on with
        for _ in range(config.pass_num):
            accuracy.reset(exe)
            if result.batches == config.iterations:
                break
            batches = iter(train_reader())
            for data in batches:
                if result.batches == config.iterations:
                    break
                loss, acc, pass_acc, examples = train(data)
                result.losses.append(float(loss[0]))
                result.accuracies.append(float(acc[0]))
                result.pass_accuracies.append(float(pass_acc[0]))
                if log is not None:
                    log(f"Iter: {result.batches}, loss: {loss}, acc: {acc}, pass_acc: {pass_acc}")
                result.examples += examples
                result.batches += 1
                if on_batch is not None:
                    on_batch(examples)

    ahead: list[Any] = [batches]

    def extra_step() -> int:
        """The next batch of the reader, as the loop would have taken it (a new pass when the
        pass is over: its first batch also fills the shuffle buffer again)."""
        with scope_guard(scope):
            data = next(ahead[0], None)
            if data is None:
                ahead[0] = iter(train_reader())
                data = next(ahead[0])
            return train(data)[3]

    result.extra_step = extra_step
    result.wall_s = time.perf_counter() - start
    return result


def _shares(wall_s: float, table: timers.Table) -> Shares:
    """Shares of wall time; Python = (wall - ExecutorRunTimer) / wall, the report's share."""
    tree = StatTree.from_table(table)
    executor = tree.get("ExecutorRunTimer")
    return Shares.of(wall_s * 1e3, executor.total_ms if executor else 0.0, tree.kernel_ms)


def python_share(wall_s: float, table: timers.Table) -> float:
    """(wall - ExecutorRunTimer) / wall: the report's share of time outside the executor."""
    return _shares(wall_s, table).python


def report_lines(result: BenchmarkResult, table: timers.Table) -> list[str]:
    """The report's summary: totals, throughput, the Stat= table and the shares."""
    wall = result.wall_s
    executor_s = table["ExecutorRunTimer"].total_ms / 1e3 if "ExecutorRunTimer" in table else 0.0
    split = _shares(wall, table)
    return [
        f"Total examples: {result.examples}, total time: {wall:.5f} sec",
        f"{result.examples_per_sec:.5f} examples/sec, {result.sec_per_batch:.5f} sec/batch",
        "",
        "unit: ms",
        *timers.format_stat_lines(table),
        "",
        f"Python share: (wall - ExecutorRunTimer) / wall = ({wall:.5f} - {executor_s:.5f}) / "
        f"{wall:.5f} = {100 * split.python:.2f} %",
        split.line(),
    ]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m reference_framework.benchmark",
        description="Train ResNet on synthetic Flowers data as the reference report's benchmark "
                    "did; print throughput, the Stat= table and the Python share.")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="full",
                   help="preset size; the options below override it "
                        "(default: full, the report's run)")
    p.add_argument("--batch_size", type=int, help="images per batch (full: 32)")
    p.add_argument("--iterations", type=int, help="batches in all, over every pass (full: 80)")
    p.add_argument("--pass_num", type=int, help="passes over the data at most (default 1)")
    p.add_argument("--device", choices=["CPU", "GPU"], help="default CPU")
    p.add_argument("--order", choices=["NCHW", "NHWC"], help="data layout; only NCHW is supported")
    p.add_argument("--image_size", type=int, help="height and width of the images (full: 224)")
    p.add_argument("--depth", type=int, choices=sorted(DEPTHS), help="ResNet depth (default 50)")
    p.add_argument("--stem_pool", choices=["max", "avg"],
                   help="the stem's 3x3/2 pooling: max with padding 1 (standard) "
                        "or unpadded avg (the report's)")
    p.add_argument("--seed", type=int,
                   help="seed of the weights, the data and the shuffling (default 0)")
    switches = {"use_program_cache": "clone the program once, not every run",
                "cache_ops": "create the runnable ops once, not every run",
                "reuse_local_scope": "keep the local scope between runs"}
    for switch, text in switches.items():
        p.add_argument(f"--{switch}", action="store_true", help=text)
    p.add_argument("--no_overheads", action="store_true", help="all three of the above")
    p.add_argument("--quiet", action="store_true", help="no per-batch progress lines")
    return p


def config_from_args(args: argparse.Namespace) -> BenchmarkConfig:
    sizes = ("batch_size", "iterations", "pass_num", "device", "order", "image_size", "depth",
             "stem_pool", "seed")
    overrides = {k: getattr(args, k) for k in sizes if getattr(args, k) is not None}
    for switch in ("use_program_cache", "cache_ops", "reuse_local_scope"):
        if getattr(args, switch) or args.no_overheads:
            overrides[switch] = True
    return WORKLOADS[args.workload].replace(**overrides)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    if config.device == "GPU" and not gpu_available():
        parser.error(f"--device GPU: no usable GPU here ({gpu_unavailable_reason()})")
    clock = CudaEventClock(CUDAPlace(0)) if config.device == "GPU" else None
    with timers.recording(device_clock=clock) as table:
        # Resolving the device times after every batch keeps the events of one
        # step in flight, not those of the whole run.
        result = run_benchmark(config, on_batch=lambda examples: table.flush(),
                               log=None if args.quiet else print)
    print()
    print("\n".join(report_lines(result, table)))
    rss = _max_rss_mib()
    if rss is not None:
        print(f"max RSS: {rss:.0f} MiB")
    return 0


def _max_rss_mib() -> float | None:
    if resource is None:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


if __name__ == "__main__":
    sys.exit(main())
