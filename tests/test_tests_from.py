"""Tests from another place (pytest_opperf.ab.tests_from): which files each side gets, where they
go, the selection the sides run, the modules they import, and the check of where each side
imported them from. No side process: the e2e runs are tests/test_tests_from_e2e.py's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from pytest_opperf.ab import tests_from
from pytest_opperf.ab.tests_from import (
    OUTSIDE_DIR,
    PROBE_ENV,
    Source,
    TestFile,
    TestsFromError,
    imported_names,
    judge,
    missing,
    origin_of,
    origins,
    resolve_source,
    stage,
)
from pytest_opperf.bisect import report
from pytest_opperf.bisect.core import Outcome
from pytest_opperf.bisect.repo import BisectCommit
from tests.bisect_repo import commit, git

ROOT = Path(__file__).resolve().parent.parent
WORKTREE = Source("worktree", None, "the working tree")


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write(root, {"pkg/__init__.py": "X = 1\n", "conftest.py": "ROOT = 'v1'\n",
                 "bench/conftest.py": "BENCH = 'v1'\n", "bench/test_a.py": "import pkg\n",
                 "pytest.ini": "[pytest]\n"})
    git(root, "init", "-q", "-b", "main")
    commit(root, "first")
    return root


def by_dest(files: list[TestFile]) -> dict[str, TestFile]:
    return {f.dest: f for f in files}


def test_a_file_outside_the_repository_goes_under_the_directory_started_in(repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere, {"test_bench.py": "import pkg\nimport os\n", "conftest.py": "C = 1\n",
                      "__init__.py": "", "helpers/x.py": "", "__pycache__/y.pyc": ""})
    staged = stage([str(elsewhere / "test_bench.py") + "::test_x", "-k", "x"], repo / "bench",
                   repo, WORKTREE)
    files = by_dest(staged.files)
    dest = f"bench/{OUTSIDE_DIR}/test_bench.py"
    assert set(files) == {dest, f"bench/{OUTSIDE_DIR}/conftest.py"}  # its directory's conftest
    assert files[dest].outside and files[dest].origin == str(elsewhere / "test_bench.py")
    # relative to the directory each side starts in (bench/ of its checkout); the rest kept
    assert staged.args == [f"{OUTSIDE_DIR}/test_bench.py::test_x", "-k", "x"]
    assert staged.imports == ["pkg"]  # os is the standard library's
    assert f"{OUTSIDE_DIR}/test_bench.py (from {elsewhere / 'test_bench.py'})" in \
        staged.describe()


def test_a_directory_outside_keeps_its_layout_and_its_packages_below_the_top(repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere, {"__init__.py": "", "sub/__init__.py": "", "sub/test_b.py": "",
                      "sub/conftest.py": "", ".hidden/test_c.py": ""})
    staged = stage([str(elsewhere)], repo, repo, WORKTREE)
    assert sorted(by_dest(staged.files)) == [f"{OUTSIDE_DIR}/sub/__init__.py",
                                              f"{OUTSIDE_DIR}/sub/conftest.py",
                                              f"{OUTSIDE_DIR}/sub/test_b.py"]
    assert staged.args == [OUTSIDE_DIR]


def test_the_working_tree_gives_uncommitted_files_and_the_conftest_files_above(repo):
    write(repo, {"bench/test_new.py": "import pkg\nfrom pkg import X\n",
                 "bench/conftest.py": "BENCH = 'v2'\n", "bench/sub/__init__.py": "",
                 "bench/sub/test_deep.py": ""})
    staged = stage(["bench/test_new.py", "bench/sub/test_deep.py"], repo, repo, WORKTREE)
    files = by_dest(staged.files)
    assert set(files) == {"bench/test_new.py", "bench/sub/test_deep.py", "conftest.py",
                          "bench/conftest.py", "bench/sub/__init__.py"}
    assert files["bench/conftest.py"].data == b"BENCH = 'v2'\n"  # uncommitted, as it is
    assert files["bench/sub/__init__.py"].only_missing
    assert not files["bench/conftest.py"].only_missing
    assert staged.args == ["bench/test_new.py", "bench/sub/test_deep.py"]
    assert [f.dest for f in staged.tests] == ["bench/sub/test_deep.py", "bench/test_new.py"]


def test_a_revision_gives_its_own_files_not_the_working_trees(repo):
    write(repo, {"bench/test_a.py": "import pkg\nimport later\n"})
    sha = commit(repo, "second")
    write(repo, {"bench/test_a.py": "import pkg\nimport uncommitted\n"})
    source = resolve_source("HEAD", repo)
    assert source.commit == sha and source.label == f"REV {sha[:10]} (HEAD)"
    staged = stage(["bench"], repo, repo, source)
    files = by_dest(staged.files)
    assert files["bench/test_a.py"].data == b"import pkg\nimport later\n"
    assert files["bench/test_a.py"].origin == f"{sha[:10]}:bench/test_a.py"
    assert staged.imports == ["later", "pkg"]


def test_the_sources_are_resolved_or_refused_in_one_line(repo):
    head = git(repo, "rev-parse", "HEAD")
    assert resolve_source("worktree", repo).commit is None
    assert resolve_source("head", repo).commit == head
    assert resolve_source("head", repo).label == f"HEAD {head[:10]}"
    assert resolve_source("head", repo, head_is_worktree=True).commit is None
    for bad in ("", "no-such-rev", "--all"):
        with pytest.raises(TestsFromError, match="expected worktree, head or a") as info:
            resolve_source(bad, repo)
        assert "\n" not in str(info.value)


def test_a_selection_with_no_path_of_the_source_is_refused(repo):
    with pytest.raises(TestsFromError, match="no test path in the selection '-k x'"):
        stage(["-k", "x"], repo, repo, WORKTREE)
    with pytest.raises(TestsFromError, match="no test path"):
        stage(["bench/test_missing.py"], repo, repo, resolve_source("head", repo))


def test_laying_out_overwrites_the_commits_files_but_not_its_packages(repo, tmp_path):
    write(repo, {"bench/test_new.py": "", "bench/conftest.py": "BENCH = 'v2'\n"})
    staged = stage(["bench/test_new.py"], repo, repo, WORKTREE)
    checkout = tmp_path / "checkout"
    write(checkout, {"conftest.py": "OLD\n", "bench/conftest.py": "OLD\n"})
    staged.files.append(TestFile("pkg/__init__.py", "x", b"NEW\n", only_missing=True))
    write(checkout, {"pkg/__init__.py": "KEPT\n"})
    staged.lay_out(checkout)
    assert (checkout / "bench/test_new.py").exists()
    assert (checkout / "bench/conftest.py").read_text() == "BENCH = 'v2'\n"
    assert (checkout / "conftest.py").read_text() == "ROOT = 'v1'\n"
    assert (checkout / "pkg/__init__.py").read_text() == "KEPT\n"


def test_imported_names_leave_out_the_standard_library_relative_imports_and_the_files_own():
    files = [TestFile("bench/test_a.py", "", b"import os.path\nimport numpy as np, fastsum.x\n"
                      b"from . import sibling\nfrom helpers import h\nfrom bench import y\n"
                      b"def f():\n    import lazy\n"),
             TestFile("bench/helpers.py", "", b"from __future__ import annotations\n"),
             TestFile("bench/data.txt", "", b"import nothing\n"),
             TestFile("bench/broken.py", "", b"def (:\n")]
    assert imported_names(files) == ["fastsum", "lazy", "numpy"]


def test_the_plugins_own_package_is_not_code_under_test():
    """A conftest.py of the project that imports pytest_opperf (suites/conftest.py does): both
    sides run the controller's pytest_opperf by design, which is no reason to refuse the session."""
    files = [TestFile("suites/conftest.py", "", b"from pytest_opperf import plugin\n"
                      b"from pytest_opperf.device import DeviceInfo\n"
                      b"from reference_framework import backend\n")]
    assert imported_names(files) == ["reference_framework"]


def test_origin_of_a_package_a_module_and_a_missing_one(tmp_path, monkeypatch):
    write(tmp_path, {"pkg_tf56/__init__.py": "", "mod_tf56.py": ""})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert origin_of("pkg_tf56") == str(tmp_path.resolve() / "pkg_tf56")  # not yet imported
    assert origin_of("mod_tf56") == str(tmp_path.resolve() / "mod_tf56.py")
    assert origin_of("no_such_module_tf56") is None
    assert origin_of("json") == str(Path(json.__file__).resolve().parent)  # imported
    monkeypatch.setenv(PROBE_ENV, "pkg_tf56,no_such_module_tf56")
    assert origins() == {"pkg_tf56": str(tmp_path.resolve() / "pkg_tf56"),
                         "no_such_module_tf56": None}
    assert origins({}) == {}


def roots(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for side in ("base", "head"):
        out[side] = tmp_path / side
        write(out[side], {"fastsum/__init__.py": ""})
    return out


SITE = "/venv/lib/python3.11/site-packages"


def test_each_side_importing_from_its_own_checkout_passes_and_is_said(tmp_path):
    r = roots(tmp_path)
    found = {s: {"fastsum": str(r[s] / "fastsum"), "numpy": f"{SITE}/numpy"} for s in r}
    judgement = judge(r, found)
    assert judgement.problem is None
    assert judgement.imports == [{"module": "fastsum", "base": str(r["base"] / "fastsum"),
                                  "head": str(r["head"] / "fastsum")}]
    assert judgement.lines == [f"fastsum: base imported it from {r['base'] / 'fastsum'}, head "
                               f"from {r['head'] / 'fastsum'}"]  # numpy is no module of theirs


def test_a_package_of_the_project_taken_from_site_packages_is_refused(tmp_path):
    """The check that fails on sides that import the code under test from site-packages."""
    r = roots(tmp_path)
    both = {s: {"fastsum": f"{SITE}/fastsum"} for s in r}
    assert judge(r, both).problem == (f"both sides import fastsum from the same place, "
                                      f"{SITE}/fastsum: the code under test must be each "
                                      "side's own")
    one = {"base": {"fastsum": f"{SITE}/fastsum"}, "head": {"fastsum": str(r["head"] / "fastsum")}}
    problem = judge(r, one).problem
    assert problem is not None and problem.startswith(
        f"the base side imports fastsum from {SITE}/fastsum, not from its checkout "
        f"{r['base'].resolve()}")
    assert "\n" not in problem


def test_a_src_layout_package_counts_as_the_projects(tmp_path):
    r = {s: tmp_path / s for s in ("base", "head")}
    for root in r.values():
        write(root, {"src/fastsum/__init__.py": ""})
    problem = judge(r, {s: {"fastsum": f"{SITE}/fastsum"} for s in r}).problem
    assert problem is not None and "fastsum" in problem


def test_tests_that_import_nothing_of_either_checkout_are_refused(tmp_path):
    r = roots(tmp_path)
    problem = judge(r, {s: {"numpy": f"{SITE}/numpy"} for s in r}).problem
    assert problem == ("the selection's test files import nothing from either side's checkout "
                       f"(numpy ({SITE}/numpy)): both sides would measure the same code")


def test_a_module_neither_side_has_is_named_and_an_optional_one_left_out(tmp_path):
    r = roots(tmp_path)
    found = {s: {"fastsum": str(r[s] / "fastsum"), "ujson": None} for s in r}
    labels = {"base": "abc", "head": "def"}
    assert missing(found, labels) == ("the selection imports ujson, which neither side has "
                                      "(base abc, head def)")
    assert judge(r, found).problem is None  # both collected: an optional import
    found["head"]["ujson"] = f"{SITE}/ujson"
    assert missing(found, labels) is None


def test_the_bisect_report_json_and_markdown_say_where_the_tests_came_from():
    commits = [BisectCommit(c * 40, f"s{c}", "a", "2026-01-01T00:00:00+00:00") for c in "01"]
    outcome = Outcome("not reproduced", "not reproduced: every metric the same")
    default = report.BisectRun(commits, ["t.py"], 100.0, 5.0, 1)
    assert "bisect: tests: each commit's own" in report.terminal(default, outcome)
    tf = {"source": "worktree", "commit": None, "label": "the working tree",
          "files": [{"path": ".opperf-tests/t.py", "from": "/x/t.py", "outside": True}],
          "summary": "tests from the working tree on both sides: .opperf-tests/t.py",
          "imports": [{"module": "fastsum", "base": "/b/fastsum", "head": "/h/fastsum"}],
          "import_lines": ["fastsum: base imported it from /b/fastsum, head from /h/fastsum"]}
    run = report.BisectRun(commits, ["t.py"], 100.0, 5.0, 1, tests_from=tf)
    lines = report.terminal(run, outcome)
    assert "bisect: tests from the working tree on both sides: .opperf-tests/t.py" in lines
    assert ("bisect: imports: fastsum: base imported it from /b/fastsum, head from /h/fastsum"
            in lines)
    assert lines[-1].startswith("bisect: 0 A/B step(s)")
    text = report.markdown(run, outcome)
    assert "- tests from the working tree on both sides" in text and "- imports: fastsum" in text
    schema = json.loads((ROOT / "pytest_opperf/schema/opperf-bisect-1.schema.json").read_text())
    for r, source in ((run, "worktree"), (default, "commit")):
        doc = report.as_json(r, outcome)
        jsonschema.validate(doc, schema)
        assert doc["tests_from"]["source"] == source
    assert report.as_json(run, outcome)["tests_from"]["imports"] == tf["imports"]


def test_the_module_is_pure():
    assert "pytest" not in tests_from.__dict__ and sys.modules[tests_from.__name__]
