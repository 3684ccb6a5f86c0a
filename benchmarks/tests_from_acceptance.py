"""Acceptance of ``--tests-from``: a benchmark written today, a range of commits that never held it.

Each run makes a throwaway git repository of a small pure-Python package (``tests/tests_from_repo
.py``: ``fastsum``, flat layout, no test of its own; N commits after the first) and writes one
benchmark file outside it afterwards. Cases:

* ``culprit``: ``fastsum.work`` ``--factor`` (default 1.5) as slow at one commit drawn at random,
  the other commits unrelated changes of the package; ``bisect GOOD BAD --tests-from=worktree --
  <the file>``; a run counts when that commit is the one culprit, verified, in at most
  log2(N) + 3 A/B steps, and each side imported ``fastsum`` from its own commit's worktree;
* ``aa``: the same range without the slowdown; a run counts when it ends "not reproduced",
  exit 1, no culprit;
* ``leak``: a decoy ``fastsum`` installed in the sides' site-packages (an environment of its own
  that reaches this one's packages through a .pth file; ``--python`` it) and the culprit case
  again: a run counts as the culprit case's does, with neither side's import of ``fastsum`` the
  decoy's;
* ``pr``: a pull request (base HEAD~1) whose head adds a benchmark and makes what it measures
  2x as slow: ``pytest --opperf --opperf-compare=HEAD~1 --opperf-tests-from=head bench/`` must
  fail the gate naming the benchmark; without ``--opperf-tests-from`` the benchmark must be
  reported as new (on the head only) and the gate pass.

    python benchmarks/tests_from_acceptance.py --runs 10 --n 40
    python benchmarks/tests_from_acceptance.py --cases aa,pr --runs 3

It prints one line per run and a summary per case; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import site
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.bisect_repo import commit  # noqa: E402
from tests.tests_from_repo import bench, make, write_package  # noqa: E402

DECOY = "_PASSES = 2\n\n\ndef work(n):\n    return n\n\n\ndef describe():\n    return 'decoy'\n"
OLD = 'import fastsum\n\n\ndef test_describe():\n    assert fastsum.describe() == "fastsum"\n'


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPPERF_",
                                                                    "GITHUB_"))}
    env["PYTHONPATH"] = str(ROOT)
    return env


def decoy_python(where: Path) -> tuple[str, Path]:
    """An environment whose site-packages holds a decoy fastsum (and this one's packages)."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    sitedir = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                   "get_paths()['purelib'])"], capture_output=True, text=True,
                                  check=True).stdout.strip())
    (sitedir / "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    (sitedir / "fastsum").mkdir()
    (sitedir / "fastsum" / "__init__.py").write_text(DECOY)
    return str(python), (sitedir / "fastsum").resolve()


def bisect_run(case: str, n: int, seed: int, args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(seed)
    items: list[float | str] = ["-"] * n
    expected: list[int] = []
    if case in ("culprit", "leak"):
        at = rng.randrange(1, n + 1)
        items[at - 1] = args.factor
        expected = [at]
    with tempfile.TemporaryDirectory(prefix="opperf-tests-from-acceptance-") as tmp:
        repo = Path(tmp) / "repo"
        shas = make(repo, items)
        bench_file = Path(tmp) / "elsewhere" / "test_bench.py"
        bench_file.parent.mkdir()
        bench_file.write_text(bench(args.size))
        python, decoy = (decoy_python(Path(tmp) / "env") if case == "leak"
                         else (sys.executable, None))
        out = Path(tmp) / "bisect.json"
        command = [sys.executable, "-m", "pytest_opperf", "bisect", shas[0], shas[-1],
                   "--tests-from=worktree", "--budget", str(args.budget), "--python", python,
                   "--json", str(out), "--", str(bench_file)]
        started = time.monotonic()
        done = subprocess.run(command, cwd=repo, env=environment(), capture_output=True,
                              text=True)
        wall = time.monotonic() - started
        doc = json.loads(out.read_text()) if out.is_file() else {}
    named = [c["position"] for c in doc.get("culprits", []) if c.get("verified")]
    steps = int(doc.get("ab_steps", 0))
    imports = doc.get("tests_from", {}).get("imports", [])
    own = bool(imports) and all(
        Path(i["base"]).parent.name == shas[0][:12] and Path(i["head"]).parent.name
        != shas[0][:12] for i in imports if i["module"] == "fastsum")
    if case == "aa":
        ok = done.returncode == 1 and doc.get("status") == "not reproduced" and not named
    else:
        ok = done.returncode == 0 and named == expected and steps <= math.log2(n) + 3 and own
        if decoy is not None:
            ok = ok and str(decoy) not in json.dumps(doc)
    row: dict[str, object] = {"case": case, "n": n, "seed": seed, "ok": ok,
                              "exit": done.returncode, "status": doc.get("status"),
                              "expected": expected, "named": named, "steps": steps,
                              "kinds": [s.get("kind") for s in doc.get("steps", [])],
                              "sessions": doc.get("sessions"), "pairs": doc.get("pairs"),
                              "wall_s": round(wall, 1), "imports": imports}
    if not doc:
        row["error"] = (done.stderr.strip().splitlines() or ["?"])[-1]
    return row


def pr_run(seed: int, args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="opperf-tests-from-pr-") as tmp:
        repo = Path(tmp) / "repo"
        make(repo, [])
        (repo / "bench").mkdir()
        (repo / "bench" / "test_old.py").write_text(OLD)
        commit(repo, "a test")
        (repo / "bench" / "test_new.py").write_text(bench(args.size))
        write_package(repo, 4, 2)
        commit(repo, "work 2x as slow, and its benchmark")
        rows = {}
        for name, extra in (("with", ["--opperf-tests-from=head"]), ("without", [])):
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--opperf",
                 "--opperf-compare=HEAD~1", *extra, "bench/", f"--opperf-json={name}.json"],
                cwd=repo, env=environment(), capture_output=True, text=True)
            data = json.loads((repo / f"{name}.json").read_text())
            rows[name] = (done.returncode, done.stdout, data.get("compare", {}),
                          time.monotonic() - started)
    code, out, compare, wall = rows["with"]
    failed = code == 1 and "FAIL bench/test_new.py::test_work call_ms:work" in out
    code2, _, compare2, wall2 = rows["without"]
    new = code2 == 0 and compare2.get("added") == ["bench/test_new.py::test_work"]
    ratio = next((d["head"] / d["base"] for d in compare.get("decisions", [])
                  if d.get("verdict") == "regressed" and d.get("base")), None)
    return {"case": "pr", "seed": seed, "ok": failed and new, "with_exit": code,
            "gate_failed_naming_it": failed, "without_exit": code2, "reported_new": new,
            "head_over_base": ratio, "wall_s": round(wall + wall2, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="culprit,aa,leak,pr")
    parser.add_argument("--n", type=int, default=40, help="commits after the first (default 40)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--factor", type=float, default=1.5,
                        help="work's slowdown in the culprit case (default 1.5)")
    parser.add_argument("--size", type=int, default=20000,
                        help="the benchmark's n: work(n) loops n times per pass")
    parser.add_argument("--budget", type=float, default=1800.0,
                        help="each bisection's --budget (s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for case in args.cases.split(","):
        rows = []
        for run in range(args.runs):
            row = (pr_run(args.seed + run, args) if case == "pr"
                   else bisect_run(case, args.n, args.seed + run, args))
            rows.append(row)
            print(json.dumps(row), flush=True)
        walls = [float(str(r["wall_s"])) for r in rows]
        summary = (f"== {case}: {sum(bool(r['ok']) for r in rows)} of {len(rows)} as expected; "
                   f"wall {min(walls):.0f}-{max(walls):.0f} s (median "
                   f"{statistics.median(walls):.0f} s)")
        if case != "pr":
            steps = [int(str(r["steps"])) for r in rows]
            summary += (f"; N = {args.n}; A/B steps {min(steps)}-{max(steps)} (median "
                        f"{statistics.median(steps):g}, limit log2(N)+3 = "
                        f"{math.log2(args.n) + 3:.1f})")
        print(summary, flush=True)


if __name__ == "__main__":
    main()
