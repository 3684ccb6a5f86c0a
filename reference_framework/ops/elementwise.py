"""Broadcasting binary ops: elementwise_add and elementwise_div, with gradients.

The reference framework's broadcast rule: Y's shape equals a contiguous run of
X's dimensions starting at ``axis`` (``axis=-1`` means ``rank(X) - rank(Y)``,
i.e. the trailing dimensions). Y's gradient sums the broadcast dimensions away.
"""

from __future__ import annotations

from typing import Any

from ..registry import KernelContext, OpDef, OpError, make_grad, optional, register
from ._parallel import elementwise
from ._util import numel


def _axis(op: str, x_shape: tuple, y_shape: tuple, axis: int) -> int:
    """The start of Y's run in X's dims, checked (-1 dims match anything)."""
    start = len(x_shape) - len(y_shape) if axis == -1 else axis
    run = tuple(x_shape[start:start + len(y_shape)])
    fits = 0 <= start and start + len(y_shape) <= len(x_shape) and all(
        a == b or -1 in (a, b) for a, b in zip(run, y_shape, strict=True))
    if not fits:
        raise OpError(f"{op}: Y's shape {list(y_shape)} must equal X's dims from axis {start} (X's "
                      f"shape {list(x_shape)}, attribute axis={axis})")
    return start


def _y_view(op: str, x: Any, y: Any, axis: int) -> Any:
    """Y reshaped to broadcast against X."""
    if x.shape == y.shape:
        return y
    start = _axis(op, x.shape, y.shape, axis)
    return y.reshape((1,) * start + y.shape + (1,) * (x.ndim - start - y.ndim))


def _reduce_to_y(op: str, g: Any, y_shape: tuple, axis: int) -> Any:
    """Sum the dims of ``g`` (X-shaped) that Y was broadcast over."""
    if g.shape == y_shape:
        return g
    start = _axis(op, g.shape, y_shape, axis)
    dims = tuple(range(start)) + tuple(range(start + len(y_shape), g.ndim))
    return g.sum(axis=dims).reshape(y_shape)


def _infer(shapes: dict, attrs: dict[str, Any]) -> dict:
    x, y = shapes["X"][0], shapes["Y"][0]
    if x != y:
        _axis("elementwise", x, y, attrs["axis"])
    return {"Out": [x]}


def _infer_grad(shapes: dict, attrs: dict[str, Any]) -> dict:
    x = shapes["Out@GRAD"][0]  # X's shape, which the gradient ops do not read
    return {"X@GRAD": [x], "Y@GRAD": [shapes["Y"][0]]}


def _cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    n, ny = numel(shapes["X"][0]), numel(shapes["Y"][0])
    return float(n), float((2 * n + ny) * itemsize)


def elementwise_add(ins: dict[str, Any], attrs: dict[str, Any],
                    ctx: KernelContext) -> dict[str, Any]:
    x, y, xp = ins["X"], ins["Y"], ctx.xp
    if x.shape == y.shape and x.dtype == y.dtype:  # the residual add: big, split over threads
        return {"Out": elementwise(lambda o, a, b: xp.add(a, b, out=o),
                                   xp.empty(x.shape, dtype=x.dtype), x, y)}
    return {"Out": x + _y_view("elementwise_add", x, y, attrs["axis"])}


def elementwise_add_grad(ins: dict[str, Any], attrs: dict[str, Any],
                         ctx: KernelContext) -> dict[str, Any]:
    dout = ins["Out@GRAD"]
    outs = {}
    if ctx.wants("X@GRAD"):
        outs["X@GRAD"] = dout  # d(x + y)/dx = 1: the same array, never written in place
    if ctx.wants("Y@GRAD"):
        outs["Y@GRAD"] = _reduce_to_y("elementwise_add_grad", dout, ins["Y"].shape, attrs["axis"])
    return outs


def elementwise_div(ins: dict[str, Any], attrs: dict[str, Any],
                    ctx: KernelContext) -> dict[str, Any]:
    x, y = ins["X"], ins["Y"]
    return {"Out": x / _y_view("elementwise_div", x, y, attrs["axis"])}


def elementwise_div_grad(ins: dict[str, Any], attrs: dict[str, Any],
                         ctx: KernelContext) -> dict[str, Any]:
    y, out, dout = ins["Y"], ins["Out"], ins["Out@GRAD"]
    yb = _y_view("elementwise_div_grad", out, y, attrs["axis"])
    outs = {}
    if ctx.wants("X@GRAD"):
        outs["X@GRAD"] = dout / yb
    if ctx.wants("Y@GRAD"):
        # d(x / y)/dy = -x / y^2 = -out / y
        outs["Y@GRAD"] = _reduce_to_y("elementwise_div_grad", -dout * out / yb, y.shape,
                                      attrs["axis"])
    return outs


# The add gradient needs only Y's shape (X's equals Out@GRAD's); the division
# gradient needs Y and Out (x/y^2 = out/y), not X.
register(OpDef("elementwise_add", inputs=["X", "Y"], outputs=["Out"], attrs={"axis": -1},
               infer_shape=_infer, cost=_cost, kernel=elementwise_add,
               grad=make_grad("elementwise_add_grad", inputs=["Y"], grads_of=["Out"],
                              grads_for=["X", "Y"])))
register(OpDef("elementwise_add_grad", inputs=["Y", "Out@GRAD"],
               outputs=[optional("X@GRAD"), optional("Y@GRAD")], attrs={"axis": -1},
               infer_shape=_infer_grad, kernel=elementwise_add_grad))
register(OpDef("elementwise_div", inputs=["X", "Y"], outputs=["Out"], attrs={"axis": -1},
               infer_shape=_infer, cost=_cost, kernel=elementwise_div,
               grad=make_grad("elementwise_div_grad", inputs=["Y"], outputs=["Out"],
                              grads_of=["Out"], grads_for=["X", "Y"])))
register(OpDef("elementwise_div_grad", inputs=["Y", "Out", "Out@GRAD"],
               outputs=[optional("X@GRAD"), optional("Y@GRAD")],
               attrs={"axis": -1}, infer_shape=_infer_grad, kernel=elementwise_div_grad))
