"""The classifier head: softmax over the last axis and the cross-entropy loss, with gradients.

``cross_entropy`` takes probabilities X [N, D] (a softmax output) and either
hard labels (int [N, 1], each in [0, D)) or, with ``soft_label``, a distribution
[N, D] per row; it gives Y [N, 1] = -sum(label * log(x)). The log is clamped:
probabilities below the dtype's smallest normal number (``finfo(dtype).tiny``,
about 1.2e-38 in float32) are taken as that number, so a zero probability costs
a large finite loss (about 87.3 in float32, 708.4 in float64) instead of inf,
and the gradient divides by the clamped value too.
"""

from __future__ import annotations

from typing import Any

from ..backend import to_host
from ..registry import KernelContext, OpDef, OpError, make_grad, optional, register
from ._util import numel


def softmax(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, xp = ins["X"], ctx.xp
    out = x - x.max(axis=-1, keepdims=True)  # exp of at most 0: no overflow
    xp.exp(out, out=out)
    out /= out.sum(axis=-1, keepdims=True)
    return {"Out": out}


def softmax_grad(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    out, dout = ins["Out"], ins["Out@GRAD"]
    if dout.shape != out.shape:
        raise OpError(f"softmax_grad: Out@GRAD must have Out's shape {list(out.shape)}, given "
                      f"{list(dout.shape)}")
    # dx = out * (dout - <dout, out>) row by row: the Jacobian diag(out) - out out^T applied to dout
    dx = dout * out
    dot = dx.sum(axis=-1, keepdims=True)
    dx -= out * dot
    return {"X@GRAD": dx}


def _clamped(x: Any, xp: Any) -> Any:
    return xp.maximum(x, xp.finfo(x.dtype).tiny)  # a same-dtype scalar keeps float32 float32


def _check_x(op: str, x: Any) -> None:
    if x.ndim != 2:
        raise OpError(f"{op}: X must be 2-D [N, D] probabilities, given shape {list(x.shape)}")


def _hard_label(op: str, x: Any, label: Any, xp: Any) -> Any:
    """The labels as a flat int vector, checked: shape [N, 1], integer, each in [0, D)."""
    n, d = x.shape
    if label.shape != (n, 1):
        raise OpError(f"{op}: Label must have shape [{n}, 1] (hard labels, one per row of X), "
                      f"given {list(label.shape)}")
    if label.dtype.kind not in "iu":
        raise OpError(f"{op}: hard Label must have an integer dtype such as int64, given "
                      f"{label.dtype.name} (set soft_label=True for distributions)")
    flat = label.reshape(n)
    bad = (flat < 0) | (flat >= d)
    if bool(bad.any()):  # on a GPU this reads one flag back: the price of a clear error
        rows = to_host(xp.nonzero(bad)[0])
        values = to_host(flat)[rows]
        shown = ", ".join(f"{v} at row {r}" for r, v in zip(rows[:5].tolist(), values[:5].tolist(),
                                                            strict=True))
        more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
        raise OpError(f"{op}: Label values must be in [0, {d}) (X has {d} classes), given "
                      f"{shown}{more}")
    return flat


def _soft_label(op: str, x: Any, label: Any) -> Any:
    if label.shape != x.shape:
        raise OpError(f"{op}: with soft_label, Label must have X's shape {list(x.shape)}, given "
                      f"{list(label.shape)}")
    return label


def cross_entropy(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, label, xp = ins["X"], ins["Label"], ctx.xp
    _check_x("cross_entropy", x)
    if attrs["soft_label"]:
        label = _soft_label("cross_entropy", x, label)
        logs = xp.log(_clamped(x, xp))
        logs *= label
        return {"Y": -logs.sum(axis=1, keepdims=True)}
    flat = _hard_label("cross_entropy", x, label, xp)
    picked = x[xp.arange(x.shape[0]), flat]
    return {"Y": -xp.log(_clamped(picked, xp)).reshape(-1, 1)}


def cross_entropy_grad(ins: dict[str, Any], attrs: dict[str, Any],
                       ctx: KernelContext) -> dict[str, Any]:
    x, label, dy, xp = ins["X"], ins["Label"], ins["Y@GRAD"], ctx.xp
    _check_x("cross_entropy_grad", x)
    if dy.shape != (x.shape[0], 1):
        raise OpError(f"cross_entropy_grad: Y@GRAD must have shape [{x.shape[0]}, 1], given "
                      f"{list(dy.shape)}")
    if attrs["soft_label"]:
        label = _soft_label("cross_entropy_grad", x, label)
        dx = label / _clamped(x, xp)
        dx *= -dy
        return {"X@GRAD": dx}
    flat = _hard_label("cross_entropy_grad", x, label, xp)
    rows = xp.arange(x.shape[0])
    dx = xp.zeros_like(x)
    dx[rows, flat] = -dy.reshape(-1) / _clamped(x[rows, flat], xp)
    return {"X@GRAD": dx}


def _infer_softmax(shapes: dict, attrs: dict[str, Any]) -> dict:
    return {"Out": [shapes["X"][0]]}


def _infer_softmax_grad(shapes: dict, attrs: dict[str, Any]) -> dict:
    return {"X@GRAD": [shapes["Out"][0]]}


def _infer_ce(shapes: dict, attrs: dict[str, Any]) -> dict:
    x, label = shapes["X"][0], shapes["Label"][0]
    if len(x) != 2:
        raise OpError(f"cross_entropy: X must be 2-D [N, D] probabilities, given shape {list(x)}")
    want = x if attrs["soft_label"] else (x[0], 1)
    if len(label) != 2 or any(a != b and -1 not in (a, b)
                              for a, b in zip(label, want, strict=True)):
        raise OpError(f"cross_entropy: Label must have shape {list(want)} "
                      f"(soft_label={attrs['soft_label']}), given {list(label)}")
    return {"Y": [(x[0], 1)]}


def _infer_ce_grad(shapes: dict, attrs: dict[str, Any]) -> dict:
    return {"X@GRAD": [shapes["X"][0]]}


def _softmax_cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    n = numel(shapes["X"][0])
    return float(5 * n), float(2 * n * itemsize)  # max, subtract, exp, sum, divide


def _softmax_grad_cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    n = numel(shapes["Out"][0])
    return float(4 * n), float(3 * n * itemsize)  # product, row sum, product, subtract


# softmax_grad needs only Out (the Jacobian is a function of it), not X;
# cross_entropy_grad needs X and Label, not Y.
register(OpDef("softmax", inputs=["X"], outputs=["Out"], kernel=softmax, infer_shape=_infer_softmax,
               cost=_softmax_cost,
               grad=make_grad("softmax_grad", outputs=["Out"], grads_of=["Out"], grads_for=["X"])))
register(OpDef("softmax_grad", inputs=["Out", "Out@GRAD"], outputs=[optional("X@GRAD")],
               kernel=softmax_grad, infer_shape=_infer_softmax_grad, cost=_softmax_grad_cost))
register(OpDef("cross_entropy", inputs=["X", "Label"], outputs=["Y"], attrs={"soft_label": False},
               kernel=cross_entropy, infer_shape=_infer_ce,
               grad=make_grad("cross_entropy_grad", inputs=["X", "Label"], grads_of=["Y"],
                              grads_for=["X"])))
register(OpDef("cross_entropy_grad", inputs=["X", "Label", "Y@GRAD"], outputs=[optional("X@GRAD")],
               attrs={"soft_label": False}, kernel=cross_entropy_grad, infer_shape=_infer_ce_grad))
