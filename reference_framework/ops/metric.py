"""Evaluation ops: top_k and accuracy (no gradients: they only measure).

``top_k`` returns, along X's last axis, the k largest values in descending
order and their int64 indices; equal values keep their order, so among ties the
lower index comes first. ``accuracy`` counts a sample as correct when its label
is among its top-k indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..registry import KernelContext, OpDef, OpError, register


def top_k(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    x, k, xp = ins["X"], attrs["k"], ctx.xp
    if x.ndim < 1 or k > x.shape[-1]:
        raise OpError(f"top_k: attribute 'k' must be at most X's last dim "
                      f"({x.shape[-1] if x.ndim else 'none: X is a scalar'}), given {k}")
    if k == 1:  # the accuracy evaluator's case; argmax returns the first of equal maxima
        indices = x.argmax(axis=-1)[..., None]
    else:
        # A stable ascending sort of -x is descending with ties in index order
        # (cupy's sort is always stable and takes no kind).
        order = xp.argsort(-x, axis=-1, kind="stable") if xp is np else xp.argsort(-x, axis=-1)
        indices = order[..., :k]
    return {"Out": xp.take_along_axis(x, indices, axis=-1),
            "Indices": indices.astype(xp.int64, copy=False)}


def accuracy(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    indices, label, xp = ins["Indices"], ins["Label"], ctx.xp
    if indices.ndim != 2:
        raise OpError(f"accuracy: Indices must be 2-D [N, k], given shape {list(indices.shape)}")
    n = indices.shape[0]
    if label.shape != (n, 1):
        raise OpError(f"accuracy: Label must have shape [{n}, 1] (one label per row of Indices), "
                      f"given {list(label.shape)}")
    if label.dtype.kind not in "iu":
        raise OpError("accuracy: Label must have an integer dtype such as int64, given "
                      f"{label.dtype.name}")
    correct = (indices == label).any(axis=1).sum(dtype=xp.int64).reshape(1)
    # An empty batch has accuracy 0, not 0/0.
    acc = correct.astype(xp.float32) / xp.float32(max(n, 1))
    return {"Accuracy": acc, "Correct": correct, "Total": xp.full(1, n, dtype=xp.int64)}


def _check_k(attrs: dict[str, Any]) -> None:
    if attrs["k"] < 1:
        raise OpError(f"top_k: attribute 'k' expects an int >= 1, given {attrs['k']!r}")


def _infer_top_k(shapes: dict, attrs: dict[str, Any]) -> dict:
    x, k = shapes["X"][0], attrs["k"]
    if len(x) < 1 or (x[-1] != -1 and k > x[-1]):
        raise OpError("top_k: attribute 'k' must be at most X's last dim "
                      f"({x[-1] if x else 'none'}), given {k}")
    out = tuple(x[:-1]) + (k,)
    return {"Out": [out], "Indices": [out]}


def _infer_accuracy(shapes: dict, attrs: dict[str, Any]) -> dict:
    return {"Accuracy": [(1,)], "Correct": [(1,)], "Total": [(1,)]}


# accuracy reads Out only to keep the reference framework's signature; the
# decision uses Indices alone.
register(OpDef("top_k", inputs=["X"], outputs=["Out", "Indices"], attrs={"k": 1},
               check_attrs=_check_k, infer_shape=_infer_top_k, kernel=top_k))
register(OpDef("accuracy", inputs=["Out", "Indices", "Label"],
               outputs=["Accuracy", "Correct", "Total"], infer_shape=_infer_accuracy,
               kernel=accuracy))
