"""The suites' own configuration: ``pytest suites/ --opperf`` gates against the CI gate's files
by default, and ``pytest suites/ -p no:opperf`` runs the suites as plain tests.

Each test runs pytest on the project's suites in a subprocess from the project's root, as a user
would (the suites' conftest is what is tested; a pytester run in a temporary directory never sees
it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
FAST_BENCHMARKS = ["--benchmark-max-time=0.002", "--benchmark-min-rounds=2"]
GATE = re.compile(r"^gate: (PASSED|FAILED) \((\d+) checks; (.*)\)$", re.M)


def run_suites(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_", "OPPERF_"))}
    env["COLUMNS"] = "300"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def gate_line(result: subprocess.CompletedProcess[str]) -> tuple[str, int, str]:
    match = GATE.search(result.stdout)
    assert match, result.stdout[-4000:] + result.stderr[-2000:]
    return match.group(1), int(match.group(2)), match.group(3)


def test_the_main_job_gates_against_the_ci_files_by_default():
    result = run_suites("suites/test_resnet50.py", "--opperf", "--opperf-device=cpu",
                        "--opperf-workload=small", "-k", "not no-overheads")
    verdict, checks, against = gate_line(result)
    assert result.returncode == 0 and verdict == "PASSED", result.stdout[-4000:]
    # op counts, work counts and the limits of the e2e run against ci/baselines/cpu-small.json
    assert checks > 0
    assert against == (f"baseline {ROOT / 'ci' / 'baselines' / 'cpu-small.json'}, "
                       f"thresholds {ROOT / 'ci' / 'thresholds.toml'}")


def _quick(*args: str) -> subprocess.CompletedProcess[str]:
    return run_suites("suites/test_executor.py", "-k", "test_program_clone", "--opperf",
                      "--opperf-device=cpu", "--opperf-workload=tiny", *FAST_BENCHMARKS, *args)


def test_the_baseline_directory_is_the_default_for_every_workload():
    result = _quick()
    assert result.returncode == 0, result.stdout[-4000:]
    # no tiny baseline: a warning naming the file the directory would hold; limits still apply
    assert f"no baseline {ROOT / 'ci' / 'baselines' / 'cpu-tiny.json'}" in result.stdout
    assert gate_line(result)[2] == f"thresholds {ROOT / 'ci' / 'thresholds.toml'}"


def test_options_and_ini_keys_override_the_defaults(tmp_path):
    thresholds = tmp_path / "t.toml"
    thresholds.write_text("[regression]\nmax_slowdown = 0.5\n")
    result = _quick(f"--opperf-thresholds={thresholds}", "-o", f"opperf_baseline={tmp_path}")
    assert result.returncode == 0, result.stdout[-4000:]
    assert f"no baseline {tmp_path / 'cpu-tiny.json'}" in result.stdout
    assert gate_line(result)[2] == f"thresholds {thresholds}"


def test_a_session_that_saves_a_baseline_compares_with_none(tmp_path):
    result = _quick(f"--opperf-save={tmp_path}/")
    assert result.returncode == 0, result.stdout[-4000:]
    assert "warning: no baseline" not in result.stdout
    assert gate_line(result)[2] == f"thresholds {ROOT / 'ci' / 'thresholds.toml'}"
    assert (tmp_path / "cpu-tiny.json").is_file()


def test_without_the_plugin_the_suites_are_plain_tests():
    result = run_suites("suites/", "-p", "no:opperf", "-v", "-rs")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "INTERNALERROR" not in out
    # every suite ran at the tiny size, nothing measured or reported
    for test in ("suites/test_resnet50.py::test_train[tiny] PASSED",
                 "suites/test_resnet50.py::test_train[tiny-no-overheads] PASSED",
                 "suites/test_executor.py::test_create_ops PASSED",
                 "suites/test_ops.py::test_op[conv2d-N4xC3x32x32-k7s2p3-o64] PASSED"):
        assert test in result.stdout, out[-4000:]
    assert not re.search(r"^(gate: |=+ opperf =+$)", result.stdout, re.M)
