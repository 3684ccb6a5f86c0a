"""Wall time and exit status of ``ci.yml``'s opperf jobs, their ``run:`` lines run verbatim.

    python benchmarks/workflow_figures.py [--event push|pull_request] [--one-job] [--inject CASE]
                                          [--job NAME] [--dir DIR]

Each opperf job of ``ci.yml`` for the event (the per-op shards of the matrix, the e2e job, then
the job that merges and gates what they uploaded) runs as a runner runs it, one after another:
a fresh clone of HEAD (the working tree's changes included) of its own, a fresh virtual
environment, the job's install step, then its opperf step through ``bash -eo pipefail`` with the
step's ``env:``, ``${{ ... }}`` given the event's values (a pull request's base commit is
``HEAD``: an A/A session). Nothing is shortened: the workload, rounds and selection are the
workflow's. The steps are read by ``tests/test_workflow_commands.py``'s reader, the one the
workflow test runs them with (shortened) in CI.

Prints, per job: the install time, the opperf step's wall time and exit status, and its ``gate:``
line; then the sum of the parts and the longest part (the matrix's wall time before the merging
job). ``--one-job`` also runs the whole main job as one command (the e2e step's command over all
of ``suites/``, as ``ci.yml`` ran it before the matrix), for the figure of one job against the
shards. ``--inject CASE`` appends one of ``ab_acceptance.py``'s injected regressions to every
clone's ``reference_framework/__init__.py``, uncommitted: the head of the pull request then
differs from its base (``HEAD``) by that regression, as a pull request that brings it would.
``--against-push`` (with ``--event pull_request``) then runs the same jobs' push steps, each in
a fresh clone of its own too, and prints the pull request's sum over theirs. ``--job NAME`` runs
only that job of the matrix (``opperf-e2e``, or ``opperf-ops``'s shards) and
no merging job: on GitHub each job has a runner of its own, so one job alone is its figure.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the workflow test's reader of the steps (imported by name: the tests are not type-checked)
_steps = importlib.import_module("tests.test_workflow_commands")
PARTS, fresh_clone, opperf_steps = _steps.PARTS, _steps.fresh_clone, _steps.opperf_steps
# the injected regressions of the acceptance benchmark, beside this file
_acceptance = importlib.import_module("benchmarks.ab_acceptance")


def _clone(dest: Path, inject: str | None) -> Path:
    """A fresh clone of HEAD with the working tree's changes, and the injected case if any."""
    clone = fresh_clone(dest)
    if inject:
        _acceptance.inject(clone, _acceptance.CASES[inject][0])
    return clone


def _install(clone: Path) -> tuple[dict[str, str], float]:
    """A fresh virtual environment in the clone with the job's install step run in it."""
    start = time.perf_counter()
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "GITHUB_", "OPPERF_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           "python -m pip install --quiet -e ."], cwd=clone, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the install step failed in {clone}:\n{done.stdout}{done.stderr}")
    return env, time.perf_counter() - start


def _run(step: Any, clone: Path, env: dict[str, str], summary: Path,
         script: str | None = None) -> tuple[int, float, str]:
    env = {**env, **step.env, "GITHUB_STEP_SUMMARY": str(summary)}
    start = time.perf_counter()
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           script or step.script], cwd=clone, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    gate = [line for line in done.stdout.splitlines() if line.startswith("gate: ")]
    (clone / "step.log").write_text(done.stdout + done.stderr)
    return done.returncode, wall, gate[-1] if gate else "(no gate line)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--event", choices=("push", "pull_request"), default="push")
    parser.add_argument("--one-job", action="store_true", help="also the main job as one command")
    parser.add_argument("--inject", choices=sorted(_acceptance.CASES),
                        help="an injected regression of ab_acceptance.py in every clone's head")
    parser.add_argument("--job", help="only this job of the matrix, without the merging job")
    parser.add_argument("--dir", help="where the clones go (default: a temporary directory)")
    parser.add_argument("--against-push", action="store_true",
                        help="with --event pull_request: then the same jobs' push steps, and the "
                             "ratio of the two sums")
    args = parser.parse_args()
    if args.against_push and args.event != "pull_request":
        parser.error("--against-push compares a pull request's jobs with their push: it takes "
                     "--event pull_request")
    where = Path(args.dir or tempfile.mkdtemp(prefix="opperf-workflow-"))
    steps = [s for s in opperf_steps() if s.workflow == "ci.yml" and s.event == args.event]
    parts = [s for s in steps if not s.needs]
    merging = [s for s in steps if s.needs]
    if args.job and args.one_job:
        parser.error("--one-job runs the whole main job as one command: it takes no --job")
    if args.job:
        names = sorted({s.job for s in parts})
        parts, merging = [s for s in parts if s.job == args.job], []
        if not parts:
            parser.error(f"ci.yml's {args.event} matrix has no job {args.job!r}: it has "
                         + ", ".join(names))
    clones: dict[str, Path] = {}
    walls: dict[str, float] = {}
    injected = f", {args.inject} injected" if args.inject else ""
    then = " then the merging job" if merging else ""
    print(f"ci.yml, {args.event}{injected}: {len(parts)} part(s){then}, in {where}")
    for step in parts + merging:
        clone = _clone(where / step.id.replace(":", "-").replace("/", "-"), args.inject)
        if step.needs:
            for part in parts:
                for upload, name in part.artifacts.items():
                    shutil.copytree(clones[part.id] / upload, clone / PARTS / name)
        env, install_s = _install(clone)
        rc, wall, gate = _run(step, clone, env, where / f"{clone.name}-summary.md")
        clones[step.id], walls[step.id] = clone, wall
        print(f"{step.id}: install {install_s:.0f} s; opperf step exit {rc} in {wall:.0f} s; "
              f"{gate}", flush=True)
    matrix = [walls[p.id] for p in parts]
    print(f"parts: sum {sum(matrix):.0f} s, longest {max(matrix):.0f} s"
          + (f"; with the merging job: {sum(walls.values()):.0f} s" if merging else ""))
    if args.against_push:
        jobs = {p.job for p in parts}
        pushed = [s for s in opperf_steps() if s.workflow == "ci.yml" and s.event == "push"
                  and not s.needs and s.job in jobs]
        push_walls = []
        for step in pushed:
            clone = _clone(where / ("push-" + step.id.replace(":", "-").replace("/", "-")),
                           args.inject)
            env, install_s = _install(clone)
            rc, wall, gate = _run(step, clone, env, where / f"{clone.name}-summary.md")
            push_walls.append(wall)
            print(f"{step.id}: install {install_s:.0f} s; opperf step exit {rc} in {wall:.0f} s; "
                  f"{gate}", flush=True)
        print(f"pull request over push: {sum(matrix):.0f} s / {sum(push_walls):.0f} s = "
              f"{sum(matrix) / sum(push_walls):.2f}")
    if args.one_job:
        e2e = next(s for s in parts if "--ignore=suites/test_ops.py" in s.script)
        script = re.sub(r"\s*--ignore=suites/test_ops\.py", "", e2e.script)
        clone = _clone(where / "one-job", args.inject)
        env, install_s = _install(clone)
        rc, wall, gate = _run(e2e, clone, env, where / "one-job-summary.md", script)
        print(f"one job (pytest suites/ with the e2e job's options): exit {rc} in {wall:.0f} s; "
              f"{gate}")


if __name__ == "__main__":
    main()
