"""``--opperf-compare`` with ``--opperf-tests-from``: a pull request (base HEAD~1) whose head adds a
benchmark together with the 2x slowdown it measures. With the option both sides run the head's
benchmark and the gate fails naming it; without it the benchmark is on the head only, reported as
new. Real A/B sessions on a throwaway repository (tests/tests_from_repo.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bisect_repo import commit
from tests.tests_from_repo import bench, make, write_package

ROOT = Path(__file__).parent.parent
OLD = 'import fastsum\n\n\ndef test_describe():\n    assert fastsum.describe() == "fastsum"\n'


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_", "OPPERF_"))}
    out["PYTHONPATH"] = str(ROOT)
    return out


def run(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--opperf",
                           "--opperf-compare-timeout=120", *args], cwd=repo, env=env(),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def pull_request(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """base = HEAD~1: fastsum and a plain test; HEAD: a benchmark of work, and work 2x slower."""
    repo = tmp_path_factory.mktemp("pr") / "repo"
    make(repo, [])
    (repo / "bench").mkdir()
    (repo / "bench" / "test_old.py").write_text(OLD)
    commit(repo, "a test")
    (repo / "bench" / "test_new.py").write_text(bench())
    write_package(repo, 4, 2)
    commit(repo, "work 2x as slow, and its benchmark")
    return repo


def test_with_the_heads_tests_the_new_benchmark_is_compared_and_fails_the_gate(pull_request):
    done = run(pull_request, "--opperf-compare=HEAD~1", "--opperf-tests-from=head", "bench/",
               "--opperf-json=out.json")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "FAIL bench/test_new.py::test_work call_ms:work" in out
    assert "2 test(s) on both sides, 0 on the head only" in out
    assert ("opperf A/B: tests from the working tree on both sides: bench/test_new.py, "
            "bench/test_old.py") in out
    data = json.loads((pull_request / "out.json").read_text())
    compare = data["compare"]
    assert compare["added"] == []
    notes = compare["notes"]
    assert any(n.startswith("tests from the working tree on both sides: bench/test_new.py")
               for n in notes), notes
    [imports] = [n for n in notes if n.startswith("imports: fastsum: base imported it from ")]
    base, head = imports.split("base imported it from ")[1].split(", head from ")
    assert "opperf-ab-" in base and head == str((pull_request / "fastsum").resolve())


def test_without_them_the_new_benchmark_is_reported_as_new(pull_request):
    done = run(pull_request, "--opperf-compare=HEAD~1", "bench/", "--opperf-json=out2.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 test(s) on both sides, 1 on the head only" in done.stdout
    compare = json.loads((pull_request / "out2.json").read_text())["compare"]
    assert compare["added"] == ["bench/test_new.py::test_work"]


@pytest.mark.parametrize("args, fragment", [
    (["--opperf-tests-from=head"], "--opperf-tests-from needs --opperf-compare"),
    (["--opperf-compare=HEAD~1", "--opperf-tests-from=HEAD~1"],
     "--opperf-tests-from=HEAD~1: expected worktree or head (the head side runs the working "
     "tree in place), got 'HEAD~1'"),
    (["--opperf-compare=HEAD~1", "--opperf-tests-from=nope"],
     "expected worktree, head or a revision"),
])
def test_bad_sources_are_one_line_usage_errors(pull_request, args, fragment):
    done = run(pull_request, *args, "bench/")
    text = done.stdout + done.stderr
    assert done.returncode == 4, text
    errors = [line for line in text.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and fragment in errors[0], text
    assert "Traceback" not in text


def test_a_checkout_as_the_base_is_not_written_into(pull_request, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(pull_request), str(clone)], check=True)
    done = run(pull_request, f"--opperf-compare={clone}", "--opperf-tests-from=head",
               "bench/test_old.py")
    errors = [line for line in (done.stdout + done.stderr).splitlines()
              if line.startswith("ERROR:")]
    assert done.returncode == 4 and len(errors) == 1
    assert "is a checkout of yours, whose files are not overwritten" in errors[0]


def test_the_ini_key_is_read_and_checked(pull_request):
    ini = pull_request / "pytest.ini"
    ini.write_text("[pytest]\nopperf_tests_from = nope\n")
    try:
        done = run(pull_request, "--opperf-compare=HEAD~1", "bench/")
    finally:
        ini.unlink()
    errors = [line for line in (done.stdout + done.stderr).splitlines()
              if line.startswith("ERROR:")]
    assert done.returncode == 4 and len(errors) == 1
    assert errors[0].startswith("ERROR: opperf: ini opperf_tests_from = nope: ")


def test_a_test_file_outside_the_repository_is_refused(pull_request, tmp_path):
    """The head side runs the working tree in place, which is never written to: a file from
    outside would run from two places under two ids, and compare nothing (bisect takes one)."""
    (tmp_path / "test_bench.py").write_text(bench())
    done = run(pull_request, "--opperf-compare=HEAD~1", "--opperf-tests-from=worktree",
               f"--rootdir={pull_request}", str(tmp_path / "test_bench.py"))
    text = done.stdout + done.stderr
    errors = [line for line in text.splitlines() if line.startswith("ERROR:")]
    assert done.returncode == 4 and len(errors) == 1, text
    assert errors[0].startswith("ERROR: opperf: --opperf-compare=HEAD~1: test path ")
    assert "is outside the rootdir" in errors[0]
    assert "Traceback" not in text
