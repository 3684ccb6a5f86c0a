"""The GitHub workflows: schema-valid, no zizmor findings, and safe for a GPU runner."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKFLOWS = sorted((Path(__file__).parent.parent / ".github" / "workflows").glob("*.yml"))
BISECT = "opperf-bisect.yml"  # started by hand; the others gate pull requests and pushes


def _named(name: str) -> Path:
    return next(p for p in WORKFLOWS if p.name == name)


GATES = [p for p in WORKFLOWS if p.name not in (BISECT, "opperf-comment.yml")]


def _tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(path).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return path


def test_the_workflows_exist():
    assert [p.name for p in WORKFLOWS] == ["ci.yml", "opperf-bisect.yml", "opperf-comment.yml",
                                           "opperf-gpu.yml"]


def test_workflows_match_the_github_schema():
    result = subprocess.run(
        [
            _tool("check-jsonschema"),
            "--builtin-schema",
            "vendor.github-workflows",
            *map(str, WORKFLOWS),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_nothing():
    result = subprocess.run([_tool("zizmor"), "--offline", "--no-progress", *map(str, WORKFLOWS)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_safe_for_a_runner_that_holds_a_gpu(path):
    text = path.read_text()
    assert "pull_request_target" not in text
    assert re.search(r"^permissions:\n  contents: read\n", text, re.M)
    assert re.search(r"^concurrency:\n  group: .*\$\{\{ github.ref \}\}", text, re.M)
    uses = re.findall(r"uses: (\S+)", text)
    assert uses or path.name == "opperf-comment.yml"  # it uses no action, checks nothing out
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in uses), uses
    checkouts = text.count("actions/checkout@")
    assert text.count("persist-credentials: false") == checkouts
    assert text.count("timeout-minutes:") == len(
        re.findall(r"^  [\w-]+:\n", text.split("jobs:")[1], re.M)
    )


def test_the_gpu_gate_runs_the_full_workload_on_the_gpu_runner():
    text = next(p for p in WORKFLOWS if p.name == "opperf-gpu.yml").read_text()
    assert "runs-on: [self-hosted, linux, gpu]" in text
    # the workflow runs the one GPU check anyone can run, which installs, runs and gates
    assert "run: bash ci/gpu-check.sh" in text and "OUT: opperf-results" in text
    script = (Path(__file__).parent.parent / "ci" / "gpu-check.sh").read_text()
    assert "pip install --progress-bar off -e '.[gpu,test]'" in script
    assert "WORKLOAD=full" in script and '"--opperf-workload=$WORKLOAD"' in script
    for option in (
        "--opperf-baseline=ci/baselines",
        "--opperf-thresholds=ci/thresholds.toml",
        "--opperf-json=",
        "--opperf-markdown=",
        "--opperf-trace=",
    ):
        assert option in script
    # Code from forks needs a maintainer's approval (an environment with reviewers).
    assert "github.event.pull_request.head.repo.fork && 'gpu-fork'" in text


@pytest.mark.parametrize("path", GATES, ids=lambda p: p.name)
def test_pull_requests_run_ab_against_their_base_commit(path):
    text = path.read_text()
    assert "fetch-depth: 0" in text  # the base commit must be in the clone for its worktree
    if (
        path.name == "opperf-gpu.yml"
    ):  # through ci/gpu-check.sh, which adds --opperf-compare when COMPARE is set
        assert (
            "COMPARE: ${{ github.event.pull_request.base.sha }}" in text
        )  # through env:, not in the script
        script = (path.parents[2] / "ci" / "gpu-check.sh").read_text()
        assert (
            'COMPARE_ARGS=("--opperf-compare=$COMPARE")' in script
            and '"${COMPARE_ARGS[@]}"' in script
        )
        return
    assert (
        "BASE_SHA: ${{ github.event.pull_request.base.sha }}" in text
    )  # through env:, not in the script
    # each part of the matrix (the per-op shards, the e2e job): one A/B step, one push step
    assert text.count('--opperf-compare="$BASE_SHA"') == 2
    assert text.count("if: github.event_name == 'pull_request'") == 2
    assert text.count("if: github.event_name != 'pull_request'") == 2


def _yaml(path: Path) -> dict:
    from ruamel.yaml import YAML  # check-jsonschema's, in the test extra

    return YAML(typ="safe").load(path.read_text())


def test_only_two_jobs_may_write_and_the_comment_job_reads_data_only():
    """Every workflow's token reads only, but in the history job (contents) and the comment job
    (pull-requests), which checks out and runs nothing of the pull request."""
    writes = set()
    for path in WORKFLOWS:
        workflow = _yaml(path)
        assert "write" not in str(workflow.get("permissions")), path.name
        for name, job in workflow["jobs"].items():
            for scope, access in (job.get("permissions") or {}).items():
                if access == "write":
                    writes.add((path.name, name, scope))
    assert writes == {("ci.yml", "opperf-history", "contents"),
                      ("opperf-comment.yml", "comment", "pull-requests")}
    comment = _yaml(_named("opperf-comment.yml"))
    assert list(comment["on"]) == ["workflow_run"] and comment["on"]["workflow_run"][
        "workflows"] == [_yaml(_named("ci.yml"))["name"]]
    job = comment["jobs"]["comment"]
    assert "github.event.workflow_run.event == 'pull_request'" in job["if"]
    assert all("uses" not in step for step in job["steps"])  # no checkout, no action
    script = "\n".join(step["run"] for step in job["steps"])
    assert "${{" not in script  # event data only through env:
    assert "pulls/$pr\" --jq .head.sha" in script and '"$HEAD_SHA"' in script


def test_the_comment_workflow_finds_the_marker_the_renderer_writes():
    from pytest_opperf.reports.comment import MARKER

    text = _named("opperf-comment.yml").read_text()
    assert f"marker='{MARKER}'" in text
    # the gate job keeps the comment and the pull request's number for it
    ci = _named("ci.yml").read_text()
    assert "--comment=opperf-comment/comment.md" in ci and "opperf-comment/pull-request" in ci
    assert "name: opperf-comment\n" in ci


def test_the_bisect_workflow_is_started_by_hand_and_reads_only():
    text = next(p for p in WORKFLOWS if p.name == BISECT).read_text()
    assert re.search(r"^on:\n  workflow_dispatch:\n    inputs:\n", text, re.M)
    assert re.search(r"^on:\n  workflow_dispatch:\n(    .*\n)+\n", text, re.M)  # nothing else
    for name in ("good", "bad", "selection"):
        assert re.search(rf"^      {name}:\n(        .*\n)*        required: true\n", text, re.M)
    # the inputs reach the script through env:, never spliced into it
    script = text.split("run: |")[1]
    assert "${{" not in script.split("- name: Keep")[0]
    assert "GOOD: ${{ inputs.good }}" in text and '"$GOOD" "$BAD" --selection "$SELECTION"' in text
    # where the tests come from: each commit's own unless the input is given
    assert re.search(r"^      tests_from:\n(        .*\n)*        required: false\n", text, re.M)
    assert "TESTS_FROM: ${{ inputs.tests_from }}" in text
    assert '${TESTS_FROM:+"--tests-from=$TESTS_FROM"}' in script
    assert "fetch-depth: 0" in text and "permissions:\n  contents: read\n" in text
    assert text.count("permissions:") == 1


@pytest.mark.parametrize("given, args", [("", []), ("worktree", ["--tests-from=worktree"]),
                                         ("v1.2 x", ["--tests-from=v1.2 x"])])
def test_the_bisect_workflows_tests_from_input_is_one_option_or_none(given, args):
    """As bash expands the script's word: no option for an empty input, one word otherwise."""
    text = next(p for p in WORKFLOWS if p.name == BISECT).read_text()
    [word] = re.findall(r"\$\{TESTS_FROM:\+[^}]*\}", text)
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c",
                           f'for a in {word}; do printf "%s\\n" "$a"; done'],
                          env={"TESTS_FROM": given, "PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, check=True)
    assert done.stdout.splitlines() == args
