"""Dependency rules: pure modules never import pytest; the plugin never imports the framework or
cupy."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_opperf"
PURE = ["timers", "stattree", "stats", "results", "gate", "report", "measure", "device", "cli"]


def test_pure_modules_do_not_import_pytest():
    code = (f"import sys\nimport {', '.join('pytest_opperf.' + m for m in PURE)}\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pytest', '_pytest', 'reference_framework', 'cupy'))\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
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
