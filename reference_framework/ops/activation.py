"""Activations: relu and its gradient."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..registry import KernelContext, OpDef, OpError, make_grad, optional, register
from ._parallel import elementwise
from ._util import numel


def relu(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, xp = ins["X"], ctx.xp
    # a Python 0 keeps X's dtype
    return {"Out": elementwise(lambda o, a: xp.maximum(a, 0, out=o), xp.empty_like(x), x)}


def relu_grad(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    out, dout = ins["Out"], ins["Out@GRAD"]
    if dout.shape != out.shape:
        raise OpError(f"relu_grad: Out@GRAD must have Out's shape {list(out.shape)}, given "
                      f"{list(dout.shape)}")
    dx = ctx.xp.empty(dout.shape, dtype=dout.dtype)
    return {"X@GRAD": elementwise(lambda d, o, g: ctx.xp.multiply(g, o > 0, out=d), dx, out, dout)}


def _same(src: str, dst: str) -> Callable[[dict, dict[str, Any]], dict]:
    return lambda shapes, attrs: {dst: [shapes[src][0]]}


def _cost(slot: str, tensors: int) -> Callable[[dict, dict[str, Any], int], tuple[float, float]]:
    """One operation per element of ``slot``; ``tensors`` arrays of its size read or written."""
    def cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
        n = numel(shapes[slot][0])
        return float(n), float(tensors * n * itemsize)
    return cost


# The gradient reads Out, not X: out > 0 exactly where x > 0, and keeping Out
# (which the next op reads anyway) lets X be dropped after the forward pass.
register(OpDef("relu", inputs=["X"], outputs=["Out"], kernel=relu, infer_shape=_same("X", "Out"),
               cost=_cost("X", 2), grad=make_grad("relu_grad", outputs=["Out"], grads_of=["Out"],
                                                  grads_for=["X"])))
register(OpDef("relu_grad", inputs=["Out", "Out@GRAD"], outputs=[optional("X@GRAD")],
               kernel=relu_grad, infer_shape=_same("Out", "X@GRAD"), cost=_cost("Out", 3)))
