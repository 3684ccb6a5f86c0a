"""Scopes: the tree of variable holders that programs run in.

Persistable variables (parameters, optimizer state) live in an outer scope
that outlives runs; the executor puts each run's temporaries in a local kid
scope and deletes it afterwards, as the reference report's executor did.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Scope", "ScopeVar", "global_scope", "scope_guard"]


class ScopeVar:
    """A named holder of one value (an array, or the feed/fetch lists)."""

    __slots__ = ("name", "value")

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: Any = None

    def __repr__(self) -> str:
        shape = getattr(self.value, "shape", None)
        dims = list(shape) if shape is not None else ""
        return f"ScopeVar({self.name!r}, {type(self.value).__name__}{dims})"


class Scope:
    """A scope: its own variables, a parent to look through, and kid scopes."""

    __slots__ = ("parent", "_vars", "_kids", "__weakref__")

    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self._vars: dict[str, ScopeVar] = {}
        self._kids: list[Scope] = []

    def var(self, name: str) -> ScopeVar:
        """The variable ``name`` of this scope, created here if it is not."""
        v = self._vars.get(name)
        if v is None:
            v = self._vars[name] = ScopeVar(name)
        return v

    def find_var(self, name: str) -> ScopeVar | None:
        """The variable ``name`` here or in the nearest ancestor that has it."""
        scope: Scope | None = self
        while scope is not None:
            v = scope._vars.get(name)
            if v is not None:
                return v
            scope = scope.parent
        return None

    def find_local_var(self, name: str) -> ScopeVar | None:
        return self._vars.get(name)

    def local_var_names(self) -> list[str]:
        return list(self._vars)

    def new_scope(self) -> Scope:
        """A new kid scope whose lookups fall back to this one."""
        kid = Scope(self)
        self._kids.append(kid)
        return kid

    def kids(self) -> list[Scope]:
        return list(self._kids)

    def delete_scope(self, kid: Scope) -> None:
        """Delete a kid scope and everything it holds."""
        try:
            self._kids.remove(kid)
        except ValueError:
            raise ValueError("delete_scope: the scope given is not a kid of this scope") from None
        kid._clear()

    def drop_kids(self) -> None:
        """Delete every kid scope."""
        kids, self._kids = self._kids, []
        for kid in kids:
            kid._clear()

    def _clear(self) -> None:
        self.drop_kids()
        self._vars.clear()
        self.parent = None

    def __contains__(self, name: str) -> bool:
        return self.find_var(name) is not None

    def __repr__(self) -> str:
        return f"Scope({len(self._vars)} vars, {len(self._kids)} kids)"


_global_scope = Scope()
_current_scope = _global_scope


def global_scope() -> Scope:
    """The scope programs run in unless told otherwise (see :func:`scope_guard`)."""
    return _current_scope


@contextmanager
def scope_guard(scope: Scope) -> Iterator[Scope]:
    """Make ``scope`` the global scope inside the block."""
    global _current_scope
    outer, _current_scope = _current_scope, scope
    try:
        yield scope
    finally:
        _current_scope = outer
