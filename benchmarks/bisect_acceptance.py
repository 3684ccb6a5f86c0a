"""Acceptance of ``python -m pytest_opperf bisect``: culprits named, spreads, no culprit on noise.

Each run makes a throwaway git repository from this project (``tests/bisect_repo.py``: the
project as the first commit, conv2d's kernel wrapped so that a later commit can make it spin for a
share of its own time, then N commits) and bisects it from its first commit to its last with
``--json``. Cases:

* ``culprit``: conv2d ``--factor`` (default 1.10: 10 %) as slow at one commit drawn at random, the
  other N - 1 commits unrelated; a run counts when that commit is the one culprit, verified, in at
  most log2(N) + 3 A/B steps;
* ``spread``: conv2d 3x as slow over two adjacent commits (sqrt(3) each); a run counts when both
  are named, verified;
* ``aa``: N unrelated commits; a run counts when it ends "not reproduced" (exit 1) and names no
  culprit.

    python benchmarks/bisect_acceptance.py --runs 10                       # every case, N = 16
    python benchmarks/bisect_acceptance.py --cases culprit --n 16 64 --runs 3   # wall time, steps
    python benchmarks/bisect_acceptance.py --cases culprit --factor 1.10 --runs 10

The framework and its BLAS run on one thread (``OPPERF_NUM_THREADS=1``, ``--threads``, and
``OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=1``): the injected busy wait is then the
whole slowdown. A factor of 1.10 measured 1.105-1.129x in an A/B here (``--opperf-compare``, 24-32
pairs). With other threads next to the wait it is not: with conv2d's GEMM split over a pool
thread the wait lets that thread fall asleep and the next call must wake it (1.27x); next to
OpenBLAS's own two threads, whose workers spin for a while after each GEMM, the same factor
measured 1.18-1.88x (the framework on one thread, BLAS left alone; the cause not isolated).

It prints one line per run and a summary per case and N; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.bisect_repo import make  # noqa: E402

BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SELECTION = "suites/test_ops.py -k 'conv2d and k7s2p3 and not grad' --opperf-workload=small"


def plan(case: str, n: int, rng: random.Random, factor: float
         ) -> tuple[list[str | float], list[int]]:
    """The commits after the first, and the positions that should be named."""
    items: list[str | float] = ["-"] * n
    if case == "culprit":
        at = rng.randrange(1, n + 1)
        items[at - 1] = factor
        return items, [at]
    if case == "spread":
        at = rng.randrange(1, n)
        items[at - 1], items[at] = math.sqrt(3.0), 3.0
        return items, [at, at + 1]
    return items, []


def one(case: str, n: int, seed: int, args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(seed)
    items, expected = plan(case, n, rng, args.factor)
    with tempfile.TemporaryDirectory(prefix="opperf-bisect-acceptance-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        shas = make(repo, items)
        out = Path(tmp) / "bisect.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPPERF_"))}
        env["PYTHONPATH"] = str(ROOT)
        env["OPPERF_NUM_THREADS"] = str(args.threads)
        if args.threads == 1:
            env.update(dict.fromkeys(BLAS_THREADS, "1"))
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest_opperf", "bisect", shas[0], shas[-1], "--budget",
             str(args.budget), "--json", str(out), "--selection", args.selection],
            cwd=repo, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        doc = json.loads(out.read_text()) if out.is_file() else {}
    named = [c["position"] for c in doc.get("culprits", []) if c.get("verified")]
    steps = int(doc.get("ab_steps", 0))
    if case == "aa":
        ok = done.returncode == 1 and doc.get("status") == "not reproduced" and not doc.get(
            "culprits")
    elif case == "culprit":
        ok = done.returncode == 0 and named == expected and steps <= math.log2(n) + 3
    else:
        ok = done.returncode == 0 and sorted(named) == expected
    confirm: dict[str, object] = next((m for s in doc.get("steps", []) if s["kind"] == "confirm"
                    for m in s["metrics"]), {})
    row = {"case": case, "n": n, "seed": seed, "ok": ok, "exit": done.returncode,
           "status": doc.get("status"), "expected": expected, "named": named, "steps": steps,
           "sessions": doc.get("sessions"), "pairs": doc.get("pairs"), "wall_s": round(wall, 1),
           "confirm": confirm.get("estimate")}
    if not doc:
        row["error"] = (done.stderr.strip().splitlines() or ["?"])[-1]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="culprit,spread,aa")
    parser.add_argument("--n", type=int, nargs="+", default=[16],
                        help="commits after the first (default 16)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--factor", type=float, default=1.10,
                        help="conv2d's slowdown in the culprit case (default 1.10)")
    parser.add_argument("--budget", type=float, default=1800.0,
                        help="each bisection's --budget (s)")
    parser.add_argument("--selection", default=SELECTION)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="the framework's threads (OPPERF_NUM_THREADS; default 1, and BLAS "
                             "on one thread too: see above)")
    args = parser.parse_args()
    for case in args.cases.split(","):
        for n in args.n:
            rows = []
            for run in range(args.runs):
                row = one(case, n, args.seed + run, args)
                rows.append(row)
                print(json.dumps(row), flush=True)
            walls = [float(str(r["wall_s"])) for r in rows]
            steps = [int(str(r["steps"])) for r in rows]
            print(f"== {case}, N = {n}: {sum(bool(r['ok']) for r in rows)} of {len(rows)} as "
                  f"expected; A/B steps {min(steps)}-{max(steps)} (median "
                  f"{statistics.median(steps):g}, limit log2(N)+3 = {math.log2(n) + 3:.1f}); "
                  f"wall {min(walls):.0f}-{max(walls):.0f} s (median "
                  f"{statistics.median(walls):.0f} s)", flush=True)


if __name__ == "__main__":
    main()
