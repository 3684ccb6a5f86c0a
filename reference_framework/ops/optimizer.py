"""Parameter updates: the momentum optimizer op, updating in place.

``ParamOut`` is the ``Param`` array and ``VelocityOut`` the ``Velocity`` array,
updated where they are: ``v = mu * v + g``, then ``p -= lr * v``, or with
``use_nesterov`` ``p -= lr * (g + mu * v)`` (with the updated ``v``).
"""

from __future__ import annotations

from numbers import Real
from typing import Any

from ..registry import REQUIRED, KernelContext, OpDef, OpError, register
from ._parallel import elementwise
from ._util import numel


def _check(p: Any, g: Any, v: Any, lr: Any) -> None:
    for slot, a in (("Grad", g), ("Velocity", v)):
        if a.shape != p.shape:
            raise OpError(f"momentum: {slot} must have Param's shape {list(p.shape)}, given "
                          f"{list(a.shape)}")
        if a.dtype != p.dtype:
            raise OpError(f"momentum: {slot} must have Param's dtype {p.dtype.name}, given "
                          f"{a.dtype.name}")
    if lr.size != 1:
        raise OpError("momentum: LearningRate must hold one value (shape [1]), given shape "
                      f"{list(lr.shape)}")


def momentum(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    p, g, v, lr = ins["Param"], ins["Grad"], ins["Velocity"], ins["LearningRate"]
    _check(p, g, v, lr)
    xp, mu = ctx.xp, attrs["mu"]
    lr = lr.reshape(()).astype(p.dtype, copy=False)  # a float64 rate must not promote the update
    nesterov = attrs["use_nesterov"]

    def update(p: Any, v: Any, g: Any) -> None:
        xp.multiply(v, mu, out=v)
        v += g
        # One temporary the size of the part: numpy has no fused "p -= lr * v".
        if nesterov:
            step = xp.multiply(v, mu)
            step += g
            step *= lr
        else:
            step = xp.multiply(v, lr)
        p -= step

    elementwise(update, p, v, g)  # big parameters are updated by parts, over threads
    return {"ParamOut": p, "VelocityOut": v}


def _check_attrs(attrs: dict[str, Any]) -> None:
    mu = attrs["mu"]
    if isinstance(mu, bool) or not isinstance(mu, Real) or not 0.0 <= float(mu):
        raise OpError(f"momentum: attribute 'mu' expects a number >= 0, given {mu!r}")
    attrs["mu"] = float(mu)  # a numpy float64 would promote a float32 update to float64


def _infer(shapes: dict, attrs: dict[str, Any]) -> dict:
    p = shapes["Param"][0]
    for slot in ("Grad", "Velocity"):
        if shapes[slot][0] != p:
            raise OpError(f"momentum: {slot} must have Param's shape {list(p)}, given "
                          f"{list(shapes[slot][0])}")
    return {"ParamOut": [p], "VelocityOut": [p]}


def _cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    n = numel(shapes["Param"][0])
    flops = 6 * n if attrs["use_nesterov"] else 4 * n
    return float(flops), float(5 * n * itemsize)  # read p, g, v; write p, v


register(OpDef("momentum", inputs=["Param", "Grad", "Velocity", "LearningRate"],
               outputs=["ParamOut", "VelocityOut"], attrs={"mu": REQUIRED, "use_nesterov": False},
               check_attrs=_check_attrs, infer_shape=_infer, cost=_cost, kernel=momentum))
