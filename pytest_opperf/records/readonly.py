"""Read-only containers for what a results file's records share between runs.

A file of many small runs repeats the same empty lists and the same op counts in every run
(``"counts": {"conv2d": 1}, "step_ms": [], "notes": []``); one object for each, shared by every
run that holds it, saves a fifth of such a file's records. Shared objects must not change: each
of these refuses any change with a ``TypeError`` (a copy, ``list(x)`` / ``dict(x)``, is the
caller's to change), and copies and pickles of them are plain lists and dicts. They are lists
and dicts to every reader and to ``json``.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["EMPTY", "ReadOnlyDict", "ReadOnlyList", "shared_list", "shared_dict"]

_WHY = "a record read from a results file is shared between runs and read-only: change a copy"


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(_WHY)


class ReadOnlyList(list):
    """A list that refuses to change."""

    __slots__ = ()
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (list, (list(self),))


class ReadOnlyDict(dict):
    """A dict that refuses to change."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (dict, (dict(self),))


EMPTY: list[Any] = ReadOnlyList()


def shared_list(values: list[Any]) -> list[Any]:
    """``values``, or :data:`EMPTY` when it is empty (the one empty list every run shares)."""
    return values if values else EMPTY


def shared_dict(items: dict[Any, Any], memo: dict[Any, Any]) -> dict[Any, Any]:
    """One read-only dict for all equal ``items`` of hashable values seen through ``memo``."""
    key = ("dict", tuple(items.items()))
    shared = memo.get(key)
    if shared is None:
        shared = memo[key] = ReadOnlyDict(items)
    return shared
