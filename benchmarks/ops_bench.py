"""Times the non-conv ResNet-50 operators, forward and gradient, at batch 8 and 224x224,
next to PyTorch's equivalents when torch is importable.

Each row is one kernel at one ResNet-50 shape; ``per step`` is how often a
training step of ResNet-50 (the reference framework's bottleneck layout,
stride on the first 1x1 convolution) runs it, and ``step ms`` the time it
contributes. Our kernels are called as the executor calls them (the registered
kernel function, without ``run_op``'s argument checking); PyTorch's are the
ATen kernels its autograd runs, so neither side pays for autograd bookkeeping.
The two sides alternate inside every repetition, so a slow patch of the
machine hits both; each timed call follows an untimed warm-up call of the same
side (see ``time_pair``). Each side uses its default threads.

    python benchmarks/ops_bench.py               # all rows, 15 repetitions
    python benchmarks/ops_bench.py --ops batch_norm,relu --repeat 31
    # one thread each:
    OMP_NUM_THREADS=1 OPPERF_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/ops_bench.py
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
from tabulate import tabulate

from reference_framework.backend import CPUPlace
from reference_framework.registry import KernelContext, get_op_def

torch: ModuleType | None
try:
    import torch
except ImportError:  # the table then has our column only
    torch = None

BATCH, CLASSES = 8, 102
# (bottleneck width, blocks, output side) per stage of ResNet-50 at 224x224
STAGES = [(64, 3, 56), (128, 4, 28), (256, 6, 14), (512, 3, 7)]


@dataclass
class Case:
    op: str  # the op type timed
    shape: str
    per_step: int
    ours: Callable[[], Any]
    theirs: Callable[[], Any] | None


def kernel(op_type: str, ins: dict[str, Any],
           attrs: dict[str, Any] | None = None) -> Callable[[], Any]:
    """A call of ``op_type``'s kernel on ``ins``, as the executor makes it."""
    opdef = get_op_def(op_type)
    full = opdef.complete_attrs(attrs)
    ctx = KernelContext(CPUPlace(), np, op_type, frozenset(opdef.output_slots))
    return lambda: opdef.kernel(ins, full, ctx)


def resnet50_activations() -> tuple[Counter, Counter, Counter, Counter]:
    """Per-step counts of (C, side) for batch_norm, relu, the shortcut add and the
    gradient sum (a block input feeds both branches, so its gradients are summed)."""
    bn, relu = Counter({(64, 112): 1}), Counter({(64, 112): 1})
    add: Counter[tuple[int, int]] = Counter()
    grad_sum: Counter[tuple[int, int]] = Counter()
    channels = 64
    for width, blocks, side in STAGES:
        for i in range(blocks):
            in_side = side * 2 if i == 0 and side != 56 else side
            grad_sum[(channels, in_side)] += 1
            bn[(width, side)] += 2
            bn[(4 * width, side)] += 2 if i == 0 else 1
            relu[(width, side)] += 2
            relu[(4 * width, side)] += 1
            add[(4 * width, side)] += 1
            channels = 4 * width
    return bn, relu, add, grad_sum


def resnet50_parameter_shapes() -> list[tuple[int, ...]]:
    """The 161 parameters momentum updates every step: conv filters, batch_norm scale, bias, fc."""
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]
    channels = 64
    for width, blocks, _ in STAGES:
        for i in range(blocks):
            convs = [(width, channels, 1, 1), (width, width, 3, 3), (4 * width, width, 1, 1)]
            if i == 0:
                convs.append((4 * width, channels, 1, 1))
            for conv in convs:
                shapes += [conv, (conv[0],), (conv[0],)]
            channels = 4 * width
    return shapes + [(2048, CLASSES), (CLASSES,)]


def _t(a: np.ndarray) -> Any:
    if torch is None:
        raise RuntimeError("ops_bench: the torch column needs torch")
    return torch.from_numpy(a.copy())


def _torch_add(a: np.ndarray, b: np.ndarray) -> Callable[[], Any] | None:
    if torch is None:
        return None
    ta, tb = _t(a), _t(b)
    return lambda: ta + tb


def _nchw(c: int, side: int) -> tuple[int, int, int, int]:
    return (BATCH, c, side, side)


def batch_norm_cases(rng: np.random.Generator) -> Iterator[Case]:
    bn, _, _, _ = resnet50_activations()
    for (c, side), count in sorted(bn.items(), key=lambda kv: -kv[0][0] * kv[0][1] ** 2):
        shape = _nchw(c, side)
        x = rng.standard_normal(shape, dtype=np.float32)
        dy = rng.standard_normal(shape, dtype=np.float32)
        scale, bias = np.ones(c, np.float32), np.zeros(c, np.float32)
        mean, var = np.zeros(c, np.float32), np.ones(c, np.float32)
        fwd = kernel("batch_norm", {"X": x, "Scale": scale, "Bias": bias, "Mean": mean,
                                    "Variance": var})
        saved = fwd()
        bwd = kernel("batch_norm_grad", {"X": x, "Scale": scale, "SavedMean": saved["SavedMean"],
                                         "SavedVariance": saved["SavedVariance"], "Y@GRAD": dy})
        t_fwd = t_bwd = None
        if torch is not None:
            tx, tdy, tw, tb, tm, tv = map(_t, (x, dy, scale, bias, mean, var))
            _, tsm, tsi = torch.ops.aten.native_batch_norm(tx, tw, tb, tm, tv, True, 0.1, 1e-5)

            def t_fwd(tx=tx, tw=tw, tb=tb, tm=tm, tv=tv):
                return torch.ops.aten.native_batch_norm(tx, tw, tb, tm, tv, True, 0.1, 1e-5)

            def t_bwd(tx=tx, tdy=tdy, tw=tw, tm=tm, tv=tv, tsm=tsm, tsi=tsi):
                return torch.ops.aten.native_batch_norm_backward(tdy, tx, tw, tm, tv, tsm, tsi,
                                                                 True, 1e-5, [True, True, True])
        yield Case("batch_norm", str(list(shape)), count, fwd, t_fwd)
        yield Case("batch_norm_grad", str(list(shape)), count, bwd, t_bwd)


def relu_cases(rng: np.random.Generator) -> Iterator[Case]:
    _, relu, _, _ = resnet50_activations()
    for (c, side), count in sorted(relu.items(), key=lambda kv: -kv[0][0] * kv[0][1] ** 2):
        shape = _nchw(c, side)
        x = rng.standard_normal(shape, dtype=np.float32)
        out, dout = np.maximum(x, 0), rng.standard_normal(shape, dtype=np.float32)
        t_fwd = t_bwd = None
        if torch is not None:
            tx, tout, tdout = map(_t, (x, out, dout))

            def t_fwd(tx=tx):
                return torch.relu(tx)

            def t_bwd(tout=tout, tdout=tdout):
                return torch.ops.aten.threshold_backward(tdout, tout, 0)
        yield Case("relu", str(list(shape)), count, kernel("relu", {"X": x}), t_fwd)
        yield Case("relu_grad", str(list(shape)), count,
                   kernel("relu_grad", {"Out": out, "Out@GRAD": dout}), t_bwd)


def elementwise_cases(rng: np.random.Generator) -> Iterator[Case]:
    """The foundation's add and sum, which share the non-conv time with the ops above."""
    _, _, add, grad_sum = resnet50_activations()
    for (c, side), count in sorted(add.items(), key=lambda kv: -kv[0][0] * kv[0][1] ** 2)[:2]:
        shape = _nchw(c, side)
        x, y = rng.standard_normal(shape,
                                   dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
        t_add = _torch_add(x, y)
        yield Case("elementwise_add", str(list(shape)), count,
                   kernel("elementwise_add", {"X": x, "Y": y}), t_add)
    for (c, side), count in sorted(grad_sum.items(), key=lambda kv: -kv[0][0] * kv[0][1] ** 2)[:2]:
        shape = _nchw(c, side)
        a, b = rng.standard_normal(shape,
                                   dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
        t_sum = _torch_add(a, b)
        yield Case("sum", str(list(shape)), count, kernel("sum", {"X": [a, b]}), t_sum)


def head_cases(rng: np.random.Generator) -> Iterator[Case]:
    """The classifier head: fc (mul + bias), softmax, cross_entropy, top_k, accuracy."""
    feat = rng.standard_normal((BATCH, 2048, 1, 1), dtype=np.float32)
    w = (rng.standard_normal((2048, CLASSES), dtype=np.float32) * 0.02).astype(np.float32)
    b = np.zeros(CLASSES, np.float32)
    logits = rng.standard_normal((BATCH, CLASSES), dtype=np.float32)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    label = rng.integers(0, CLASSES, (BATCH, 1)).astype(np.int64)
    d = rng.standard_normal((BATCH, CLASSES), dtype=np.float32)
    dy = np.full((BATCH, 1), 1 / BATCH, np.float32)
    top_i = np.argmax(p, axis=1).reshape(-1, 1).astype(np.int64)
    theirs: dict[str, Callable[[], Any] | None] = dict.fromkeys(
        ["mul", "mul_grad", "add", "add_grad", "softmax", "softmax_grad", "ce", "ce_grad", "top_k",
         "accuracy"])
    if torch is not None:
        tf, tw, tb, tl, tp, tlab, td, tdy, ti = map(_t, (feat, w, b, logits, p, label, d, dy,
                                                         top_i))
        tf2 = tf.reshape(BATCH, 2048)
        theirs.update(
            mul=lambda: tf2 @ tw,
            mul_grad=lambda: (td @ tw.T, tf2.T @ td),
            add=lambda: tl + tb,
            add_grad=lambda: td.sum(0),
            softmax=lambda: torch.softmax(tl, -1),
            softmax_grad=lambda: torch.ops.aten._softmax_backward_data(td, tp, -1, torch.float32),
            ce=lambda: -tp.gather(1, tlab).log(),
            ce_grad=lambda: torch.zeros_like(tp).scatter_(1, tlab, -tdy / tp.gather(1, tlab)),
            top_k=lambda: torch.topk(tp, 1),
            accuracy=lambda: (lambda c: (c.float() / BATCH, c, BATCH))((ti == tlab).any(1).sum()),
        )
    yield Case("mul", "[8, 2048, 1, 1] x [2048, 102]", 1, kernel("mul", {"X": feat, "Y": w}),
               theirs["mul"])
    yield Case("mul_grad", "[8, 2048, 1, 1] x [2048, 102]", 1,
               kernel("mul_grad", {"X": feat, "Y": w, "Out@GRAD": d}), theirs["mul_grad"])
    yield Case("elementwise_add", "[8, 102] + [102]", 1,
               kernel("elementwise_add", {"X": logits, "Y": b}, {"axis": 1}), theirs["add"])
    yield Case("elementwise_add_grad", "[8, 102] + [102]", 1, kernel("elementwise_add_grad",
                                                                     {"Y": b, "Out@GRAD": d},
                                                                     {"axis": 1}),
               theirs["add_grad"])
    yield Case("softmax", "[8, 102]", 1, kernel("softmax", {"X": logits}), theirs["softmax"])
    yield Case("softmax_grad", "[8, 102]", 1, kernel("softmax_grad", {"Out": p, "Out@GRAD": d}),
               theirs["softmax_grad"])
    yield Case("cross_entropy", "[8, 102]", 1, kernel("cross_entropy", {"X": p, "Label": label}),
               theirs["ce"])
    yield Case("cross_entropy_grad", "[8, 102]", 1,
               kernel("cross_entropy_grad", {"X": p, "Label": label, "Y@GRAD": dy}),
               theirs["ce_grad"])
    yield Case("top_k", "[8, 102], k=1", 1, kernel("top_k", {"X": p}, {"k": 1}), theirs["top_k"])
    yield Case("accuracy", "[8, 1]", 1, kernel("accuracy", {"Out": p[:, :1], "Indices": top_i,
                                                            "Label": label}), theirs["accuracy"])


def momentum_cases(rng: np.random.Generator) -> Iterator[Case]:
    """One step of momentum over all of ResNet-50's parameters (one row: 161 ops)."""
    shapes = resnet50_parameter_shapes()
    params = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    grads = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    lr = np.array([1e-6], np.float32)
    calls = [kernel("momentum", {"Param": p, "Grad": g, "Velocity": np.zeros_like(p),
                                 "LearningRate": lr}, {"mu": 0.9})
             for p, g in zip(params, grads, strict=True)]

    def ours() -> None:
        for call in calls:
            call()

    theirs = None
    if torch is not None:
        tparams = [torch.nn.Parameter(_t(p)) for p in params]
        for tp, g in zip(tparams, grads, strict=True):
            tp.grad = _t(g)
        opt = torch.optim.SGD(tparams, lr=1e-6, momentum=0.9)
        opt.step()  # creates the momentum buffers, as our velocities exist already

        def theirs() -> None:
            opt.step()
    n = sum(int(np.prod(s)) for s in shapes)
    yield Case("momentum", f"{len(shapes)} params, {n / 1e6:.1f}M values", 1, ours, theirs)


FAMILIES = {"batch_norm": batch_norm_cases, "relu": relu_cases, "elementwise": elementwise_cases,
            "head": head_cases, "momentum": momentum_cases}


def time_pair(case: Case, repeat: int, pause: float) -> list[tuple[float, float]]:
    """(median, min) ms of our kernel and, when there is one, of PyTorch's,
    alternating which goes first.

    Each timed call follows an untimed one of the same side: a thread pool that
    idled while the other side ran (OpenBLAS's, PyTorch's OpenMP one) is awake
    again, as it is in a training step that runs ops back to back. Pauses are
    off by default: on a small virtual machine a thread pool that goes to sleep
    can take milliseconds to wake, which would time the wake-up, not the kernel.
    """
    sides = [case.ours] + ([case.theirs] if case.theirs is not None else [])
    samples: list[list[float]] = [[] for _ in sides]
    for fn in sides:  # first-touch page faults, lazy initialisation
        fn()
    for r in range(repeat):
        order = list(range(len(sides)))
        if r % 2:
            order.reverse()
        for i in order:
            sides[i]()
            start = time.perf_counter()
            sides[i]()
            samples[i].append((time.perf_counter() - start) * 1e3)
            if pause:
                time.sleep(pause)
    return [(statistics.median(s), min(s)) for s in samples]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(FAMILIES),
                        help=f"families to time, of {','.join(FAMILIES)}")
    parser.add_argument("--repeat", type=int, default=15,
                        help="timed repetitions per side (default 15)")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds to sleep after each timed call (default 0)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows, total_ours, total_theirs = [], 0.0, 0.0
    for family in args.ops.split(","):
        if family not in FAMILIES:
            parser.error(f"--ops: unknown family {family!r}; choose from {','.join(FAMILIES)}")
        for case in FAMILIES[family](rng):
            gc.collect()
            (ours, ours_min), *theirs = time_pair(case, args.repeat, args.pause)
            total_ours += ours * case.per_step
            row = [case.op, case.shape, case.per_step, f"{ours:.3f}", f"{ours_min:.3f}"]
            if theirs:
                total_theirs += theirs[0][0] * case.per_step
                row += [f"{theirs[0][0]:.3f}", f"{theirs[0][1]:.3f}", f"{ours / theirs[0][0]:.2f}"]
            else:
                row += ["-", "-", "-"]
            rows.append(row + [f"{ours * case.per_step:.1f}"])
            del case
    ratio = f"{total_ours / total_theirs:.2f}" if total_theirs else "-"
    rows.append(["per ResNet-50 step", "", "", "", "", "", "", ratio,
                 f"{total_ours:.1f} (torch {total_theirs:.1f})" if total_theirs
                 else f"{total_ours:.1f}"])
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    threads = (f", torch {torch.__version__} threads={torch.get_num_threads()}" if torch is not None
               else ", no torch")
    print(f"batch {BATCH}, 224x224, float32, {args.repeat} repetitions; numpy {np.__version__} "
          f"(OPENBLAS_NUM_THREADS={blas}){threads}")
    print(tabulate(rows, headers=["op", "shape", "per step", "ours med", "ours min", "torch med",
                                  "torch min", "ours/torch", "step ms (med)"],
                   disable_numparse=True))


if __name__ == "__main__":
    main()
