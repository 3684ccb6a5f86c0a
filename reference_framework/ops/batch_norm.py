"""Batch normalisation over N,H,W of NCHW (or N of [N, C]): batch_norm and its gradient.

Training normalises with the batch statistics and folds them into the running
ones in place (``MeanOut`` is the ``Mean`` array, ``VarianceOut`` the
``Variance`` array): ``running = running * momentum + batch * (1 - momentum)``,
with the biased batch variance. ``is_test`` normalises with the running
statistics and leaves them alone.

``SavedMean`` holds the batch mean and ``SavedVariance`` - despite its name, as
in the reference framework - the batch's inverse standard deviation
``1 / sqrt(var + epsilon)``, which is what the gradient multiplies by.

The variance is computed in two passes (mean first, then the mean of squared
deviations from it): a one-pass ``E[x^2] - E[x]^2`` cancels catastrophically in
float32 once the mean is large next to the spread.

Speed: per-channel reductions go through BLAS on an (N, C, H*W) view - sums as
a matrix-vector product with ones, sums of products as a stack of dot products.
Single-threaded on the ResNet-50 shapes at batch 8 the sums took 0.55-0.75x the
time of ``sum(axis=(0, 2, 3))``, and the dot products a fifth to a half of
squaring into a temporary and summing. The centred copy doubles as the output
buffer, so each pass allocates one array the size of X. Big passes are split
over samples on the ``_parallel`` threads; the per-sample partial sums are
added in sample order, as the unsplit reduction adds them, so results are
bitwise the single-threaded ones (2 cores, idle machine: 109-116 -> 86-87 ms
forward and 203-214 -> 129-132 ms backward per training step's worth). Cache-sized blocks,
which pass over memory 4-5 times instead of 8-14, measured slower, alone
(226 -> 345 ms) and inside a training step (409 -> 500 ms).
"""

from __future__ import annotations

from typing import Any

from ..backend import get_array_module
from ..registry import KernelContext, OpDef, OpError, make_grad, optional, register
from ._parallel import run_parts
from ._util import numel

_STATS = ("Scale", "Bias", "Mean", "Variance")


def _as3d(op: str, x: Any) -> Any:
    """X as an (N, C, spatial) view: NCHW gives (N, C, H*W), [N, C] gives (N, C, 1)."""
    if x.ndim not in (2, 4):
        raise OpError(f"{op}: X must be 4-D NCHW or 2-D [N, C], given shape {list(x.shape)}")
    return x.reshape(x.shape[0], x.shape[1], -1)


def _check_channels(op: str, channels: int, arrays: dict[str, Any]) -> None:
    for slot, a in arrays.items():
        if a.shape != (channels,):
            raise OpError(f"{op}: {slot} must have shape [{channels}] (X's channels), given "
                          f"{list(a.shape)}")


def _sample_sums(x3: Any) -> Any:
    """Sums over S of an (N, C, S) array, shape (N, C), in its dtype."""
    n, c, s = x3.shape
    ones = get_array_module(x3).ones(s, dtype=x3.dtype)
    return (x3.reshape(n * c, s) @ ones).reshape(n, c)


def _sample_dots(a3: Any, b3: Any) -> Any:
    """Sums over S of ``a3 * b3`` for (N, C, S) arrays: (N, C), with no (N, C, S) temporary."""
    n, c, _ = a3.shape
    return (a3[:, :, None, :] @ b3[:, :, :, None]).reshape(n, c)


def _total(parts: list[Any]) -> Any:
    """Per-channel totals of per-part (n_i, C) results, summed in sample order as one (N, C)."""
    rows = parts[0] if len(parts) == 1 else get_array_module(parts[0]).concatenate(parts)
    return rows.sum(axis=0)


def _per_channel(v: Any) -> Any:
    """A (C,) vector shaped to broadcast over an (N, C, S) array."""
    return v.reshape(1, -1, 1)


def _normalise(x3: Any, xp: Any) -> tuple[Any, Any, Any]:
    """(X - mean, mean, biased variance) per channel, each full-size pass split
    over samples; the per-sample partial sums are added in sample order, as the
    unsplit pass adds them."""
    n, _, s = x3.shape
    count = n * s
    mean = _total(run_parts(lambda p: _sample_sums(x3[p]), n, x3.nbytes, x3)) / count
    xc3 = xp.empty(x3.shape, dtype=x3.dtype)

    def centre(p: slice) -> Any:
        xp.subtract(x3[p], _per_channel(mean), out=xc3[p])
        return _sample_dots(xc3[p], xc3[p])

    var = _total(run_parts(centre, n, 2 * x3.nbytes, x3)) / count
    return xc3, mean, var


def batch_norm(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x = ins["X"]
    x3 = _as3d("batch_norm", x)
    _check_channels("batch_norm", x3.shape[1], {s: ins[s] for s in _STATS})
    scale, bias, run_mean, run_var = (ins[s] for s in _STATS)
    eps, momentum = attrs["epsilon"], attrs["momentum"]
    xp = ctx.xp
    if attrs["is_test"]:
        inv_std = 1 / xp.sqrt(run_var.astype(x.dtype, copy=False) + eps)
        a = scale * inv_std
        y3 = x3 * _per_channel(a)
        y3 += _per_channel(bias - run_mean.astype(x.dtype, copy=False) * a)
        mean = run_mean
    else:
        y3, mean, var = _normalise(x3, xp)  # the centred copy is the output buffer from here on
        inv_std = 1 / xp.sqrt(var + eps)
        a, b = _per_channel(scale * inv_std), _per_channel(bias)

        def affine(p: slice) -> None:
            xp.multiply(y3[p], a, out=y3[p])
            xp.add(y3[p], b, out=y3[p])

        run_parts(affine, x3.shape[0], 2 * y3.nbytes, y3)
        xp.multiply(run_mean, momentum, out=run_mean)
        run_mean += mean * (1 - momentum)
        xp.multiply(run_var, momentum, out=run_var)
        run_var += var * (1 - momentum)
    outs = {"Y": y3.reshape(x.shape), "MeanOut": run_mean, "VarianceOut": run_var}
    if ctx.wants("SavedMean"):
        outs["SavedMean"] = mean.copy() if mean is run_mean else mean
    if ctx.wants("SavedVariance"):
        outs["SavedVariance"] = inv_std
    return outs


def batch_norm_grad(ins: dict[str, Any], attrs: dict[str, Any],
                    ctx: KernelContext) -> dict[str, Any]:
    x, dy = ins["X"], ins["Y@GRAD"]
    scale, mean, inv_std = ins["Scale"], ins["SavedMean"], ins["SavedVariance"]
    x3 = _as3d("batch_norm_grad", x)
    _check_channels("batch_norm_grad", x3.shape[1], {"Scale": scale, "SavedMean": mean,
                                                     "SavedVariance": inv_std})
    if dy.shape != x.shape:
        raise OpError(f"batch_norm_grad: Y@GRAD must have X's shape {list(x.shape)}, given "
                      f"{list(dy.shape)}")
    xp = ctx.xp
    dy3 = dy.reshape(x3.shape)
    n, _, s = x3.shape
    count = n * s
    xc3 = xp.empty(x3.shape, dtype=x3.dtype)  # x - mean, then X@GRAD in place

    def sums(p: slice) -> tuple[Any, Any]:
        xp.subtract(x3[p], _per_channel(mean), out=xc3[p])
        # sum(dy * (x - mean)) per channel
        return _sample_sums(dy3[p]), _sample_dots(dy3[p], xc3[p])

    parts = run_parts(sums, n, 4 * x3.nbytes, x3, dy3)
    dbias, dot = _total([d for d, _ in parts]), _total([t for _, t in parts])
    outs = {}
    if ctx.wants("Scale@GRAD"):
        outs["Scale@GRAD"] = dot * inv_std
    if ctx.wants("Bias@GRAD"):
        outs["Bias@GRAD"] = dbias
    if ctx.wants("X@GRAD"):
        # dx = scale*inv_std * (dy - mean(dy) - xhat * mean(dy * xhat)), xhat = (x-mean) * inv_std,
        # regrouped so that each full-size pass is one ufunc on a buffer we own.
        k = scale * inv_std
        a, b = _per_channel(-k * inv_std * inv_std * dot / count), _per_channel(-k * dbias / count)

        def grad(p: slice) -> None:
            xc = xc3[p]
            xp.multiply(xc, a, out=xc)
            xp.add(xc, b, out=xc)
            xc += xp.multiply(dy3[p], _per_channel(k))

        run_parts(grad, n, 3 * x3.nbytes, x3, dy3)
        outs["X@GRAD"] = xc3.reshape(x.shape)
    return outs


def _channels(shapes: dict) -> int:
    """X's channel count, checked against Scale/Bias/Mean/Variance where known."""
    x = shapes["X"][0]
    if len(x) not in (2, 4):
        raise OpError(f"batch_norm: X must be 4-D NCHW or 2-D [N, C], given shape {list(x)}")
    c = x[1]
    for slot in ("Scale", "Bias", "Mean", "Variance", "SavedMean", "SavedVariance"):
        for shape in shapes.get(slot, ()):
            if len(shape) != 1 or (c != -1 and shape[0] not in (c, -1)):
                raise OpError(f"batch_norm: {slot} must have shape [{c}] (X's channels), given "
                              f"{list(shape)}")
    return c


def _infer(shapes: dict, attrs: dict[str, Any]) -> dict:
    c = _channels(shapes)
    stat = [(c,)]
    return {"Y": [shapes["X"][0]], "MeanOut": stat, "VarianceOut": stat, "SavedMean": stat,
            "SavedVariance": stat}


def _infer_grad(shapes: dict, attrs: dict[str, Any]) -> dict:
    c = _channels(shapes)
    return {"X@GRAD": [shapes["X"][0]], "Scale@GRAD": [(c,)], "Bias@GRAD": [(c,)]}


def _cost(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    n, c = numel(shapes["X"][0]), shapes["X"][0][1]
    # training: sum, subtract, square+accumulate, scale, shift; test: scale, shift
    flops = 2 * n if attrs["is_test"] else 6 * n
    return float(flops), float((2 * n + 8 * c) * itemsize)


def _cost_grad(shapes: dict, attrs: dict[str, Any], itemsize: int) -> tuple[float, float]:
    n, c = numel(shapes["X"][0]), shapes["X"][0][1]
    # sum dy, centre x, dot, two per-channel affine passes, dy scale, final add
    return float(8 * n), float((3 * n + 6 * c) * itemsize)


def _check_attrs(attrs: dict[str, Any]) -> None:
    if not 0.0 <= attrs["momentum"] <= 1.0:
        raise OpError("batch_norm: attribute 'momentum' expects a value in [0, 1], given "
                      f"{attrs['momentum']!r}")
    if not attrs["epsilon"] > 0.0:
        raise OpError("batch_norm: attribute 'epsilon' expects a positive value, given "
                      f"{attrs['epsilon']!r}")


_ATTRS = {"momentum": 0.9, "epsilon": 1e-5, "is_test": False}

# Backward needs X (to re-centre it), Scale, and the batch mean and inverse
# standard deviation; Y is not kept, and Bias only shapes its own gradient.
register(OpDef("batch_norm", inputs=["X", "Scale", "Bias", "Mean", "Variance"],
               outputs=["Y", "MeanOut", "VarianceOut", optional("SavedMean"),
                        optional("SavedVariance")], attrs=_ATTRS, check_attrs=_check_attrs,
               infer_shape=_infer, cost=_cost, kernel=batch_norm,
               grad=make_grad("batch_norm_grad", inputs=["X", "Scale"],
                              outputs=["SavedMean", "SavedVariance"], grads_of=["Y"],
                              grads_for=["X", "Scale", "Bias"])))
register(OpDef("batch_norm_grad", inputs=["X", "Scale", "SavedMean", "SavedVariance", "Y@GRAD"],
               outputs=[optional("X@GRAD"), optional("Scale@GRAD"), optional("Bias@GRAD")],
               attrs=_ATTRS, check_attrs=_check_attrs, infer_shape=_infer_grad, cost=_cost_grad,
               kernel=batch_norm_grad))
