"""The cost of A/B mode: the main job's wall time single-side and with ``--opperf-compare``.

    python benchmarks/ab_cost.py          # small workload, base = HEAD (worktree set-up included)
    python benchmarks/ab_cost.py --compare HEAD~1 --workload tiny

Runs ``pytest suites/ --opperf`` once, then the same with
``--opperf-compare=REV``, both with ``ci/thresholds.toml``, and prints both
wall times and their ratio (the issue's limit: 2.5x). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(args: list[str]) -> tuple[float, int, str]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, capture_output=True,
                          text=True)
    return time.monotonic() - start, done.returncode, (done.stdout + done.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", default="HEAD")
    parser.add_argument("--workload", default="small")
    parser.add_argument("--thresholds", default="ci/thresholds.toml")
    parser.add_argument("--json", help="keep the A/B session's results JSON here")
    opts = parser.parse_args()
    common = ["suites/", "--opperf", "--opperf-device=cpu", f"--opperf-workload={opts.workload}",
              f"--opperf-thresholds={opts.thresholds}", "-q", "--benchmark-quiet", "-p",
              "no:cacheprovider"]
    with tempfile.TemporaryDirectory() as tmp:
        single, ret1, _ = timed(common)
        out = Path(opts.json).resolve() if opts.json else Path(tmp, "ab.json")
        ab, ret2, text = timed([*common, f"--opperf-compare={opts.compare}",
                                f"--opperf-json={out}"])
        compare = json.loads(out.read_text())["compare"] if out.exists() else None
    print(f"single-side main job: {single:.0f} s (exit {ret1})")
    print(f"A/B main job against {opts.compare}: {ab:.0f} s (exit {ret2})")
    if compare is not None:
        print(f"  {compare['summary']}; {compare['pairs']} pairs; budget exhausted: "
              f"{compare['budget_exhausted']}")
        regressed = [f"{d['run']} {d['metric']}"
                     for d in compare["decisions"] if d["verdict"] == "regressed"]
        for line in regressed:
            print(f"  regressed: {line}")
    else:
        print("\n".join(text.splitlines()[-10:]))
    print(f"ratio A/B / single-side: {ab / single:.2f}")


if __name__ == "__main__":
    main()
