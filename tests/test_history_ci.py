"""ci/history.sh, the push job's history step, against a local bare repository."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_opperf.history.store import Store
from pytest_opperf.results import write_results
from tests.history_helpers import session

SCRIPT = Path(__file__).resolve().parent.parent / "ci" / "history.sh"


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def test_each_push_appends_and_replaces_the_branch_commit(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    pytest.importorskip("plotly")
    remote = tmp_path / "remote.git"
    _git("init", "-q", "--bare", str(remote))
    env = {**os.environ, "OPPERF_HISTORY_REMOTE": str(remote), "GH_TOKEN": "not-a-token",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for i in range(2):
        results = tmp_path / f"r{i}.json"
        write_results(results, session(conv_ms=2.0 + i, sha=f"{i:02x}" + "0" * 38))
        done = subprocess.run(
            ["bash", str(SCRIPT), str(results), str(tmp_path / f"site{i}")],
            env=env,
            capture_output=True,
            text=True,
            cwd=SCRIPT.parent.parent,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert (tmp_path / f"site{i}" / "index.html").stat().st_size > 1_000_000
    log = _git("--git-dir", str(remote), "log", "--format=%P|%s", "opperf-history").splitlines()
    assert len(log) == 1 and log[0].startswith("|")  # one commit, without parents
    copy = tmp_path / "copy.sqlite"
    packed = subprocess.run(
        ["git", "--git-dir", str(remote), "show", "opperf-history:opperf-history.sqlite.gz"],
        check=True,
        capture_output=True,
    ).stdout
    copy.write_bytes(gzip.decompress(packed))
    with Store(str(copy)) as store:
        assert [s.sha[:2] for s in store.load().sessions] == ["00", "01"]
    with Store(str(tmp_path / "site1" / "opperf-history.sqlite")) as store:
        assert len(store.load().sessions) == 2
