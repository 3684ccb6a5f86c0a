"""2-D pooling, pool2d and pool2d_grad: the max or the average of each window.

Conventions of the reference framework: the output size is floor((H + 2p - k) / s)
+ 1; padded cells are absent, not zeros - a max never picks one and an average
divides by the window's real cells only; the max gradient goes to the first
maximum of each window in row-major order, so ties do not double the gradient;
``global_pooling`` pools each whole plane (ksize = input size, no padding).

On the CPU the ops work by kh x kw strided slices of a padded copy of the input;
on a GPU they are the raw kernels of ``cuda_kernels`` (one launch per op).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..registry import REQUIRED, KernelContext, OpDef, OpError, make_grad, optional, register
from . import cuda_kernels
from ._parallel import run_parts
from ._util import check_ints, numel

__all__ = ["pool2d", "pool2d_grad"]

_TYPES = ("max", "avg")
_ATTRS = {"pooling_type": "max", "ksize": REQUIRED, "strides": [1, 1], "paddings": [0, 0],
          "global_pooling": False}

Window = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]


def _check_attrs(op: str):
    def check(attrs: dict[str, Any]) -> None:
        if attrs["pooling_type"] not in _TYPES:
            raise OpError(f"{op}: attribute 'pooling_type' expects one of {list(_TYPES)}, given "
                          f"{attrs['pooling_type']!r}")
        check_ints(op, "strides", attrs["strides"], n=2, minimum=1)
        check_ints(op, "paddings", attrs["paddings"], n=2, minimum=0)
        if attrs["global_pooling"]:
            return  # ksize and paddings are replaced by the input's size and 0
        check_ints(op, "ksize", attrs["ksize"], n=2, minimum=1)
        if any(p >= k for p, k in zip(attrs["paddings"], attrs["ksize"], strict=True)):
            raise OpError(f"{op}: attribute 'paddings' must be smaller than ksize "
                          f"{list(attrs['ksize'])} in each dimension (so every window holds an "
                          f"input cell), given {attrs['paddings']}")
    return check


def _window(op: str, x_shape: Sequence[int], attrs: dict[str, Any]) -> Window:
    """(ksize, strides, paddings, (OH, OW)) of a pooling, checked against the
    input shape; an unknown (-1) size is not checked and gives -1."""
    if len(x_shape) != 4:
        raise OpError(f"{op}: X must be 4-D [N, C, H, W], given shape {list(x_shape)}")
    if attrs["global_pooling"]:
        h, w = x_shape[2:]
        return (h, w), (1, 1), (0, 0), (1, 1)
    ksize, strides, paddings = (tuple(attrs[a]) for a in ("ksize", "strides", "paddings"))
    out = []
    for axis, size, k, s, p in zip(("height", "width"), x_shape[2:], ksize, strides, paddings,
                                   strict=True):
        if size == -1:
            out.append(-1)
            continue
        if k > size + 2 * p:
            raise OpError(f"{op}: ksize's {axis} {k} must not exceed the padded input {axis} "
                          f"{size + 2 * p}, given ksize {list(ksize)}, X {list(x_shape)}, paddings "
                          f"{list(paddings)}")
        out.append((size + 2 * p - k) // s + 1)
    return ksize, strides, paddings, (out[0], out[1])


def _span(k: int, s: int, out: int) -> slice:
    """The padded-input rows (or columns) that window offset ``k`` reads, one per output."""
    return slice(k, k + s * (out - 1) + 1, s)


def _padded(x: np.ndarray, paddings: tuple[int, int], fill: Any) -> np.ndarray:
    ph, pw = paddings
    if not (ph or pw):
        return x
    n, c, h, w = x.shape
    padded = np.full((n, c, h + 2 * ph, w + 2 * pw), fill, dtype=x.dtype)
    padded[:, :, ph:ph + h, pw:pw + w] = x
    return padded


def _cells(size: int, k: int, s: int, p: int, out: int) -> np.ndarray:
    """Real (non-padded) cells of each window along one axis."""
    start = np.arange(out) * s - p
    return np.minimum(start + k, size) - np.maximum(start, 0)


def _divisor(x_shape: Sequence[int], win: Window, dtype: np.dtype) -> np.ndarray:
    """Real cells per window, [OH, OW], in ``dtype`` so float32 stays float32."""
    ksize, strides, paddings, out = win
    rows, cols = (_cells(x_shape[2 + a], ksize[a], strides[a], paddings[a], out[a]) for a in (0, 1))
    return np.multiply.outer(rows, cols).astype(dtype)


def _pool_cpu(x: np.ndarray, is_max: bool, win: Window) -> np.ndarray:
    (kh, kw), (sh, sw), paddings, (oh, ow) = win
    out = np.empty((*x.shape[:2], oh, ow), dtype=x.dtype)

    def pool(p: slice) -> None:
        xpad, o = _padded(x[p], paddings, -np.inf if is_max else 0), out[p]
        for ky in range(kh):
            for kx in range(kw):
                cells = xpad[:, :, _span(ky, sh, oh), _span(kx, sw, ow)]
                if ky == kx == 0:
                    o[...] = cells
                elif is_max:
                    np.maximum(o, cells, out=o)
                else:
                    o += cells
        if not is_max:
            o /= _divisor(x.shape, win, x.dtype)

    run_parts(pool, x.shape[0], x.nbytes + out.nbytes * kh * kw, x)  # samples over threads
    return out


def _pool_grad_part(x: np.ndarray, out: np.ndarray, dout: np.ndarray, is_max: bool, win: Window,
                    dx: np.ndarray) -> None:
    """X@GRAD of some samples into ``dx``."""
    (kh, kw), (sh, sw), (ph, pw), (oh, ow) = win
    n, c, h, w = x.shape
    dxpad = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=x.dtype) if ph or pw else dx
    if not (ph or pw):
        dx.fill(0)
    if is_max:
        xpad = _padded(x, (ph, pw), -np.inf)  # a padded cell never wins
        searching = np.ones(out.shape, dtype=bool)  # windows whose first maximum is not found yet
        hit = np.empty(out.shape, dtype=bool)
        share = np.empty(out.shape, dtype=x.dtype)
    else:
        share = dout / _divisor(x.shape, win, x.dtype)
    for ky in range(kh):  # row-major window order: the first maximum wins
        for kx in range(kw):
            rows, cols = _span(ky, sh, oh), _span(kx, sw, ow)
            if is_max:
                np.logical_and(xpad[:, :, rows, cols] == out, searching, out=hit)
                searching ^= hit
                np.multiply(dout, hit, out=share)
            dxpad[:, :, rows, cols] += share
    if ph or pw:
        dx[...] = dxpad[:, :, ph:ph + h, pw:pw + w]


def _pool_grad_cpu(x: np.ndarray, out: np.ndarray, dout: np.ndarray, is_max: bool,
                   win: Window) -> np.ndarray:
    dx = np.empty(x.shape, dtype=x.dtype)
    (kh, kw) = win[0]
    run_parts(lambda p: _pool_grad_part(x[p], out[p], dout[p], is_max, win, dx[p]), x.shape[0],
              2 * x.nbytes + 3 * out.nbytes * kh * kw, x)  # samples over threads
    return dx


def _check_float(op: str, x: Any) -> None:
    if x.dtype.kind != "f":
        raise OpError(f"{op}: X must be a floating-point array, given dtype {x.dtype.name}")


def pool2d(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x = ins["X"]
    _check_float("pool2d", x)
    win = _window("pool2d", x.shape, attrs)
    is_max = attrs["pooling_type"] == "max"
    if ctx.xp is np:
        return {"Out": _pool_cpu(x, is_max, win)}
    ksize, strides, paddings, out_hw = win
    return {"Out": cuda_kernels.pool2d_forward(x, is_max, ksize, strides, paddings, out_hw)}


def pool2d_grad(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, out, dout = ins["X"], ins["Out"], ins["Out@GRAD"]
    _check_float("pool2d_grad", x)
    win = _window("pool2d_grad", x.shape, attrs)
    want = (*x.shape[:2], *win[3])
    for slot, a in (("Out", out), ("Out@GRAD", dout)):
        if tuple(a.shape) != want or a.dtype != x.dtype:
            raise OpError(f"pool2d_grad: {slot} must be {x.dtype.name} of shape {list(want)}, "
                          f"given {a.dtype.name} of shape {list(a.shape)}")
    if not ctx.wants("X@GRAD"):
        return {}
    is_max = attrs["pooling_type"] == "max"
    if ctx.xp is np:
        return {"X@GRAD": _pool_grad_cpu(x, out, dout, is_max, win)}
    ksize, strides, paddings, _ = win
    return {"X@GRAD": cuda_kernels.pool2d_backward(x, out, dout, is_max, ksize, strides, paddings)}


def _infer_shape(shapes: dict, attrs: dict[str, Any]) -> dict:
    x = shapes["X"][0]
    return {"Out": [(*x[:2], *_window("pool2d", x, attrs)[3])]}


def _infer_grad_shape(shapes: dict, attrs: dict[str, Any]) -> dict:
    _window("pool2d_grad", shapes["X"][0], attrs)
    return {"X@GRAD": [shapes["X"][0]]}


def _reads(x: Sequence[int], attrs: dict[str, Any]) -> tuple[int, int]:
    """(window cells read, output elements); a -1 dimension counts as 1."""
    ksize, _, _, out_hw = _window("pool2d", x, attrs)
    out = numel((*x[:2], *out_hw))
    return out * numel(ksize), out


def _cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    reads, out = _reads(shapes["X"][0], attrs)
    return float(reads), float((reads + out) * itemsize)


def _grad_cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    # reads X's windows, Out and Out@GRAD; writes X@GRAD
    x = shapes["X"][0]
    reads, out = _reads(x, attrs)
    return float(reads), float((reads + 2 * out + numel(x)) * itemsize)


# The max gradient needs X and Out to find each window's first maximum; the
# average gradient needs only X's shape.
register(OpDef("pool2d", inputs=["X"], outputs=["Out"], attrs=_ATTRS,
               check_attrs=_check_attrs("pool2d"), infer_shape=_infer_shape, cost=_cost,
               kernel=pool2d, grad=make_grad("pool2d_grad", inputs=["X"], outputs=["Out"],
                                             grads_of=["Out"], grads_for=["X"])))
register(OpDef("pool2d_grad", inputs=["X", "Out", "Out@GRAD"], outputs=[optional("X@GRAD")],
               attrs=_ATTRS, check_attrs=_check_attrs("pool2d_grad"), infer_shape=_infer_grad_shape,
               cost=_grad_cost, kernel=pool2d_grad))
