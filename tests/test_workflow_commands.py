"""Every opperf command of the GitHub workflows, run as the runner runs it.

Each ``run:`` step of ``.github/workflows/*.yml`` that runs ``pytest ... --opperf``,
``python -m pytest_opperf`` or ``ci/gpu-check.sh`` is run for each event of its workflow's ``on:``
whose ``if:`` it passes (a ``workflow_dispatch`` with the inputs of :data:`EXPRESSIONS`: the
bisect workflow bisects the last commit on one cheap test): its script as the runner gets it
(YAML folding, ``${{ ... }}`` expressions given the event's values, the base commit of a pull
request being ``HEAD``), with the step's ``env:``, through ``bash --noprofile --norc -eo
pipefail`` as the runner does, in a fresh clone of the repository (HEAD and the working tree's
changes, files git ignores left out: no ``opperf-results/`` or other leftovers of earlier runs),
without torch and paddle (the opperf jobs install neither). Its upload steps' paths must then
hold what the step wrote.

A job's matrix (the per-op shards) gives one command per value, ``${{ matrix.* }}`` substituted.
A job that downloads its ``needs:`` jobs' artifacts (``opperf-parts/``: the merge and gate of the
parts) gets what those jobs' commands uploaded, each under its artifact's name, as ``gh run
download`` puts it; those commands run once per event for every test that needs them.

So that the commands take seconds, not minutes: ``--opperf-workload`` is ``tiny``,
pytest-benchmark's rounds are short, an A/B command runs a few tests (``-k``), and
``ci/gpu-check.sh`` runs in its dry mode (``GPU_CHECK_DRY=1``: the same steps and options on the
CPU). Every option the workflow passes is passed as it is: one it passes can never be refused only
in CI.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.test_workflows import WORKFLOWS

ROOT = Path(__file__).parent.parent
OPPERF_STEP = re.compile(r"\bpytest\b[^\n]*--opperf\b|python -m pytest_opperf\b|ci/gpu-check\.sh")
# what the expressions of the workflows' env and scripts are on each event
RUN = {"github.server_url": "https://github.com", "github.repository": "owner/repo",
       "github.run_id": "1"}
EXPRESSIONS = {
    "push": {"github.event_name": "push", "github.event.pull_request.base.sha": "",
             "github.event.pull_request.number": "", **RUN},
    "pull_request": {"github.event_name": "pull_request",
                     "github.event.pull_request.base.sha": "HEAD",
                     "github.event.pull_request.number": "7", **RUN},
    "workflow_dispatch": {"github.event_name": "workflow_dispatch", "inputs.good": "HEAD~1",
                          "inputs.bad": "HEAD", "inputs.budget": "30",
                          "inputs.tests_from": "worktree",
                          "inputs.selection": "suites/test_ops.py -k 'relu and N4xC64x8x8 and "
                                              "not grad' --opperf-workload=tiny "
                                              "--opperf-device=cpu",
                          "github.event.pull_request.base.sha": "",
                          "github.event.pull_request.number": "", **RUN},
}
# workflows that run no opperf command
NO_OPPERF = {"opperf-comment.yml": "it posts the text of an artifact of ci.yml's run"}
# what a step's run leaves, by workflow: (a line of its output, the files of its upload folder,
# a word of the job summary, a line it must not print); the bisection of the last commit measures
# both (an A/A: not reproduced, or undecided on a busy machine), it does not end as "broken"
EXPECTED = {
    "opperf-bisect.yml": ("bisect: 1 A/B step(s), ", {"bisect.json", "bisect.md"},
                          "opperf bisect", "bisect: broken: "),
}
GATE = ("gate: PASSED", {"results.json", "report.md", "trace.json"}, "gate", "gate: FAILED")
# run by hand elsewhere: (workflow, job, step name, event) -> why not here
NOT_HERE = {
    ("opperf-gpu.yml", "gate", "Verify the GPU, run the suites and gate (ci/gpu-check.sh)",
     "pull_request"):
        "COMPARE makes the whole suites run A/B (minutes even at the tiny size); the one option "
        "it adds, --opperf-compare=<base sha>, is run by the CPU job's A/B command",
}
FAST_BENCHMARKS = "--benchmark-max-time=0.002 --benchmark-min-rounds=2"
AB_SELECTION = "-k test_program_clone"
AB_OPS_SELECTION = "-k pool2d"  # four per-op tests: a test in each of three shards
PARTS = "opperf-parts"  # where the merging job downloads its needs' artifacts
NO_PEERS = {  # the opperf jobs install neither: their imports fail as on the runner
    "torch": "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n",
    "paddle": "raise ModuleNotFoundError(\"No module named 'paddle'\", name='paddle')\n",
}


@dataclass
class Step:
    workflow: str
    job: str
    name: str
    event: str
    script: str  # as the runner runs it, expressions substituted
    env: dict[str, str]
    uploads: list[str] = field(default_factory=list)  # the job's upload-artifact paths
    artifacts: dict[str, str] = field(default_factory=dict)  # upload path -> artifact name
    matrix: str = ""  # the job's matrix values, "shard=2"
    needs: list[str] = field(default_factory=list)  # the jobs whose artifacts it downloads

    @property
    def id(self) -> str:
        return f"{self.workflow}:{self.job}{f'[{self.matrix}]' if self.matrix else ''}:{self.event}"


def _yaml(path: Path) -> dict:
    from ruamel.yaml import YAML  # check-jsonschema's, in the test extra

    return YAML(typ="safe").load(path.read_text())


def _substitute(text: str, event: str, matrix: dict[str, str] | None = None) -> str:
    values = {**EXPRESSIONS[event], **{f"matrix.{k}": v for k, v in (matrix or {}).items()}}

    def value(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        if expr not in values:
            raise AssertionError(f"no value for the expression ${{{{ {expr} }}}} on {event}: add "
                                 "it to EXPRESSIONS")
        return values[expr]

    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def _runs_on(condition: object, event: str) -> bool:
    """Whether a step's ``if:`` holds on ``event`` (the forms the workflows use)."""
    if condition is None or condition == "always()":
        return True
    text = _substitute(str(condition), event) if "${{" in str(condition) else str(condition)
    match = re.fullmatch(r"github\.event_name (==|!=) '(\w+)'", text.strip())
    if match is None:
        raise AssertionError(f"cannot evaluate the condition {condition!r}: teach _runs_on")
    return (match.group(2) == event) == (match.group(1) == "==")


def _matrices(job: dict) -> list[dict[str, str]]:
    """Each value of a job's one-key matrix (the forms the workflows use), or one empty one."""
    matrix = (job.get("strategy") or {}).get("matrix") or {}
    if not matrix:
        return [{}]
    assert len(matrix) == 1, f"teach _matrices a matrix of {sorted(matrix)}"
    (key, values), = matrix.items()
    return [{key: str(value)} for value in values]


def opperf_steps() -> list[Step]:
    """Every (step, event, matrix value) of the workflows that runs an opperf command."""
    steps = []
    for path in WORKFLOWS:
        workflow = _yaml(path)
        events = [e for e in EXPRESSIONS if e in workflow["on"]]
        for job_id, job in workflow["jobs"].items():
            upload_steps = [s for s in job["steps"]
                            if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
            needs = job.get("needs") or []
            for step in job["steps"]:
                script = step.get("run")
                if script is None or not OPPERF_STEP.search(script):
                    continue
                for event in events:
                    if not _runs_on(step.get("if"), event):
                        continue
                    for matrix in (_matrices(job) if "matrix." in script + str(step.get("env"))
                                   else [{}]):
                        env = {k: _substitute(str(v), event, matrix)
                               for k, v in (step.get("env") or {}).items()}
                        artifacts = {s["with"]["path"]: _substitute(s["with"]["name"], event,
                                                                    matrix)
                                     for s in upload_steps}
                        steps.append(Step(path.name, job_id, step.get("name", script), event,
                                          _substitute(script, event, matrix), env,
                                          list(artifacts), artifacts,
                                          ",".join(f"{k}={v}" for k, v in matrix.items()),
                                          [needs] if isinstance(needs, str) else list(needs)))
    return steps


STEPS = opperf_steps()
HERE = [s for s in STEPS if (s.workflow, s.job, s.name, s.event) not in NOT_HERE]


def quick(script: str) -> str:
    """The script with the speed-ups of the module's docstring; every option it had stays."""
    lines = script.splitlines()
    for i, line in enumerate(lines):
        if not re.search(r"\bpytest\b.*--opperf\b", line):
            continue
        assert not line.rstrip().endswith("\\"), f"a continued pytest command: {line}"
        assert "--opperf-workload=" in line, f"the workload is not set: {line}"
        line = re.sub(r"--opperf-workload=\S+", "--opperf-workload=tiny", line)
        line = line.replace("--opperf-device=gpu", "--opperf-device=cpu")  # no GPU in CI's tests
        selection = AB_OPS_SELECTION if "pytest suites/test_ops.py " in line else AB_SELECTION
        extra = [FAST_BENCHMARKS] + ([selection] if "--opperf-compare" in line else [])
        lines[i] = " ".join([line.rstrip(), *extra])
    return "\n".join(lines)


def fresh_clone(dest: Path) -> Path:
    """The repository at HEAD in ``dest``, with the working tree's changes: to tracked files, and
    the files git does not ignore (what a commit of everything would hold)."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--git-dir"],
                      capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the workflows run in one")

    def git(*args: str, cwd: Path = ROOT, **kw: object) -> str:
        out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, **kw)
        return out.stdout.decode() if isinstance(out.stdout, bytes) else out.stdout

    head = git("rev-parse", "HEAD").strip()
    git("clone", "--quiet", "--shared", "--no-checkout", str(ROOT), str(dest))
    git("-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", head, cwd=dest)
    diff = subprocess.run(["git", "diff", "HEAD", "--binary"], cwd=ROOT, check=True,
                          capture_output=True).stdout
    if diff:
        subprocess.run(["git", "apply", "--whitespace=nowarn"], cwd=dest, input=diff, check=True,
                       capture_output=True)
    for name in git("ls-files", "--others", "--exclude-standard", "-z").split("\0"):
        if name and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def runner_env(tmp_path: Path, step: Step, clone: Path | None = None) -> dict[str, str]:
    """The step's environment; the clone's package first on the path, as the job's ``pip install
    -e .`` of its checkout makes it (not that of the environment running these tests)."""
    hidden = tmp_path / "no-peers"
    hidden.mkdir()
    for name, text in NO_PEERS.items():
        (hidden / f"{name}.py").write_text(text)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_", "OPPERF_")) and k != "COMPARE"}
    env.update(step.env)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(hidden) + (f"{os.pathsep}{clone}" if clone is not None else "")
    env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "step-summary.md")
    if "ci/gpu-check.sh" in step.script:
        env.update(GPU_CHECK_DRY="1", PYTHON=sys.executable)
    return env


def test_every_workflow_runs_opperf_and_each_command_is_run_here():
    assert {s.workflow for s in STEPS} == {p.name for p in WORKFLOWS} - set(NO_OPPERF)
    parts = {("ci.yml", f"opperf-ops[shard={k}]") for k in (1, 2, 3)} | {
        ("ci.yml", "opperf-e2e"), ("ci.yml", "opperf-cpu")}
    assert {(s.workflow, s.id.split(":")[1], s.event) for s in HERE} == {
        (w, job, event) for w, job in parts for event in ("push", "pull_request")} | {
        ("opperf-gpu.yml", "gate", "push"), ("opperf-bisect.yml", "bisect", "workflow_dispatch")}
    assert set(NOT_HERE) <= {(s.workflow, s.job, s.name, s.event) for s in STEPS}


def test_quick_keeps_every_option_of_the_workflow():
    for step, selection in ((next(s for s in HERE if s.event == "pull_request" and
                                  s.job == "opperf-ops"), AB_OPS_SELECTION),
                            (next(s for s in HERE if s.event == "pull_request" and
                                  s.job == "opperf-e2e"), AB_SELECTION)):
        given = shlex.split(step.script)
        run = shlex.split(quick(step.script))
        assert run[: len(given)] == [a.replace("--opperf-workload=small",
                                               "--opperf-workload=tiny") for a in given]
        assert '--opperf-compare="$BASE_SHA"' in step.script and step.env["BASE_SHA"] == "HEAD"
        assert run[len(given):] == [*FAST_BENCHMARKS.split(), *selection.split()]
    shards = [s for s in HERE if s.job == "opperf-ops" and s.event == "push"]
    assert [s.env for s in shards] == [{"SHARD": k} for k in "123"]
    assert all('--opperf-shard="$SHARD/3"' in s.script for s in shards)


def _run(step: Step, tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """``step`` in a fresh clone of its own, as the runner runs it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    clone = fresh_clone(tmp_path / "clone")
    for upload in step.uploads:  # as in the runner's checkout: what the step writes is not there
        assert not (clone / upload).exists(), f"{upload} is in the checkout"
    if step.needs:  # what `gh run download` gets: each needed job's artifacts, under their names
        for needed in (s for s in HERE if s.job in step.needs and s.event == step.event):
            done = _part(needed, tmp_path.parent)
            for upload, name in needed.artifacts.items():
                shutil.copytree(done / upload, clone / PARTS / name)
    script = tmp_path / "step.sh"
    script.write_text(quick(step.script) + "\n")
    result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                            cwd=clone, env=runner_env(tmp_path, step, clone), capture_output=True,
                            text=True, timeout=300)
    return clone, result


_PARTS: dict[str, tuple[Path, subprocess.CompletedProcess]] = {}  # step id -> its run, once


def _part(step: Step, where: Path) -> Path:
    """The clone in which a part's step ran (once a session), after it passed."""
    if step.id not in _PARTS:
        _PARTS[step.id] = _run(step, where / step.id.replace(":", "-"))
    clone, result = _PARTS[step.id]
    assert result.returncode == 0, f"{step.id}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return clone


@pytest.mark.parametrize("step", HERE, ids=lambda s: s.id)
def test_the_workflow_command_runs_as_written(tmp_path, step):
    needed_by_others = any(step.job in s.needs for s in HERE)
    if needed_by_others:
        clone, result = _PARTS.setdefault(step.id, _run(step, tmp_path / "own"))
    else:
        clone, result = _run(step, tmp_path / "own")
    output = result.stdout[-6000:] + result.stderr[-3000:]
    assert result.returncode == 0, f"{quick(step.script)}\n{output}"
    line, expected_files, word, never = EXPECTED.get(step.workflow, GATE)
    assert line in result.stdout and never not in result.stdout, output
    for upload in step.uploads:
        kept = clone / upload
        assert kept.is_dir(), f"nothing to upload at {upload}"
        files = {p.name for p in kept.iterdir()}
        if upload.startswith("opperf-comment"):
            assert {"comment.md", "pull-request"} <= files
            assert (kept / "pull-request").read_text().strip() == (
                "7" if step.event == "pull_request" else "")
        elif step.needs:  # the merged session: results and report (no trace: none is kept)
            assert {"results.json", "report.md"} <= files
        else:
            assert expected_files <= files
    summary = tmp_path / "own" / "step-summary.md"
    assert summary.is_file() and word in summary.read_text().lower()
    if step.workflow == "opperf-bisect.yml":  # the tests_from input reached the bisection
        doc = json.loads((clone / "opperf-results" / "bisect.json").read_text())
        assert doc["tests_from"]["source"] == EXPRESSIONS[step.event]["inputs.tests_from"]


def test_the_merged_parts_are_the_whole_selection(tmp_path):
    """The gate job's results hold every run of the parts, each shard of the per-op suite once."""
    step = next(s for s in HERE if s.job == "opperf-cpu" and s.event == "push")
    clone, result = _run(step, tmp_path / "gate")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    merged = json.loads((clone / "opperf-results" / "results.json").read_text())
    parts = merged["session"]["merged"]
    assert sorted(p["shard"] or "" for p in parts) == ["", "1/3", "2/3", "3/3"]
    ids = [r["id"] for r in merged["runs"]]
    assert len(ids) == len(set(ids)) == sum(p["runs"] for p in parts)
    assert any(i.startswith("suites/test_ops.py::") for i in ids)
    assert any(i.startswith("suites/test_resnet50.py::") for i in ids)
    comment = (clone / "opperf-comment" / "comment.md").read_text()
    assert comment.startswith("<!-- pytest-opperf gate comment -->")
    assert "(https://github.com/owner/repo/actions/runs/1)" in comment
