"""The A/B gate's false-alarm rate, measured: N A/A sessions, the gate failures among them.

    python benchmarks/aa_false_alarms.py --sessions 150 --out /tmp/aa
    python benchmarks/aa_false_alarms.py --out /tmp/aa --summary      # the tally so far
    python benchmarks/aa_false_alarms.py --out /tmp/aa --also /tmp/aa2 --summary   # two, together

Each session is ``pytest TESTS --opperf --opperf-compare=BASE`` with
``ci/thresholds.toml``, where BASE is a copy of this checkout's HEAD (made
once under ``--out``; compare a DIR: no git worktree per session), so both
sides run the same code. The head is this checkout, which must be clean at
HEAD for an A/A. The default TESTS are a small per-op selection (about 13
metrics, 10-30 s a session on a quiet 2-core machine). ``--workers`` runs
sessions side by side (each the other's "other job").

One line per session goes to ``OUT/sessions.jsonl`` (exit status, wall time,
load average, the A/B summary, the regressed metrics), so a campaign can be
stopped and resumed. A session that exits 1 (the gate failed) is a false
alarm; one that exits otherwise than 0 or 1 is an error and not a gate
decision. Prints the rate and its exact (Clopper-Pearson) one-sided 95 %
upper bound: for 0 failures in n, 1 - 0.05 ** (1 / n), about 3 / n.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["suites/test_ops.py", "-k",
         "accuracy or cast or cross_entropy or fill_constant or mean or mul or softmax or top_k"]


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    return math.fsum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


def upper_bound(k: int, n: int, level: float = 0.95) -> float:
    """The exact one-sided upper confidence bound of a rate seen k times in n (Clopper-Pearson):
    the p with P(X <= k | p) = 1 - level."""
    if n <= 0:
        return 1.0
    if k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(100):  # bisection: binomial_cdf falls as p grows
        mid = (lo + hi) / 2
        if binomial_cdf(k, n, mid) > 1 - level:
            lo = mid
        else:
            hi = mid
    return hi


def load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def session(index: int, opts: argparse.Namespace, base: Path, out: Path) -> dict:
    json_path = out / f"session-{index:04d}.json"
    args = [sys.executable, "-m", "pytest", *opts.tests, "--opperf", "--opperf-device=cpu",
            f"--opperf-workload={opts.workload}", f"--opperf-thresholds={opts.thresholds}",
            f"--opperf-compare={base}", f"--opperf-json={json_path}", "-q",
            "-p", "no:cacheprovider"]
    before = load()
    start = time.monotonic()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    row: dict = {"session": index, "exit": done.returncode, "wall_s": round(wall, 1),
                 "load_before": before, "load_after": load(),
                 "time": time.strftime("%H:%M:%S", time.gmtime())}
    try:
        data = json.loads(json_path.read_text())
        compare = data.get("compare") or {}
        row["summary"] = compare.get("summary")
        row["metrics"] = len(compare.get("decisions", []))
        row["pairs"] = compare.get("pairs")
        row["notes"] = compare.get("notes", [])[-2:]
        row["regressed"] = [f"{d['run']} {d['metric']} {d['estimate']:.3f} "
                            f"[{d['low']:.3f}, {d['high']:.3f}]"
                            for d in compare.get("decisions", []) if d["verdict"] == "regressed"]
        row["estimates"] = {f"{d['run']} {d['metric']}": round(d["estimate"], 4)
                            for d in compare.get("decisions", [])
                            if d.get("estimate") is not None}
        row["violations"] = [v.get("message") for v in
                             (data.get("gate") or {}).get("violations", [])]
        json_path.unlink()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["tail"] = (done.stdout + done.stderr).splitlines()[-15:]
    return row


def tally(outs: list[Path]) -> None:
    rows = [json.loads(line) for out in outs if (out / "sessions.jsonl").exists()
            for line in (out / "sessions.jsonl").read_text().splitlines() if line.strip()]
    decided = [r for r in rows if r["exit"] in (0, 1)]
    failed = [r for r in decided if r["exit"] == 1]
    n, k = len(decided), len(failed)
    errors = len(rows) - n
    walls = sorted(r["wall_s"] for r in decided)
    loads = sorted(r["load_before"][0] for r in decided)
    print(f"{n} A/A gate decisions ({errors} sessions without one), {k} failed the gate")
    if n:
        print(f"false-alarm rate {k / n:.2%}, exact 95 % upper bound {upper_bound(k, n):.2%}")
        print(f"session wall time: median {walls[n // 2]:.0f} s, range {walls[0]:.0f}-"
              f"{walls[-1]:.0f} s; 1-min load average at the start: median {loads[n // 2]:.1f}, "
              f"range {loads[0]:.1f}-{loads[-1]:.1f}")
        undecided = [r.get("summary", "") for r in decided]
        print(f"metrics per session: {decided[0].get('metrics')}; e.g. {undecided[-1]}")
    for r in failed:
        print(f"  session {r['session']}: {r.get('regressed')} {r.get('violations')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=150)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--also", type=Path, nargs="*", default=[],
                        help="with --summary: other campaigns' OUT to count together")
    parser.add_argument("--workload", default="small")
    parser.add_argument("--thresholds", default="ci/thresholds.toml")
    parser.add_argument("--tests", nargs="+", default=SMALL)
    parser.add_argument("--summary", action="store_true", help="print the tally and exit")
    opts = parser.parse_args()
    out = opts.out.resolve()
    if opts.summary:
        tally([out, *(a.resolve() for a in opts.also)])
        return
    out.mkdir(parents=True, exist_ok=True)
    base = out / "base"
    if not base.exists():  # HEAD as a plain directory
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        base.mkdir()
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    log = out / "sessions.jsonl"
    done = sum(1 for _ in log.open()) if log.exists() else 0
    lock = threading.Lock()
    counter = iter(range(done, opts.sessions))

    def worker() -> None:
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            row = session(index, opts, base, out)
            with lock, log.open("a") as f:
                f.write(json.dumps(row) + "\n")
                print(f"session {index}: exit {row['exit']} in {row['wall_s']} s, load "
                      f"{row['load_before'][0]}: {row.get('summary')}", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(opts.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tally([out])


if __name__ == "__main__":
    main()
