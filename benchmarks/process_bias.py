"""The bias of a process pair, A/A, at two commits in one run: design effects and generations.

    python benchmarks/process_bias.py --revs HEAD~1,HEAD --sessions 4 \\
        -- suites/test_ops.py -k "conv2d and not grad"

For each commit it makes a worktree, and then, interleaved (rev 1, rev 2, rev 1, ...), runs an
A/A session in each: ``pytest ARGS --opperf --opperf-compare=HEAD`` in the worktree, both sides
that commit's code, with ``ci/thresholds.toml``. From each session's results it prints what the
session itself estimated of its process pairs: the median design effect of its time metrics
(the variance of a mean inflated by the spread between generations; 1 where none was shown),
the share of them above 2, the spread (standard deviation of the log) of the generations'
geometric means head/base, the generations, the undecided metrics and the wall time; then the
same per commit over all its sessions. Asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# the A/B sessions and the git calls of the acceptance benchmark, beside this file
_acceptance = importlib.import_module("benchmarks.ab_acceptance")
git = _acceptance.git
EFFECT = re.compile(r"design effect ([0-9.]+)")


def figures(compare: dict) -> dict[str, float]:
    """What one session's results say of its process pairs."""
    effects = []
    for d in compare["decisions"]:
        if d["metric"].split(":", 1)[0] in ("call_ms", "step_ms", "examples_per_sec"):
            found = EFFECT.search(d.get("statistic") or "")
            effects.append(float(found.group(1)) if found else 1.0)
    means = [g["geometric_mean"] for g in compare["generations"] if g.get("geometric_mean")]
    logs = [math.log(m) for m in means]
    return {
        "effect": statistics.median(effects) if effects else math.nan,
        "above2": sum(e > 2 for e in effects) / len(effects) if effects else math.nan,
        "spread": statistics.stdev(logs) if len(logs) > 1 else math.nan,
        "generations": len(compare["generations"]),
        "undecided": sum(d["verdict"] == "undecided" for d in compare["decisions"]),
        "metrics": len(compare["decisions"]),
    }


def session(tree: Path, args: list[str], out: Path) -> tuple[dict[str, float], float, int]:
    """One A/A session in ``tree`` (``ab_acceptance.py``'s, against its HEAD) and its figures."""
    code, data, elapsed = _acceptance.session(tree, "HEAD", args, out)
    return figures(data["compare"]), elapsed, code


def line(f: dict[str, float]) -> str:
    return (f"median design effect {f['effect']:.2f}, {100 * f['above2']:.0f} % above 2, "
            f"generations' spread {100 * f['spread']:.2f} %, {f['generations']:.0f} generations, "
            f"{f['undecided']:.0f} of {f['metrics']:.0f} undecided")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revs", required=True, help="two (or more) commits, comma-separated")
    parser.add_argument("--sessions", type=int, default=4, help="A/A sessions per commit")
    parser.add_argument("--workload", default="small")
    parser.add_argument("pytest_args", nargs="*", default=["suites/test_ops.py"])
    opts = parser.parse_args()
    revs = [r for r in opts.revs.split(",") if r]
    args = [f"--opperf-workload={opts.workload}", "--opperf-device=cpu",
            "--opperf-thresholds=ci/thresholds.toml", *opts.pytest_args]
    tally: dict[str, list[dict[str, float]]] = {r: [] for r in revs}
    with tempfile.TemporaryDirectory(prefix="process-bias-") as tmp:
        where = Path(tmp)
        trees = {}
        try:
            for i, rev in enumerate(revs):
                trees[rev] = where / f"rev{i}"
                git("worktree", "add", "--detach", "--quiet", str(trees[rev]), rev)
            for n in range(opts.sessions):
                for rev in revs:
                    f, elapsed, code = session(trees[rev], args, where / f"{n}.json")
                    tally[rev].append({**f, "seconds": elapsed})
                    print(f"{rev} #{n + 1}: exit {code}, {line(f)}, {elapsed:.0f} s", flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                               capture_output=True)
            git("worktree", "prune")
            shutil.rmtree(where, ignore_errors=True)
    print()
    for rev, rows in tally.items():
        if rows:
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            print(f"{rev}: over {len(rows)} sessions, at the median: {line(med)}, "
                  f"{med['seconds']:.0f} s")


if __name__ == "__main__":
    main()
