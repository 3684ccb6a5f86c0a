"""One role per process, chosen once (pytest_opperf/glue/roles.py): no other module asks what role
it runs in, and each process gets exactly the role it is.

What counts as a role flag (:func:`role_flags`), anywhere in a module of ``pytest_opperf`` other
than ``roles.py``:

1. an identifier named ``is_worker``, ``own_loop``, ``ab_benchmark``, ``step_handover`` or
   ``callgrind_pass`` (a variable, attribute, parameter, keyword argument, dataclass field,
   function or class attribute name): the flags the roles replaced, whatever holds them;
2. the attribute ``ab`` of ``self`` (``self.ab``): an A/B session hung on a session of any role;
3. pytest-xdist's ``workerinput`` and ``workeroutput``, as an attribute (``config.workerinput``)
   or as a string (``hasattr(config, "workerinput")``, ``getattr(node, "workeroutput")``): what
   tells a worker from its controller, and the worker's channel back;
4. asking the plugin manager what is loaded: any call of ``has_plugin``/``hasplugin``, and any
   call of ``get_plugin``/``getplugin`` but for pytest's own ``"terminalreporter"`` (the A/B
   side's plugin is found that way);
5. the valgrind child's environment variable, ``CHILD_ENV``, outside ``instructions.py``, which
   defines it and sets it for the child it starts.

Not role flags: the A/B side plugin reading its socket's descriptor (``ab/side.py``: it is loaded
only by ``-p`` in a side); ``plugin._settings`` reading the options a parent fixed
(``child.parent_options``: where the options come from, not what the process does with them); and
``xdist_gpu.set_worker_device`` reading ``PYTEST_XDIST_WORKER`` before any role exists, to give a
worker its GPU before a conftest can touch CUDA.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_opperf.glue import roles
from pytest_opperf.glue.settings import Settings
from pytest_opperf.workcounts import instructions

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_opperf"
ROLE_MODULES = {"glue/roles.py"}  # where the role is chosen
FLAG_NAMES = {"is_worker", "own_loop", "ab_benchmark", "step_handover", "callgrind_pass"}
XDIST_NAMES = {"workerinput", "workeroutput"}
PROBES = {"has_plugin", "hasplugin"}
LOOKUPS = {"get_plugin", "getplugin"}
ALLOWED_LOOKUPS = {"terminalreporter"}


def role_flags(source: str, module: str = "<module>") -> list[str]:
    """Every role flag in ``source`` (module docstring), one line each: ``module:line: what``."""
    found: list[str] = []

    def flag(node: ast.AST, what: str) -> None:
        found.append(f"{module}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
            if node.attr == "ab" and isinstance(node.value, ast.Name) and node.value.id == "self":
                flag(node, "self.ab")
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg is not None:
            names = [node.arg]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in XDIST_NAMES:
                flag(node, f"the string {node.value!r}")
        elif isinstance(node, ast.alias):
            names = [(node.asname or node.name).rpartition(".")[2]]
        for name in names:
            if name in FLAG_NAMES:
                flag(node, name)
            elif name in XDIST_NAMES:
                flag(node, f"xdist's {name}")
            elif name == "CHILD_ENV" and module != "workcounts/instructions.py":
                flag(node, "CHILD_ENV (the valgrind child's environment)")
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if called in PROBES:
                flag(node, f"{called}(...)")
            elif called in LOOKUPS:
                arg = node.args[0] if node.args else None
                if not (isinstance(arg, ast.Constant) and arg.value in ALLOWED_LOOKUPS):
                    flag(node, f"{called}({ast.unparse(arg) if arg is not None else ''})")
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_no_role_flag_outside_the_role_module():
    found = []
    for path in MODULES:
        name = path.relative_to(PACKAGE).as_posix()
        if name not in ROLE_MODULES:
            found += role_flags(path.read_text(), name)
    assert found == []


def test_the_role_module_is_where_the_role_is_asked():
    # the finder sees the role module's own probes: it is not blind to the ones it looks for
    found = role_flags((PACKAGE / "glue" / "roles.py").read_text(), "glue/roles.py")
    assert any("workerinput" in line for line in found)
    assert any("has_plugin" in line for line in found)
    assert any("CHILD_ENV" in line for line in found)


@pytest.mark.parametrize("snippet, what", [
    ("self.is_worker = True", "is_worker"),
    ("if recorder.own_loop: pass", "own_loop"),
    ("Recorder(ab_benchmark=f)", "ab_benchmark"),
    ("def f(step_handover=None): pass", "step_handover"),
    ("class R:\n    callgrind_pass: int = 0", "callgrind_pass"),
    ("if self.ab is not None: pass", "self.ab"),
    ("x = hasattr(config, 'workerinput')", "'workerinput'"),
    ("config.workeroutput['opperf'] = 1", "workeroutput"),
    ("config.pluginmanager.has_plugin('opperf-ab-side')", "has_plugin"),
    ("config.pluginmanager.get_plugin(PLUGIN_NAME)", "get_plugin(PLUGIN_NAME)"),
    ("os.environ.get(instructions.CHILD_ENV)", "CHILD_ENV"),
    ("from pytest_opperf.workcounts.instructions import CHILD_ENV", "CHILD_ENV"),
])
def test_each_kind_of_role_flag_is_found(snippet, what):
    found = role_flags(snippet, "m.py")
    assert found and all(line.startswith("m.py:") for line in found)
    assert any(what in line for line in found), found


def test_what_is_not_a_role_flag_is_not_found():
    source = ("tr = config.pluginmanager.get_plugin('terminalreporter')\n"
              "self.abort = 1\nother.ab = 2\nfixed = child.parent_options()\n")
    assert role_flags(source, "m.py") == []
    assert role_flags("CHILD_ENV = 'X'\nenv[CHILD_ENV] = '/tmp'\n",
                      "workcounts/instructions.py") == []


class _Plugins:
    def __init__(self, *names: str) -> None:
        self.names = set(names)

    def has_plugin(self, name: str) -> bool:
        return name in self.names


def _config(worker=False, plugins=(), collect_only=False, dist="no"):
    config = SimpleNamespace(pluginmanager=_Plugins(*plugins),
                             getoption=lambda name, default=None: {
                                 "collectonly": collect_only, "dist": dist}.get(name, default))
    if worker:
        config.workerinput = {"workerid": "gw0"}
    return config


@pytest.mark.parametrize("config, settings, env, role", [
    (_config(), Settings(), {}, "plain"),
    (_config(dist="load"), Settings(), {}, "xdist-controller"),
    (_config(worker=True), Settings(), {}, "xdist-worker"),
    (_config(worker=True), Settings(gpu_workers=True), {}, "gpu-worker"),
    (_config(), Settings(compare="HEAD~1"), {}, "ab-main"),
    (_config(collect_only=True), Settings(compare="HEAD~1"), {}, "plain"),
    (_config(plugins=["opperf-ab-side"]), Settings(), {}, "ab-side"),
    (_config(), Settings(), {instructions.CHILD_ENV: "/tmp/x"}, "valgrind-child"),
])
def test_each_process_gets_its_one_role(monkeypatch, config, settings, env, role):
    monkeypatch.delenv(instructions.CHILD_ENV, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert roles.choose(config, settings) == role


def test_every_role_has_its_session_class():
    from pytest_opperf.ab.session import ABMain
    from pytest_opperf.ab.side import SideSession
    from pytest_opperf.glue.main_session import MainSession

    assert set(roles.ROLES) == {"plain", "xdist-controller", "xdist-worker", "gpu-worker",
                                "ab-main", "ab-side", "valgrind-child"}
    # the main roles gate, report and write files; the child roles do not
    for main in (MainSession, roles.XdistController, ABMain):
        assert hasattr(main, "pytest_terminal_summary") and hasattr(main, "pytest_runtestloop")
    for child in (roles.XdistWorker, roles.GpuWorker, roles.ValgrindChild, SideSession):
        assert not issubclass(child, MainSession)
        assert not hasattr(child, "pytest_terminal_summary")
