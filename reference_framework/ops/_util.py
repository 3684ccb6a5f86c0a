"""Small helpers shared by the op families: attribute checks and shape arithmetic."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

from ..registry import OpError

__all__ = ["check_ints", "numel", "shape_list"]


def check_ints(op: str, name: str, value: Any, n: int | None = None,
               minimum: int | None = None) -> None:
    """Raise unless ``value`` is a list of ``n`` ints, each at least ``minimum``."""
    ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value)
    if ok and n is not None:
        ok = len(value) == n
    if ok and minimum is not None:
        ok = all(v >= minimum for v in value)
    if not ok:
        what = f"{n} ints" if n is not None else "a list of ints"
        bound = f" each >= {minimum}" if minimum is not None else ""
        raise OpError(f"{op}: attribute {name!r} expects {what}{bound}, given {value!r}")


def numel(shape: Sequence[int]) -> int:
    """Element count of a shape; a -1 (batch) dimension counts as 1."""
    return prod(abs(d) for d in shape)


def shape_list(shape: Sequence[int]) -> list[int]:
    return [int(d) for d in shape]
