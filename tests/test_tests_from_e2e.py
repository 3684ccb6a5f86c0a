"""``bisect --tests-from`` end to end: a throwaway repository of a small pure-Python package
(tests/tests_from_repo.py) and a benchmark written after its commits, outside it; real A/B steps.
A decoy ``fastsum`` installed in the sides' site-packages must never be what a side measures.
The acceptance runs (40 commits, 1.5x, ten runs) are benchmarks/tests_from_acceptance.py's."""

from __future__ import annotations

import json
import math
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import jsonschema
import pytest

from tests.bisect_repo import commit, git
from tests.tests_from_repo import bench, make

ROOT = Path(__file__).parent.parent
SCHEMA = ROOT / "pytest_opperf" / "schema" / "opperf-bisect-1.schema.json"
DECOY = '"""A copy of fastsum installed in site-packages: never the one measured."""\n' \
        "_PASSES = 2\n\n\ndef work(n):\n    return n\n\n\ndef describe():\n    return 'decoy'\n"


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_", "OPPERF_"))}
    out["PYTHONPATH"] = str(ROOT)  # the release under test
    return out


def bisect(repo: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_opperf", "bisect", *args], cwd=repo,
                          env=env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def decoy_python(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """An interpreter whose site-packages holds a ``fastsum`` of its own (and reaches this one's
    packages through a .pth file): the sides' interpreter."""
    where = tmp_path_factory.mktemp("decoy-env")
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    sitedir = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                   "get_paths()['purelib'])"], capture_output=True, text=True,
                                  check=True).stdout.strip())
    (sitedir / "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    (sitedir / "fastsum").mkdir()
    (sitedir / "fastsum" / "__init__.py").write_text(DECOY)
    return str(python), sitedir / "fastsum"


def test_a_benchmark_written_outside_names_the_commit_and_each_side_imports_its_own(
        tmp_path, decoy_python):
    python, decoy = decoy_python
    repo = tmp_path / "repo"
    shas = make(repo, ["-", "-", 2.0, "-", "-"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "test_bench.py").write_text(bench())
    done = bisect(repo, shas[0], shas[-1], "--tests-from=worktree", "--python", python,
                  "--json", str(tmp_path / "b.json"), "--markdown", str(tmp_path / "b.md"),
                  "--", str(elsewhere / "test_bench.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"culprit: {shas[3]} [3/5] 'work 2x as slow'" in done.stdout
    doc = json.loads((tmp_path / "b.json").read_text())
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["culprits"][0]["verified"] and doc["ab_steps"] <= math.log2(5) + 3
    tf = doc["tests_from"]
    assert tf["source"] == "worktree" and tf["commit"] is None
    assert tf["files"] == [{"path": ".opperf-tests/test_bench.py",
                            "from": str(elsewhere / "test_bench.py"), "outside": True}]
    [imports] = tf["imports"]
    assert imports["module"] == "fastsum"
    # each side its commit's checkout: under the bisection's worktrees, one per commit
    base, head = Path(imports["base"]), Path(imports["head"])
    assert base.name == head.name == "fastsum" and base != head
    assert base.parent.name == shas[0][:12] and head.parent.name == shas[-1][:12]
    assert str(decoy.resolve()) not in json.dumps(doc)
    assert "bisect: tests from the working tree on both sides: .opperf-tests/test_bench.py" \
        in done.stdout
    assert "bisect: imports: fastsum: base imported it from " in done.stdout
    assert "- tests from the working tree" in (tmp_path / "b.md").read_text()
    assert git(repo, "worktree", "list").count("\n") == 0  # no worktree left
    assert git(repo, "status", "--porcelain") == ""  # the working tree untouched


def test_a_package_the_sides_would_take_from_site_packages_is_refused_in_one_line(
        tmp_path, decoy_python):
    """A src/ layout and no pythonpath: both sides would import the installed copy."""
    python, decoy = decoy_python
    repo = tmp_path / "repo"
    shas = make(repo, ["-"])
    git(repo, "mv", "fastsum", "src")
    (repo / "src" / "fastsum").mkdir(exist_ok=True)
    sha = commit(repo, "a src layout")
    (tmp_path / "test_bench.py").write_text(bench())
    done = bisect(repo, shas[0], sha, "--tests-from=worktree", "--python", python, "--",
                  str(tmp_path / "test_bench.py"))
    assert done.returncode == 4, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: --tests-from=worktree: ")
    assert f"the head side imports fastsum from {decoy.resolve()}, not from its checkout" in line
    assert "Traceback" not in done.stdout + done.stderr


def test_a_module_neither_side_has_is_named(tmp_path):
    repo = tmp_path / "repo"
    shas = make(repo, ["-"])
    (tmp_path / "test_bench.py").write_text("import fastsum_helpers_nowhere\n" + bench())
    done = bisect(repo, shas[0], shas[-1], "--tests-from=worktree", "--",
                  str(tmp_path / "test_bench.py"))
    assert done.returncode == 4, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "error: --tests-from=worktree: the selection imports fastsum_helpers_nowhere, which "
        f"neither side has (base {shas[0][:10]}, head {shas[-1][:10]})"]


def test_the_same_range_without_the_slowdown_is_not_reproduced(tmp_path):
    repo = tmp_path / "repo"
    shas = make(repo, ["-", "-", "-"])
    (tmp_path / "test_bench.py").write_text(bench())
    done = bisect(repo, shas[0], shas[-1], "--tests-from=worktree", "--json",
                  str(tmp_path / "b.json"), "--", str(tmp_path / "test_bench.py"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "bisect: not reproduced" in done.stdout
    assert json.loads((tmp_path / "b.json").read_text())["culprits"] == []


def test_without_tests_from_an_uncommitted_selection_points_to_it(tmp_path):
    repo = tmp_path / "repo"
    shas = make(repo, ["-"])
    (repo / "test_bench.py").write_text(bench())
    done = bisect(repo, shas[0], shas[-1], "--", "test_bench.py")
    assert done.returncode == 4
    assert "--tests-from=worktree" in done.stderr and len(done.stderr.splitlines()) == 1


def test_bad_sources_are_one_line_usage_errors(tmp_path):
    repo = tmp_path / "repo"
    shas = make(repo, ["-"])
    (tmp_path / "test_bench.py").write_text(bench())
    (repo / "test_new.py").write_text(bench())  # not committed: HEAD has none
    for source, path, fragment in (
            ("nope", str(tmp_path / "test_bench.py"), "expected worktree, head or a revision"),
            ("head", "test_new.py", "no test path in the selection 'test_new.py' is in HEAD")):
        done = bisect(repo, shas[0], shas[-1], f"--tests-from={source}", "--", path)
        assert done.returncode == 4 and len(done.stderr.splitlines()) == 1, done.stderr
        assert fragment in done.stderr
    done = bisect(repo, shas[0], shas[-1], "--", "x.py", "--opperf-tests-from=head")
    assert done.returncode == 4 and "(use --tests-from)" in done.stderr
