"""ci/gpu-check.sh, checked on the CPU: its shell is sound (bash -n, shellcheck),
every step is bounded by a timeout and never stops the others, and its dry mode
runs the whole sequence against the CPU and leaves every log and result in $OUT."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "ci" / "gpu-check.sh"
STEPS = [
    "host-facts",
    "pip-freeze",
    "cuda-facts",
    "gpu-tests",
    "suites",
    "ops-sync",
    "timing-agreement",
]
GATING = {"gpu-tests", "suites"}


def test_the_script_parses():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(
    shutil.which("shellcheck") is None,
    reason="shellcheck is not installed (apt-get install shellcheck)",
)
def test_shellcheck_finds_nothing():
    result = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_every_command_of_weight_runs_as_a_bounded_step():
    text = SCRIPT.read_text()
    assert "set -e" not in text  # a failed step must not stop the rest
    assert re.search(r'timeout -s INT -k \d+ "\$limit" "\$@"', text)
    for line in text.splitlines():
        if (
            re.search(r'\$PY"? -m (pytest|pip)|ci/timing_agreement.py', line)
            and "command -v" not in line
        ):
            assert line.lstrip().startswith("step "), f"not a bounded step: {line}"
    for name in STEPS:
        assert re.search(rf'^step {name} (yes|no) (\d+|"\$[A-Z_]+") ', text, re.M), name
    # never changes the GPU: nvidia-smi only queries
    assert not re.search(
        r"nvidia-smi\s+(-pm|-ac|-rac|-lgc|-rgc|-pl|-e |-c |--lock|--reset|-r\b)", text
    )


def _dry(tmp_path, **env):
    out = tmp_path / "out"
    full_env = {  # as on a runner: not inside this test session's xdist worker (pytest-benchmark
        # turns itself off when it finds PYTEST_XDIST_WORKER, and the per-op runs would be untimed)
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")},
        "GPU_CHECK_DRY": "1",
        "OUT": str(out),
        "PYTHON": sys.executable,
        **env,
    }
    result = subprocess.run(
        ["bash", str(SCRIPT)], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=600
    )
    rows = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
    return result, out, {r[0]: r for r in rows}


def test_the_dry_mode_runs_every_step_on_the_cpu(tmp_path):
    result, out, steps = _dry(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert list(steps) == STEPS
    failed = {name: row for name, row in steps.items() if row[1] != "ok"}
    assert not failed, "\n".join(f"{name}: {row[1:]}\n{(out / f'{name}.log').read_text()[-1500:]}"
                                  for name, row in failed.items())
    assert {name for name, row in steps.items() if row[3] == "yes"} == GATING
    for name in ("results.json", "report.md", "trace.json", "ops-sync.json", "timing-agreement.md",
                 "gpu-tests.xml", "suites.xml", *(f"{s}.log" for s in STEPS)):
        assert (out / name).is_file(), name
    results = json.loads((out / "results.json").read_text())
    assert results["session"]["workload"] == "tiny" and results["gate"]["passed"]
    assert "ops agree within 5%" in (out / "timing-agreement.log").read_text()


def test_out_of_time_steps_are_skipped_and_said_so(tmp_path):
    result, _, steps = _dry(tmp_path, BUDGET="5")
    assert result.returncode == 1  # the gating steps did not run
    assert list(steps) == STEPS and all(row[1] == "skipped (out of time)" for row in steps.values())


def test_a_failing_step_does_not_stop_the_others(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    result, _, steps = _dry(tmp_path, PYTHON=str(broken))
    assert result.returncode == 1
    assert list(steps) == STEPS
    assert steps["gpu-tests"][1] == steps["suites"][1] == "failed (exit status 3)"
