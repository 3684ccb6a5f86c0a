"""``mul``: the fully connected layer's matrix product, with its gradient.

X is flattened to a matrix at ``x_num_col_dims`` (rows: the product of its
first ``x_num_col_dims`` dims, columns: the rest), Y likewise at
``y_num_col_dims``; one GEMM multiplies them and Out takes the shape
``X.shape[:x_num_col_dims] + Y.shape[y_num_col_dims:]``.
"""

from __future__ import annotations

from math import prod
from typing import Any

from ..registry import KernelContext, OpDef, OpError, make_grad, optional, register


def _flat_shape(op: str, slot: str, shape: tuple, num_col_dims: int) -> tuple[int, int]:
    """The matrix shape of ``shape`` flattened at ``num_col_dims`` (-1 dims kept as -1)."""
    attr = f"{slot.lower()}_num_col_dims"
    if not 1 <= num_col_dims < len(shape):
        raise OpError(f"{op}: attribute {attr!r} must be in [1, {len(shape) - 1}] for {slot} of "
                      "shape "
                      f"{list(shape)}, given {num_col_dims}")
    rows, cols = shape[:num_col_dims], shape[num_col_dims:]
    return (-1 if -1 in rows else prod(rows)), (-1 if -1 in cols else prod(cols))


def _matrices(op: str, x: Any, y: Any, attrs: dict[str, Any]) -> tuple[Any, Any]:
    m, k = _flat_shape(op, "X", x.shape, attrs["x_num_col_dims"])
    k2, n = _flat_shape(op, "Y", y.shape, attrs["y_num_col_dims"])
    if k != k2:
        raise OpError(f"{op}: X flattened to [{m}, {k}] and Y flattened to [{k2}, {n}] do not "
                      "multiply: "
                      f"X's columns ({k}) must equal Y's rows ({k2}) (X shape {list(x.shape)}, Y "
                      f"shape {list(y.shape)}, x_num_col_dims={attrs['x_num_col_dims']}, "
                      f"y_num_col_dims={attrs['y_num_col_dims']})")
    return x.reshape(m, k), y.reshape(k, n)


def _out_shape(x_shape: tuple, y_shape: tuple, attrs: dict[str, Any]) -> tuple:
    return tuple(x_shape[:attrs["x_num_col_dims"]]) + tuple(y_shape[attrs["y_num_col_dims"]:])


def mul(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, y = ins["X"], ins["Y"]
    x2, y2 = _matrices("mul", x, y, attrs)
    return {"Out": (x2 @ y2).reshape(_out_shape(x.shape, y.shape, attrs))}


def mul_grad(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, y, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
    x2, y2 = _matrices("mul_grad", x, y, attrs)
    want = _out_shape(x.shape, y.shape, attrs)
    if dout.shape != want:
        raise OpError(f"mul_grad: Out@GRAD must have Out's shape {list(want)}, given "
                      f"{list(dout.shape)}")
    dout2 = dout.reshape(x2.shape[0], y2.shape[1])
    outs = {}
    if ctx.wants("X@GRAD"):
        outs["X@GRAD"] = (dout2 @ y2.T).reshape(x.shape)  # transposed views: BLAS flags, no copies
    if ctx.wants("Y@GRAD"):
        outs["Y@GRAD"] = (x2.T @ dout2).reshape(y.shape)
    return outs


def _check_attrs(attrs: dict[str, Any]) -> None:
    for name in ("x_num_col_dims", "y_num_col_dims"):
        if attrs[name] < 1:
            raise OpError(f"mul: attribute {name!r} expects an int >= 1, given {attrs[name]!r}")


def _infer(shapes: dict, attrs: dict[str, Any]) -> dict:
    x, y = shapes["X"][0], shapes["Y"][0]
    _, k = _flat_shape("mul", "X", x, attrs["x_num_col_dims"])
    k2, _ = _flat_shape("mul", "Y", y, attrs["y_num_col_dims"])
    if -1 not in (k, k2) and k != k2:
        raise OpError(f"mul: X of shape {list(x)} flattened at "
                      f"x_num_col_dims={attrs['x_num_col_dims']} has {k} columns, but Y of shape "
                      f"{list(y)} flattened at y_num_col_dims={attrs['y_num_col_dims']} has {k2} "
                      f"rows")
    return {"Out": [_out_shape(x, y, attrs)]}


def _infer_grad(shapes: dict, attrs: dict[str, Any]) -> dict:
    return {"X@GRAD": [shapes["X"][0]], "Y@GRAD": [shapes["Y"][0]]}


def _mkn(shapes: dict, attrs: dict[str, Any]) -> tuple[int, int, int]:
    m, k = _flat_shape("mul", "X", shapes["X"][0], attrs["x_num_col_dims"])
    _, n = _flat_shape("mul", "Y", shapes["Y"][0], attrs["y_num_col_dims"])
    return abs(m), abs(k), abs(n)  # a -1 (batch) dim counts as 1


def _cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    m, k, n = _mkn(shapes, attrs)
    return float(2 * m * k * n), float((m * k + k * n + m * n) * itemsize)


def _cost_grad(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    m, k, n = _mkn(shapes, attrs)
    return float(4 * m * k * n), float((2 * (m * k + k * n) + m * n) * itemsize)


_ATTRS = {"x_num_col_dims": 1, "y_num_col_dims": 1}

# Both inputs are needed backward: each one's gradient is the other times Out@GRAD.
register(OpDef("mul", inputs=["X", "Y"], outputs=["Out"], attrs=_ATTRS, check_attrs=_check_attrs,
               infer_shape=_infer, cost=_cost, kernel=mul,
               grad=make_grad("mul_grad", inputs=["X", "Y"], grads_of=["Out"],
                              grads_for=["X", "Y"])))
register(OpDef("mul_grad", inputs=["X", "Y", "Out@GRAD"],
               outputs=[optional("X@GRAD"), optional("Y@GRAD")], attrs=_ATTRS,
               check_attrs=_check_attrs, infer_shape=_infer_grad, cost=_cost_grad, kernel=mul_grad))
