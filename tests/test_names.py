"""One concept, one name: no two modules of the package define a public top-level class or
constant (a capitalised name: classes, constants, type aliases) of the same name. Nothing is
allowed twice: a reader who meets ``Recorder`` or ``Samples`` should know which one it is."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "pytest_opperf"


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's statements, those under a top-level ``if`` or ``try`` too."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    yield from _top_level(handler.body)
                yield from _top_level(node.finalbody)
        else:
            yield node


def public_names(source: str) -> list[str]:
    """The public classes and capitalised names a module's source defines at its top level."""
    names = []
    for node in _top_level(ast.parse(source).body):
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name) and t.id[:1].isupper()]
    return [n for n in names if not n.startswith("_")]


def collisions(modules: dict[str, str]) -> dict[str, list[str]]:
    """The names more than one of ``modules`` (name: source) defines, with those modules."""
    where: dict[str, list[str]] = {}
    for module, source in modules.items():
        for name in dict.fromkeys(public_names(source)):
            where.setdefault(name, []).append(module)
    return {name: found for name, found in where.items() if len(found) > 1}


def test_the_check_finds_a_name_two_modules_define():
    modules = {"a.py": "class Recorder:\n    pass\nLIMIT = 3\n_private = 1\n",
               "b.py": "try:\n    import x\nexcept ImportError:\n    class Recorder: ...\n",
               "c.py": "LIMIT: int = 4\nlowercase = 5\n", "d.py": "from a import Recorder\n"}
    assert collisions(modules) == {"Recorder": ["a.py", "b.py"], "LIMIT": ["a.py", "c.py"]}


def test_no_two_modules_define_the_same_public_name():
    modules = {str(p.relative_to(PACKAGE)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}
    found = collisions(modules)
    assert not found, "\n".join(f"{name}: {', '.join(where)}" for name, where in found.items())
