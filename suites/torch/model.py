"""The reference framework's ResNet training and its ops, built in torch (the suites' peer).

The network follows ``reference_framework.models.resnet`` layer for layer (its
depth table, bottleneck with the stride on the 3x3 convolution, projection
shortcuts where the shape changes, no convolution bias, batch norm, the stem's
pooling, global average pooling, fc), so the parameter counts are equal; the
suite checks it. Training is the reference benchmark's: the same synthetic
Flowers reader, SGD with momentum at the same rate, softmax cross entropy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from reference_framework.benchmark import BenchmarkConfig
from reference_framework.models.resnet import DEPTHS, STAGE_CHANNELS, bottleneck
from suites.support import numpy_batches

__all__ = ["ResNet", "has_peer", "op_call", "train_batches", "train_step"]


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, padding: int = 0,
            relu: bool = True) -> list[nn.Module]:
    mods: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, padding, bias=False),
                             nn.BatchNorm2d(cout)]
    return mods + [nn.ReLU()] if relu else mods


class Bottleneck(nn.Module):
    """1x1 (reduce) -> 3x3 (stride) -> 1x1 (expand x4), plus the shortcut, relu."""

    def __init__(self, cin: int, channels: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, channels, 1),
                                  *conv_bn(channels, channels, 3, stride, 1),
                                  *conv_bn(channels, channels * 4, 1, relu=False))
        self.shortcut = (nn.Sequential(*conv_bn(cin, channels * 4, 1, stride, relu=False))
                         if cin != channels * 4 or stride != 1 else nn.Identity())
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.shortcut(x) + self.body(x))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions plus the shortcut, relu (ResNet-18/34)."""

    def __init__(self, cin: int, channels: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, channels, 3, stride, 1),
                                  *conv_bn(channels, channels, 3, 1, 1, False))
        self.shortcut = (nn.Sequential(*conv_bn(cin, channels, 1, stride, relu=False))
                         if cin != channels or stride != 1 else nn.Identity())
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.shortcut(x) + self.body(x))


class ResNet(nn.Sequential):
    """ResNet-``depth`` as the reference framework builds it; logits (the loss applies softmax)."""

    def __init__(self, class_dim: int = 102, depth: int = 50, stem_pool: str = "max") -> None:
        stages, block = DEPTHS[depth]
        make = Bottleneck if block is bottleneck else BasicBlock
        expansion = 4 if make is Bottleneck else 1
        pool = nn.MaxPool2d(3, 2, 1) if stem_pool == "max" else nn.AvgPool2d(3, 2, 0)
        mods: list[nn.Module] = [*conv_bn(3, 64, 7, 2, 3), pool]
        cin = 64
        for stage, (blocks, channels) in enumerate(zip(stages, STAGE_CHANNELS, strict=True)):
            for i in range(blocks):
                mods.append(make(cin, channels, 2 if stage > 0 and i == 0 else 1))
                cin = channels * expansion
        super().__init__(*mods, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, class_dim))

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def train_batches(config: BenchmarkConfig) -> Any:
    """The reference benchmark's batches (synthetic Flowers, shuffled), as torch tensors."""
    for images, labels in numpy_batches(config):
        yield torch.from_numpy(images), torch.from_numpy(labels)


def train_step(model: nn.Module,
               opt: torch.optim.Optimizer) -> Callable[[torch.Tensor, torch.Tensor], float]:
    def step(images: torch.Tensor, labels: torch.Tensor) -> float:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


# --- single ops at the reference program's shapes ---------------------------------------

aten = torch.ops.aten


def _pair(values: list[int]) -> list[int]:
    return [int(v) for v in values]


_PEERS = frozenset({"conv2d", "conv2d_grad", "batch_norm", "batch_norm_grad", "relu", "relu_grad",
                    "pool2d", "pool2d_grad", "elementwise_add", "elementwise_add_grad", "sum",
                    "mul", "mul_grad", "softmax", "softmax_grad", "mean", "momentum"})


def has_peer(op_type: str, shapes: dict[str, list[tuple[int, ...]]], attrs: dict[str, Any]) -> bool:
    """Whether :func:`op_call` has a torch op for this reference op (cheap: builds nothing)."""
    if op_type not in _PEERS:
        return False
    if op_type.startswith("pool2d") and attrs["global_pooling"]:
        return attrs["pooling_type"] == "avg"
    if op_type == "elementwise_add_grad":
        return tuple(shapes["Y"][0]) != tuple(shapes["Out@GRAD"][0])
    if op_type == "sum":
        return len(shapes["X"]) == 2 and len(shapes["X"][0]) > 1
    return True


def op_call(op_type: str, shapes: dict[str, list[tuple[int, ...]]], attrs: dict[str, Any],
            device: torch.device, seed: int = 0) -> tuple[Callable[..., Any], tuple] | None:
    """The torch op doing the reference op's work at its shapes, with inputs, or ``None``
    where torch has no single op for it (fill_constant, top_k, accuracy, cast, the
    probability-based cross entropy and its gradient, mean_grad, and the same-shape
    elementwise_add_grad, which autograd passes through without a kernel): see :func:`has_peer`."""
    if not has_peer(op_type, shapes, attrs):
        return None
    gen = torch.Generator().manual_seed(seed)

    def randn(shape: tuple[int, ...]) -> torch.Tensor:
        return torch.randn(shape, generator=gen).to(device)

    first = {slot: [randn(s) for s in v] for slot, v in shapes.items()}
    one = {slot: v[0] for slot, v in first.items()}
    if op_type in ("conv2d", "conv2d_grad"):
        x, w = one["Input"], one["Filter"]
        conv = (_pair(attrs["strides"]), _pair(attrs["paddings"]),
                _pair(attrs.get("dilations", [1, 1])))
        groups = int(attrs.get("groups", 1))
        if op_type == "conv2d":
            return F.conv2d, (x, w, None, *conv, groups)
        return aten.convolution_backward, (one["Output@GRAD"], x, w, None, *conv, False, [0, 0],
                                           groups, [True, True, False])
    if op_type in ("batch_norm", "batch_norm_grad"):
        x = one["X"]
        c = x.shape[1]
        weight, bias = torch.ones(c, device=device), torch.zeros(c, device=device)
        mean, var = torch.zeros(c, device=device), torch.ones(c, device=device)
        eps, momentum = float(attrs.get("epsilon", 1e-5)), 1.0 - float(attrs.get("momentum", 0.9))
        if op_type == "batch_norm":
            return aten.native_batch_norm, (x, weight, bias, mean, var, True, momentum, eps)
        _, saved_mean, saved_invstd = aten.native_batch_norm(x, weight, bias, mean, var, True,
                                                             momentum, eps)
        return aten.native_batch_norm_backward, (randn(tuple(x.shape)), x, weight, mean, var,
                                                 saved_mean, saved_invstd, True, eps,
                                                 [True, True, True])
    if op_type == "relu":
        return torch.relu, (one["X"],)
    if op_type == "relu_grad":
        return aten.threshold_backward, (one["Out@GRAD"], torch.relu(one["Out"]), 0)
    if op_type in ("pool2d", "pool2d_grad"):
        x = one["X"]
        if attrs["global_pooling"]:
            if attrs["pooling_type"] != "avg":
                return None
            if op_type == "pool2d":
                return aten._adaptive_avg_pool2d, (x, [1, 1])
            return aten._adaptive_avg_pool2d_backward, (one["Out@GRAD"], x)
        pool = (_pair(attrs["ksize"]), _pair(attrs["strides"]), _pair(attrs["paddings"]))
        if attrs["pooling_type"] == "max":
            if op_type == "pool2d":
                return aten.max_pool2d_with_indices, (x, *pool)
            _, indices = aten.max_pool2d_with_indices(x, *pool)
            return aten.max_pool2d_with_indices_backward, (one["Out@GRAD"], x, *pool, [1, 1], False,
                                                           indices)
        if op_type == "pool2d":
            return aten.avg_pool2d, (x, *pool)
        return aten.avg_pool2d_backward, (one["Out@GRAD"], x, *pool, False, True, None)
    if op_type == "elementwise_add":
        return torch.add, (one["X"], one["Y"])
    if op_type == "elementwise_add_grad":
        dy, y = one["Out@GRAD"], one["Y"]
        if tuple(y.shape) == tuple(dy.shape):
            return None
        return functools.partial(torch.sum, dim=0), (dy,)
    if op_type == "sum":
        xs = first["X"]
        return (torch.add, tuple(xs)) if len(xs) == 2 and xs[0].dim() > 1 else None
    if op_type in ("mul", "mul_grad"):
        x, w = one["X"], one["Y"]
        x2 = x.reshape(x.shape[0], math.prod(x.shape[1:]))
        if op_type == "mul":
            return torch.mm, (x2, w)
        dy = one["Out@GRAD"]

        def mul_grad(dy: torch.Tensor, x2: torch.Tensor,
                     w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.mm(dy, w.t()), torch.mm(x2.t(), dy)

        return mul_grad, (dy, x2, w)
    if op_type == "softmax":
        return functools.partial(torch.softmax, dim=1), (one["X"],)
    if op_type == "softmax_grad":
        return aten._softmax_backward_data, (one["Out@GRAD"], torch.softmax(one["Out"], 1), 1,
                                             torch.float32)
    if op_type == "mean":
        return torch.mean, (one["X"],)
    if op_type == "momentum":
        param, grad, velocity = one["Param"], one["Grad"], one["Velocity"]
        mu, lr = float(attrs.get("mu", 0.9)), 0.01

        def momentum_step(param: torch.Tensor, grad: torch.Tensor, velocity: torch.Tensor) -> None:
            velocity.mul_(mu).add_(grad)  # what torch.optim.SGD does per parameter
            param.add_(velocity, alpha=-lr)

        return momentum_step, (param, grad, velocity)
    return None
