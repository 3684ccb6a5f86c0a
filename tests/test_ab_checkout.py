"""The base side's checkout: revisions and directories, the temporary worktree, its interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_opperf.ab.checkout import (
    CompareError,
    Workspace,
    check_python,
    resolve_base,
    side_environment,
)
from tests.ab_suites import git, make_repo, worktrees


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "repo"
    root.mkdir()
    sha = make_repo(root, {"suites/test_a.py": "def test_a():\n    pass\n"})
    return root, sha


def test_a_revision_becomes_a_worktree_that_close_removes(repo):
    root, sha = repo
    base = resolve_base("HEAD", root, root, ["suites", "pytest.ini"])
    assert (base.mode, base.commit, base.label) == ("rev", sha, f"REV {sha[:10]} (HEAD)")
    workspace = Workspace(base)
    base_root = workspace.prepare(Path(__file__).parent)
    assert (base_root / "suites" / "test_a.py").is_file()
    assert (workspace.shim / "pytest_opperf").resolve() == Path(__file__).parent.resolve()
    assert len(worktrees(root)) == 2
    assert workspace.close() == []
    assert len(worktrees(root)) == 1 and not workspace.path.exists()
    assert workspace.close() == []  # idempotent


@pytest.mark.parametrize("subdir", [False, True])
def test_the_base_root_is_as_long_as_the_heads_where_it_can_be(repo, tmp_path, subdir):
    root, sha = repo
    rootdir = root / "suites" if subdir else root
    workspace = Workspace(resolve_base("HEAD", rootdir, root, []))
    try:
        head = tmp_path / ("h" * (len(str(workspace.path)) + 20)) / ("suites" if subdir else "")
        base_root = workspace.prepare(Path(__file__).parent, head)
        assert len(str(base_root)) == len(str(head))
        assert base_root.name == ("suites" if subdir else base_root.name)
        assert (base_root / ("test_a.py" if subdir else "suites/test_a.py")).is_file()
    finally:
        workspace.close()
    workspace = Workspace(resolve_base("HEAD", root, root, []))
    try:  # a head root shorter than the temporary directory: the plain name
        assert workspace.prepare(Path(__file__).parent, Path("/r")).name == "base"
    finally:
        workspace.close()


def test_a_sha_prefix_is_labelled_by_itself_and_a_rootdir_below_the_toplevel_is_kept(repo):
    root, sha = repo
    base = resolve_base(sha[:8], root / "suites", root, [])
    assert base.label == f"REV {sha[:10]}" and base.subdir == "suites"
    workspace = Workspace(base)
    try:
        assert (workspace.prepare(Path(__file__).parent) / "test_a.py").is_file()
    finally:
        workspace.close()


def test_bad_revisions_and_directories_are_named(repo, tmp_path):
    root, _ = repo
    with pytest.raises(
        CompareError, match=r"^'nope' is neither a directory nor a revision of the repository "
    ):
        resolve_base("nope", root, root, [])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        CompareError, match=r"is no checkout of this project: it has no suites, pytest.ini"
    ):
        resolve_base(str(empty), root, root, ["suites", "pytest.ini"])
    with pytest.raises(CompareError, match=r"is the head's own rootdir"):
        resolve_base(".", root, root, [])
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    with pytest.raises(CompareError, match=r"is in no git repository"):
        resolve_base("HEAD", outside, outside, [])


def test_a_directory_is_used_as_it_is(repo, tmp_path):
    root, _ = repo
    clone = tmp_path / "clone"
    git(root, "clone", "-q", str(root), str(clone))
    base = resolve_base("../clone", root, root, ["suites"])
    assert (base.mode, base.directory, base.label) == (
        "dir",
        clone.resolve(),
        f"DIR {clone.resolve()}",
    )
    workspace = Workspace(base)
    assert workspace.prepare(Path(__file__).parent) == clone.resolve()
    workspace.close()
    assert clone.is_dir() and len(worktrees(root)) == 1


def test_the_base_interpreter_must_run_and_import_pytest(tmp_path):
    info = check_python(sys.executable, tmp_path)
    assert info.version == sys.version.split()[0] and info.has_plugin_entry_point
    with pytest.raises(CompareError, match=r"^interpreter /no/python does not run: "):
        check_python("/no/python", tmp_path)
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named pytest' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(
        CompareError, match=r"cannot import pytest: ModuleNotFoundError: No module named pytest$"
    ):
        check_python(str(fake), tmp_path)


def test_a_side_finds_the_shim_then_its_own_root_first():
    env = side_environment(Path("/s"), Path("/root"), {"PYTHONPATH": "/x:/y", "OTHER": "1"})
    assert env == {"PYTHONPATH": "/s:/root:/x:/y", "OTHER": "1"}
    assert side_environment(Path("/s"), Path("/r"), {})["PYTHONPATH"] == "/s:/r"


def test_the_base_interpreter_is_noted_when_it_differs():
    from pytest_opperf.ab.checkout import PythonInfo, interpreter_note

    head = PythonInfo("/venv/bin/python", "3.11.2", True, "2.4.0")
    assert interpreter_note(head, head) is None
    assert interpreter_note(PythonInfo("/venv/bin/python3", "3.11.2", True, "2.4.0"), head) == (
        "the base side runs another interpreter (/venv/bin/python3; head /venv/bin/python) with "
        "the same Python 3.11.2, numpy 2.4.0")
    older = PythonInfo("/opt/py310/bin/python", "3.10.12", False, "1.26.4")
    assert interpreter_note(older, head) == (
        "the base side runs another Python or numpy: base Python 3.10.12, numpy 1.26.4 "
        "(/opt/py310/bin/python); head Python 3.11.2, numpy 2.4.0 (/venv/bin/python): a change "
        "may be theirs, not the code's")
    no_numpy = PythonInfo("/venv/bin/python", "3.11.2", True, None)
    assert "numpy not installed" in (interpreter_note(no_numpy, head) or "")


def test_the_probe_reads_the_numpy_an_interpreter_has(tmp_path):
    import sys

    from pytest_opperf.ab.checkout import check_python, this_python

    info = check_python(sys.executable, tmp_path)
    assert (info.version, info.numpy) == (this_python().version, this_python().numpy)
    assert info.numpy is not None


def test_a_revision_missing_from_a_shallow_clone_says_so(repo, tmp_path):
    root, _ = repo
    (root / "b.txt").write_text("b\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "second")
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{root}", str(shallow))
    with pytest.raises(CompareError, match=r"'HEAD~1' is neither a directory nor a revision of "
                                           r"the repository .*; the repository is a shallow clone"
                                           r".*fetch-depth: 0.*git fetch --unshallow.*"
                                           r"git fetch --deepen=N` for HEAD~N.*"
                                           r"--opperf-compare=FETCH_HEAD"):
        resolve_base("HEAD~1", shallow, shallow, [])
    git(shallow, "fetch", "-q", "--deepen=1")  # what the message says to do: then it resolves
    assert resolve_base("HEAD~1", shallow, shallow, []).commit == git(root, "rev-parse", "HEAD~1")
    assert resolve_base("HEAD~1", root, root, []).mode == "rev"  # the full clone has it
    with pytest.raises(CompareError) as full:
        resolve_base("nosuch", root, root, [])
    assert "shallow clone" not in str(full.value)
