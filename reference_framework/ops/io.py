"""``feed`` and ``fetch``: the ops the executor adds to move data in and out.

The feed holder and the fetch holder are scope variables holding Python lists,
one column per fed or fetched variable (attribute ``col``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import is_gpu_array, to_place
from ..registry import KernelContext, OpDef, OpError, register


def feed(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    holder, col = ins["X"], attrs["col"]
    if not 0 <= col < len(holder):
        raise OpError(f"feed: attribute 'col' is {col}, but {len(holder)} values were fed")
    return {"Out": to_place(holder[col], ctx.place)}  # host-to-device copy on a GPU


def fetch(ins: dict[str, Any], attrs: dict[str, Any], ctx: KernelContext) -> dict[str, Any]:
    holder = ctx.output_value("Out")
    if holder is None:
        raise OpError("fetch: the fetch holder variable has no list to write into")
    x, col = ins["X"], attrs["col"]
    if attrs["to_host"]:
        # A copy, so later in-place updates (momentum) cannot change what was
        # fetched; from a device this synchronises, as the reference's fetch did.
        value = x.get() if is_gpu_array(x) else np.array(x, copy=True)
    else:
        value = x.copy()
    holder.extend([None] * (col + 1 - len(holder)))
    holder[col] = value
    return {}


register(OpDef("feed", inputs=["X"], outputs=["Out"], attrs={"col": 0}, kernel=feed))
register(OpDef("fetch", inputs=["X"], outputs=["Out"], attrs={"col": 0, "to_host": True},
               kernel=fetch))
