"""The profiler adapters (``pytest_opperf.torch``, ``pytest_opperf.paddle``) use the core through
its public seams only: no private attribute of a core module, of a run or table they are given,
or of the core's :class:`~pytest_opperf.recorded.ProfilerRecorder` they fill in."""

from __future__ import annotations

import ast
from pathlib import Path

from pytest_opperf import recorded

PACKAGE = Path(__file__).parent.parent / "pytest_opperf"
ADAPTERS = ("torch", "paddle")
# names the adapters give core objects: a run (measure.Run), a timers table, a recorder
CORE_OBJECTS = {"run", "table", "recorder"}


def _core_modules(tree: ast.Module) -> set[str]:
    """The names a module binds to modules of the core (``from pytest_opperf import measure``,
    ``from .. import timers``, ``import pytest_opperf.recorded as recorded``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            core = node.level >= 2 or (node.module or "").startswith("pytest_opperf")
            if core:
                names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names
                      if a.name.startswith("pytest_opperf")}
    return names


def _root(node: ast.expr) -> str | None:
    """``run`` of ``run._table``, ``self.run`` of ``self.run._trace``; ``self`` alone is
    ``self``."""
    if isinstance(node, ast.Name):
        return node.id
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "self"):
        return f"self.{node.attr}"
    return None


def _private(node: ast.AST) -> ast.Attribute | None:
    """``node`` when it reads a private attribute (``x._y``, not ``x.__y__``)."""
    if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
            and not node.attr.startswith("__"):
        return node
    return None


def _recorders(tree: ast.Module) -> list[ast.ClassDef]:
    """The module's subclasses of the core's ProfilerRecorder."""
    return [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
            and any(ast.unparse(b).endswith("ProfilerRecorder") for b in c.bases)]


def private_uses(source: str, base_private: set[str]) -> list[str]:
    """The private attributes of the core a module's source reaches into: of a core module or
    a core object anywhere; in a subclass of ProfilerRecorder, the base's private ones too."""
    tree = ast.parse(source)
    core = _core_modules(tree) | CORE_OBJECTS | {f"self.{n}" for n in CORE_OBJECTS}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level >= 2 or (node.module or "")
                                                 .startswith("pytest_opperf")):
            found += [f"{node.lineno}: imports {a.name}" for a in node.names
                      if a.name.startswith("_")]
        attribute = _private(node)
        if attribute is not None and _root(attribute.value) in core:
            found.append(f"{attribute.lineno}: {ast.unparse(attribute)}")
    for cls in _recorders(tree):
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef) and node.name in base_private:
                found.append(f"{node.lineno}: overrides ProfilerRecorder.{node.name}")
            attribute = _private(node)
            if (attribute is not None and _root(attribute.value) == "self"
                    and attribute.attr in base_private):
                found.append(f"{attribute.lineno}: {ast.unparse(attribute)}")
    return found


def _base_private() -> set[str]:
    return {n for n in vars(recorded.ProfilerRecorder) if n.startswith("_")
            and not n.startswith("__")} | {"_lock"}


def test_the_check_finds_what_the_adapters_did():
    before = ("from pytest_opperf import measure, recorded\n"
              "class R(recorded.ProfilerRecorder):\n"
              "    def _on_flush(self):\n        self._lock.acquire()\n"
              "def f(table):\n    run = measure.active_run()\n"
              "    return run._table is table, measure._active, self.run._trace_events\n")
    assert len(private_uses(before, _base_private())) == 5
    after = ("import torch\nfrom pytest_opperf import measure\n"
             "def f(table, func):\n    return measure.run_of(table), torch._C, func._schema\n")
    assert private_uses(after, _base_private()) == []


def test_the_adapters_use_public_seams_of_the_core():
    base_private = _base_private()
    found = [f"{path.relative_to(PACKAGE)}:{use}"
             for adapter in ADAPTERS for path in sorted((PACKAGE / adapter).rglob("*.py"))
             for use in private_uses(path.read_text(), base_private)]
    assert not found, "\n".join(found)
