"""Dependency rules: pure modules never import pytest; the plugin never imports the framework or
cupy; no import circle anywhere in the package, its subpackages included."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_opperf"
PURE = ["timers", "stattree", "core.stats", "results", "records.checks", "records.reader",
        "records.strict_json",
        "records.atomic", "core.machine", "records.handback", "core.port", "comparison.gate",
        "comparison.regression", "comparison.baseline_checks", "reports.report", "measure",
        "device", "cli", "comparison.thresholds", "comparison.metrics",
        "comparison.verdict", "comparison.keys", "ab.paired", "ab.signedrank", "ab.pairs",
        "ab.decide", "ab.family", "ab.tuning", "ab.cost", "ab.extensions", "ab.extras",
        "ab.processes", "ab.controller", "ab.tests_from",
        "history.suspects", "history.trends",
        "workcounts.workcount", "workcounts.valgrind", "workcounts.callgrind",
        "workcounts.callgrind_dumps", "workcounts.valgrind_run", "workcounts.instructions"]
MODULES = sorted(PACKAGE.rglob("*.py"))


def test_pure_modules_do_not_import_pytest():
    code = (f"import sys\nimport {', '.join('pytest_opperf.' + m for m in PURE)}\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pytest', '_pytest', 'reference_framework', 'cupy'))\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_framework_or_cupy_import(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            assert name.split(".")[0] not in ("reference_framework", "cupy"), (
                f"{path.name}: import {name}"
            )


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every module of the package and the modules of the package it imports, wherever the
    import stands (top level, in a function, under TYPE_CHECKING): a circle through any of them is
    a circle of the design."""
    modules = {_module(p): p for p in MODULES}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{node.module}" if node.module else anchor
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_circle():
    graph = import_graph()
    assert {"pytest_opperf.ab.paired", "pytest_opperf.history.store", "pytest_opperf.torch"} <= set(
        graph)
    # the graph sees imports
    assert "pytest_opperf.comparison.thresholds" in graph["pytest_opperf.ab.paired"]
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_the_ab_layers_import_downwards_only():
    # the decisions know nothing of the schedule or the processes; the processes nothing of
    # the schedule or the decisions; the schedule asks the decisions and drives the processes
    graph = import_graph()
    ab = "pytest_opperf.ab."
    upper = {ab + m for m in ("session", "controller", "processes", "side", "checkout")}
    for pure in ("paired", "signedrank", "decide", "tuning", "pairs", "cost", "extensions",
                 "extras", "samples", "generations"):
        assert not _reaches(graph, ab + pure) & upper, pure
    assert not _reaches(graph, ab + "processes") & {ab + "controller", ab + "decide",
                                                    ab + "paired"}
    assert {ab + "decide", ab + "processes", ab + "tuning"} <= graph[ab + "controller"]


def test_the_ab_modules_stay_small():
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PACKAGE / "ab").glob("*.py")}
    assert {"controller.py", "processes.py", "decide.py", "tuning.py"} <= set(sizes)
    assert {name: n for name, n in sizes.items() if n >= 500} == {}


def test_the_schedules_rules_fit_in_its_docstring_over_few_constants():
    # the controller's rules (one allocation and one stopping rule) are stated in its module
    # docstring, over the constants of tuning.py: both stay small enough to reason about
    from pytest_opperf.ab import controller, tuning

    assert controller.__doc__ is not None and len(controller.__doc__.strip().splitlines()) <= 40
    constants = [name for name in vars(tuning) if name.isupper() and not name.startswith("_")]
    assert 0 < len(constants) < 19, constants


# The layers of the package, bottom up. A module imports only its own layer and those below
# (a package's ``__init__``, docstrings only, is no layer's), except the few named in ABOVE. pytest
# glue (``glue``, ``plugin``, the A/B processes) is the top: what measures, compares and reports
# never depends on which process it runs in.
LAYERS = [
    ("the instrumentation and the records", {
        "timers", "stattree", "device", "results", "measure", "recorded", "hookspec", "core",
        "records", "gpu", "workcounts"}),
    ("comparison and reports", {"comparison", "reports", "ab.paired", "ab.signedrank",
                                "ab.pairs", "ab.decide", "ab.family", "ab.samples",
                                "ab.generations", "ab.tuning", "ab.render", "ab.protocol",
                                "ab.cost", "ab.extensions", "ab.extras", "history",
                                "explain.diff", "explain.profile"}),
    ("processes and commands", {"ab", "bisect", "cli", "__main__", "torch", "paddle",
                                "explain.changes", "explain.session"}),
    ("pytest glue", {"glue", "plugin", "ab.session", "ab.side"}),
]
PACKAGES = {_module(p) for p in MODULES if p.name == "__init__.py"}  # docstrings only: no layer
ABOVE = {  # module -> the modules above its layer that it imports, and why
    "pytest_opperf.workcounts.instructions": {
        "pytest_opperf.glue.child"},
    # ^ it starts the valgrind child: the one launcher of child pytest processes
    "pytest_opperf.bisect.runner": {"pytest_opperf.glue.child"},
    "pytest_opperf.bisect.command": {"pytest_opperf.glue.child", "pytest_opperf.glue.options"},
    # ^ a bisection's A/B sides are child pytest processes, started by the one launcher with the
    #   options the table passes to a child (and the command refuses the others)
}


def _layer(module: str) -> int:
    name = module.removeprefix("pytest_opperf").lstrip(".")
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    assert best is not None or name == "", f"{module} is in no layer: add it to LAYERS"
    return best[0] if best else len(LAYERS)


def test_every_subpackage_imports_its_layer_and_those_below():
    graph = import_graph()
    wrong = []
    for module, imports in graph.items():
        for target in imports - ABOVE.get(module, set()):
            if target not in PACKAGES and _layer(target) > _layer(module):
                wrong.append(f"{module} ({LAYERS[_layer(module)][0]}) imports {target} "
                             f"({LAYERS[_layer(target)][0]})")
    assert wrong == []


def test_the_layer_check_finds_an_upward_import():
    assert _layer("pytest_opperf.comparison.gate") > _layer("pytest_opperf.results")
    assert _layer("pytest_opperf.ab.decide") < _layer("pytest_opperf.ab.controller")
    assert _layer("pytest_opperf.glue.roles") == len(LAYERS) - 1


def test_no_module_is_over_500_lines():
    sizes = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines()) for p in MODULES}
    assert {name: n for name, n in sizes.items() if n > 500} == {}
