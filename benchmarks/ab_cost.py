"""The cost of A/B mode: a selection's wall time single-side and with ``--opperf-compare``.

    python benchmarks/ab_cost.py          # the main job, small workload, base = HEAD
    python benchmarks/ab_cost.py --tests suites/test_executor.py --repeat 3
    python benchmarks/ab_cost.py --checkout /tmp/old --checkout .   # two checkouts, interleaved

For each round and each checkout (default: this one) it runs ``pytest TESTS
--opperf`` once, then the same with ``--opperf-compare=REV`` (worktree set-up
included), both with ``ci/thresholds.toml``; the rounds interleave the
checkouts and the two modes, so that a change of the machine's load falls on
all of them. Prints each wall time, the A/B summary and the ratio A/B / single
(the issue's goals: the main job at most 2x, a small selection at most 2.5x or
60 s more). A checkout is measured with its own ``pytest_opperf`` (run from
its directory). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(args: list[str], cwd: Path) -> tuple[float, int, str]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, capture_output=True,
                          text=True)
    return time.monotonic() - start, done.returncode, (done.stdout + done.stderr)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", default="HEAD")
    parser.add_argument("--workload", default="small")
    parser.add_argument("--thresholds", default="ci/thresholds.toml")
    parser.add_argument("--tests", nargs="+", default=["suites/"],
                        help="test paths and options (e.g. suites/test_executor.py)")
    parser.add_argument("--checkout", action="append", type=Path,
                        help="a checkout to measure (repeatable; default: this one)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds")
    parser.add_argument("--json", help="keep the last A/B session's results JSON here")
    opts = parser.parse_args()
    checkouts = [c.resolve() for c in (opts.checkout or [ROOT])]
    common = [*opts.tests, "--opperf", "--opperf-device=cpu",
              f"--opperf-workload={opts.workload}", f"--opperf-thresholds={opts.thresholds}",
              "-q", "--benchmark-quiet", "-p", "no:cacheprovider"]
    print(f"tests: {' '.join(opts.tests)}; base {opts.compare}; {load()}", flush=True)
    walls: dict[tuple[Path, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(opts.repeat):
            for checkout in checkouts:
                single, ret1, _ = timed(common, checkout)
                out = Path(opts.json).resolve() if opts.json else Path(tmp, "ab.json")
                out.unlink(missing_ok=True)
                ab, ret2, text = timed([*common, f"--opperf-compare={opts.compare}",
                                        f"--opperf-json={out}"], checkout)
                walls.setdefault((checkout, "single"), []).append(single)
                walls.setdefault((checkout, "ab"), []).append(ab)
                compare = json.loads(out.read_text())["compare"] if out.exists() else None
                print(f"round {round_ + 1} {checkout}: single {single:.1f} s (exit {ret1}), "
                      f"A/B {ab:.1f} s (exit {ret2}), ratio {ab / single:.2f}; {load()}",
                      flush=True)
                if compare is None:
                    print("\n".join(text.splitlines()[-10:]))
                    continue
                print(f"  {compare['summary']}; {compare['pairs']} pairs; "
                      f"{compare['notes'][-1] if compare['notes'] else ''}; budget exhausted: "
                      f"{compare['budget_exhausted']}", flush=True)
                for d in compare["decisions"]:
                    if d["verdict"] == "regressed":
                        print(f"  regressed: {d['run']} {d['metric']}")
    for checkout in checkouts:
        single = statistics.median(walls[checkout, "single"])
        ab = statistics.median(walls[checkout, "ab"])
        print(f"{checkout}: median single {single:.1f} s, A/B {ab:.1f} s: "
              f"ratio {ab / single:.2f}, {ab - single:+.0f} s")


if __name__ == "__main__":
    main()
