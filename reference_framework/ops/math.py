"""Reductions: mean (with gradient) and the n-ary sum used to accumulate gradients."""

from __future__ import annotations

from typing import Any

from ..registry import KernelContext, OpDef, OpError, duplicable, make_grad, optional, register
from ._parallel import elementwise
from ._util import numel


def mean(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x = ins["X"]
    return {"Out": x.mean(dtype=x.dtype).reshape(1)}


def mean_grad(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, dout = ins["X"], ins["Out@GRAD"]
    return {"X@GRAD": ctx.xp.broadcast_to(dout.reshape(()) / x.size, x.shape).astype(x.dtype)}


def sum_(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    xs = ins["X"]
    first = xs[0]
    for x in xs[1:]:
        if x.shape != first.shape:
            raise OpError(f"sum: every X must have shape {list(first.shape)}, "
                          f"given {list(x.shape)}")
    if len(xs) == 1 or any(x.dtype != first.dtype for x in xs):
        out = first + xs[1] if len(xs) > 1 else first.copy()  # a new array: inputs stay untouched
        for x in xs[2:]:
            out += x
        return {"Out": out}
    xp = ctx.xp

    def add_all(o: Any, a: Any, b: Any, *rest: Any) -> None:
        xp.add(a, b, out=o)
        for x in rest:
            o += x

    return {"Out": elementwise(add_all, xp.empty(first.shape, dtype=first.dtype), *xs)}


register(OpDef("mean", inputs=["X"], outputs=["Out"], kernel=mean,
               infer_shape=lambda shapes, attrs: {"Out": [(1,)]},
               cost=lambda shapes, attrs, itemsize: (float(numel(shapes["X"][0])),
                                                     float(numel(shapes["X"][0]) * itemsize)),
               grad=make_grad("mean_grad", inputs=["X"], grads_of=["Out"], grads_for=["X"])))
# mean_grad reads only X's shape and dtype from X.
register(OpDef("mean_grad", inputs=["X", "Out@GRAD"], outputs=[optional("X@GRAD")],
               kernel=mean_grad, infer_shape=lambda shapes, attrs: {"X@GRAD": [shapes["X"][0]]}))
register(OpDef("sum", inputs=[duplicable("X")], outputs=["Out"], kernel=sum_,
               infer_shape=lambda shapes, attrs: {"Out": [shapes["X"][0]]},
               cost=lambda shapes, attrs, itemsize: (
                   float(numel(shapes["X"][0]) * (len(shapes["X"]) - 1)),
                   float(numel(shapes["X"][0]) * (len(shapes["X"]) + 1) * itemsize))))
