"""Output files in directories that do not exist yet: created when the session writes, never
before; what would stop that (a file in the way, no permission) is a usage error at the start."""

from __future__ import annotations

import os

import pytest

from pytest_opperf.records.reader import read_results
from tests.opperf_suites import assert_one_line_usage_error, e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

OUTPUTS = ("json", "markdown", "trace", "save")


def test_every_output_creates_its_missing_directories(pytester):
    pytester.makepyfile(test_suite=e2e(steps=2))
    args = [f"--opperf-{name}=out/{name}/deeper/{name}.file" for name in OUTPUTS]
    result = pytester.runpytest("--opperf", *args)
    assert result.ret == 0, result.stdout.str()
    for name in OUTPUTS:
        written = pytester.path / "out" / name / "deeper" / f"{name}.file"
        assert written.is_file() and written.stat().st_size > 0, name
        result.stdout.fnmatch_lines([f"wrote {name}: {written}"])
    assert [r.id for r in read_results(pytester.path / "out/save/deeper/save.file").runs] == [
        "test_suite.py::test_train"]


def test_nothing_is_created_before_the_session_writes(pytester):
    pytester.makepyfile(test_suite=e2e(steps=2))
    # a usage error found after the outputs' check: the session never writes
    result = pytester.runpytest("--opperf", "--opperf-json=new/r.json",
                                "--opperf-trace=new2/t.json", "--opperf-thresholds=absent.toml")
    assert_one_line_usage_error(result, "--opperf-thresholds absent.toml", "no such file")
    assert not (pytester.path / "new").exists() and not (pytester.path / "new2").exists()
    # collecting only: a directory exactly when a file was written into it
    pytester.runpytest("--opperf", "--opperf-json=new/r.json", "--collect-only")
    assert (pytester.path / "new").exists() == (pytester.path / "new" / "r.json").exists()


@pytest.mark.parametrize("name", OUTPUTS)
def test_a_file_in_the_way_is_a_usage_error(pytester, name):
    (pytester.path / "afile").write_text("")
    marker = pytester.path / "ran"
    pytester.makepyfile(f"def test_x(): open({str(marker)!r}, 'w').close()")
    result = pytester.runpytest("--opperf", f"--opperf-{name}=afile/sub/r.json")
    assert_one_line_usage_error(result, f"--opperf-{name} afile/sub/r.json",
                                f"{pytester.path / 'afile'} is not a directory")
    assert not marker.exists()


def test_no_permission_to_create_the_directory_is_a_usage_error(pytester, monkeypatch):
    locked = pytester.mkdir("locked")
    if os.geteuid() == 0:  # root may write anywhere: the permission is what os.access says
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(locked)
                            else real(p, mode))
    else:
        locked.chmod(0o555)
    pytester.makepyfile("def test_x(): pass")
    try:
        result = pytester.runpytest("--opperf", "--opperf-markdown=locked/sub/r.md")
    finally:
        locked.chmod(0o755)
    assert_one_line_usage_error(result, "--opperf-markdown locked/sub/r.md",
                                f"cannot create directory {locked / 'sub'}: no permission to "
                                f"write in {locked}")


def test_a_directory_that_cannot_be_created_at_the_end_is_an_error_line(pytester):
    # the test puts a file where the directory would go, after the start's check
    pytester.makepyfile(test_suite=e2e(steps=2) + "\ndef test_later():\n"
                        "    open('later', 'w').close()\n")
    result = pytester.runpytest("--opperf", "--opperf-json=later/r.json")
    assert result.ret == 4, result.stdout.str()
    result.stdout.fnmatch_lines([f"error: --opperf-json later/r.json: cannot write "
                                 f"{pytester.path / 'later' / 'r.json'}: *"])


def test_directory_problem(tmp_path):
    from pytest_opperf.glue.outputs import directory_problem

    assert directory_problem(tmp_path) is None
    assert directory_problem(tmp_path / "a" / "b") is None
    (tmp_path / "f").write_text("")
    assert directory_problem(tmp_path / "f") == f"{tmp_path / 'f'} is not a directory"
    assert directory_problem(tmp_path / "f" / "b") == f"{tmp_path / 'f'} is not a directory"
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    broken = tmp_path / "broken"
    assert directory_problem(broken / "b") == f"{broken} is not a directory"
