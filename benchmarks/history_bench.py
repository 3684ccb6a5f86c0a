"""The history's costs: appending one main-job session, and the dashboard of 1,000 sessions.

    python benchmarks/history_bench.py                     # SQLite in a temp dir, 1,000 sessions
    python benchmarks/history_bench.py --sessions 200 --postgres postgresql://...

The sessions are generated from a results file (default: ci/baselines/cpu-small.json,
the CPU main job: 160 runs, about 240 stats) with 10 extra per-op runs to reach the
main job's ~170, each session a new commit with +-3 % noise on every number and a
15 % step of conv2d half way. It prints: the time to append one session (median of
``--appends`` appends to the full history, each its own transaction), the time to
generate the history, the time of ``dashboard`` (load, trends and change points,
page), the page's size and the database's. It asserts nothing.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import io
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_opperf.cli import main  # noqa: E402
from pytest_opperf.history.store import Store  # noqa: E402
from pytest_opperf.records.reader import read_results  # noqa: E402
from pytest_opperf.results import ResultSet  # noqa: E402
from pytest_opperf.stattree import StatTree  # noqa: E402


def _template(path: Path, runs: int) -> ResultSet:
    base = read_results(path)
    ops = [r for r in base.runs if r.kind == "op"]
    i = 0
    while len(base.runs) < runs:  # more per-op runs, as the main job has
        extra = copy.deepcopy(ops[i % len(ops)])
        extra.id = f"{extra.id}#extra{i}"
        base.runs.append(extra)
        i += 1
    return base


def _session(template: ResultSet, i: int, n: int, rng: random.Random) -> ResultSet:
    results = copy.deepcopy(template)
    results.commit = {"sha": f"{i:08x}" + "0" * 32, "dirty": False, "branch": "main"}
    results.created = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(1.7e9 + 3600 * i))
    for run in results.runs:
        run.examples_per_sec *= 1 + rng.uniform(-0.03, 0.03)
        stats = []
        for s in run.stats:
            conv2d = s.name.startswith("conv2d") and i >= n // 2
            f = (1 + rng.uniform(-0.03, 0.03)) * (1.15 if conv2d else 1.0)
            samples = [x * f for x in s.samples_ms] if s.samples_ms else s.samples_ms
            stats.append(dataclasses.replace(s, total_ms=s.total_ms * f, avg_ms=s.avg_ms * f,
                                             samples_ms=samples))
        run.stats = StatTree(stats)
    return results


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=170)
    parser.add_argument("--appends", type=int, default=10,
                        help="appends timed after the history is built")
    parser.add_argument("--results", type=Path,
                        default=ROOT / "ci" / "baselines" / "cpu-small.json")
    parser.add_argument("--postgres", metavar="URL",
                        help="also time appends to this PostgreSQL database")
    parser.add_argument("--keep", type=Path,
                        help="directory to keep the history and the dashboard in")
    args = parser.parse_args()

    template = _template(args.results, args.runs)
    stats = sum(len(r.stats) for r in template.runs)
    print(f"session: {len(template.runs)} runs, {stats} stats (from {args.results})")
    rng = random.Random(0)
    work = Path(args.keep or tempfile.mkdtemp(prefix="opperf-history-"))
    work.mkdir(parents=True, exist_ok=True)
    source = str(work / "history.sqlite")
    if os.path.exists(source):
        os.remove(source)
    sessions = [_session(template, i, args.sessions, rng)
                for i in range(args.sessions + args.appends)]

    started = time.perf_counter()
    with Store(source, create=True) as store:
        for s in sessions[:args.sessions]:
            store.append(s)
    built = time.perf_counter() - started
    print(f"generated {args.sessions} sessions in {built:.1f} s ({built / args.sessions * 1e3:.1f} "
          "ms each)")

    def timed_appends(src: str, batch: list[ResultSet]) -> list[float]:
        times = []
        # each a fresh open + append + close, as the plugin does at the end of a session
        for s in batch:
            t = time.perf_counter()
            with Store(src, create=True) as store:
                store.append(s)
            times.append(time.perf_counter() - t)
        return times

    times = timed_appends(source, sessions[args.sessions:])
    print(f"append one session (SQLite, {args.sessions} stored): median "
          f"{statistics.median(times) * 1e3:.0f} ms, max {max(times) * 1e3:.0f} ms over "
          f"{len(times)}")
    if args.postgres:
        times = timed_appends(args.postgres, sessions[:args.appends])
        print(f"append one session (PostgreSQL): median {statistics.median(times) * 1e3:.0f} ms, "
              f"max {max(times) * 1e3:.0f} ms over {len(times)}")

    out = io.StringIO()
    site = work / "site"
    t = time.perf_counter()
    code = main(["dashboard", source, "--out", str(site)], out)
    took = time.perf_counter() - t
    print(out.getvalue().strip())
    page = site / "index.html"
    print(f"dashboard of {args.sessions + args.appends} sessions: {took:.1f} s (exit {code}), page "
          f"{page.stat().st_size / 1e6:.2f} MB, database {os.path.getsize(source) / 1e6:.1f} "
          "MB "
          f"({os.path.getsize(source) / 1e3 / (args.sessions + args.appends):.0f} kB per session)")
    t = time.perf_counter()
    main(["history", source], io.StringIO())
    print(f"history command: {time.perf_counter() - t:.1f} s")
    print(f"kept in {work}" if args.keep else f"files in {work} (temporary)")


if __name__ == "__main__":
    main_()
