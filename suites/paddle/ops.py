"""The Paddle op doing the work of each reference op, at the reference program's shapes (dygraph).

Forward ops through ``paddle.nn.functional`` and the tensor API; gradient ops through Paddle's
own kernels (``paddle._C_ops.conv2d_grad``...), the kernels its executor runs.
Op types without a Paddle kernel doing the same work alone, or whose call this suite does not
build (``batch_norm_grad``, ``fill_constant``, ``cast``, ``top_k``, ``accuracy``, the
probability-based ``cross_entropy`` and its gradient, and ``momentum``, whose eager kernel
``_C_ops.momentum_`` crashes without a master parameter in Paddle 3.3.1), are left out: see
:func:`has_peer`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["has_peer", "op_call"]

_PEERS = frozenset({"conv2d", "conv2d_grad", "batch_norm", "relu", "relu_grad", "pool2d",
                    "pool2d_grad", "elementwise_add", "elementwise_add_grad", "sum", "mul",
                    "mul_grad", "softmax", "softmax_grad", "mean", "mean_grad"})


def has_peer(op_type: str, shapes: dict[str, list[tuple[int, ...]]]) -> bool:
    """Whether :func:`op_call` has a Paddle op for this reference op (cheap: builds nothing)."""
    if op_type == "sum":
        return len(shapes["X"]) >= 2
    return op_type in _PEERS


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def op_call(paddle: Any, op_type: str, shapes: dict[str, list[tuple[int, ...]]],
            attrs: dict[str, Any], seed: int = 0) -> tuple[Callable[..., Any], tuple]:
    """The Paddle call doing the reference op's work at its shapes, with its inputs."""
    if not has_peer(op_type, shapes):
        raise ValueError(f"paddle peer: no Paddle op for {op_type!r}")
    paddle.seed(seed)
    F, C = paddle.nn.functional, paddle._C_ops

    def randn(shape: tuple[int, ...]) -> Any:
        return paddle.randn(list(shape), dtype="float32")

    first = {slot: [randn(s) for s in v] for slot, v in shapes.items()}
    one = {slot: v[0] for slot, v in first.items()}
    if op_type in ("conv2d", "conv2d_grad"):
        x, w = one["Input"], one["Filter"]
        strides, paddings = _ints(attrs["strides"]), _ints(attrs["paddings"])
        dilations, groups = _ints(attrs.get("dilations", [1, 1])), int(attrs.get("groups", 1))
        if op_type == "conv2d":
            return F.conv2d, (x, w, None, strides, paddings, dilations, groups)
        return C.conv2d_grad, (x, w, one["Output@GRAD"], strides, paddings, "EXPLICIT", dilations,
                               groups, "NCHW")
    if op_type == "batch_norm":
        x = one["X"]
        c = x.shape[1]
        mean, var = paddle.zeros([c]), paddle.ones([c])
        weight, bias = paddle.ones([c]), paddle.zeros([c])
        eps, momentum = float(attrs.get("epsilon", 1e-5)), float(attrs.get("momentum", 0.9))
        return (lambda x: F.batch_norm(x, mean, var, weight, bias, training=True,
                                       momentum=momentum, epsilon=eps)), (x,)
    if op_type == "relu":
        return F.relu, (one["X"],)
    if op_type == "relu_grad":
        return C.relu_grad, (F.relu(one["Out"]), one["Out@GRAD"])
    if op_type in ("pool2d", "pool2d_grad"):
        x = one["X"]
        pool = (_ints(attrs["ksize"]), _ints(attrs["strides"]), _ints(attrs["paddings"]))
        kind, whole = str(attrs["pooling_type"]), bool(attrs["global_pooling"])
        args = (*pool, False, True, "NCHW", kind, whole, False, "EXPLICIT")
        if op_type == "pool2d":
            return C.pool2d, (x, *args)
        out = C.pool2d(x, *args)
        return C.pool2d_grad, (x, out, randn(tuple(out.shape)), *args)
    if op_type == "elementwise_add":
        return paddle.add, (one["X"], one["Y"])
    if op_type == "elementwise_add_grad":
        dy, y = one["Out@GRAD"], one["Y"]
        x = one.get("X", dy)
        return C.add_grad, (x, y, dy, int(attrs.get("axis", -1)))
    if op_type == "sum":
        return paddle.add_n, (first["X"],)
    if op_type in ("mul", "mul_grad"):
        x, w = one["X"], one["Y"]
        x2 = x.reshape([x.shape[0], math.prod(x.shape[1:])])
        if op_type == "mul":
            return paddle.matmul, (x2, w)
        return C.matmul_grad, (x2, w, one["Out@GRAD"], False, False)
    if op_type == "softmax":
        return F.softmax, (one["X"],)
    if op_type == "softmax_grad":
        return C.softmax_grad, (F.softmax(one["Out"]), one["Out@GRAD"], -1)
    if op_type == "mean":
        return paddle.mean, (one["X"],)
    if op_type == "mean_grad":
        return C.mean_grad, (one["X"], paddle.to_tensor(1.0), [], False, True)
    raise AssertionError(f"has_peer and op_call disagree on {op_type!r}")
