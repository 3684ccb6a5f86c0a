"""Per-op times of two results files side by side: CUDA events against sync mode.

    python ci/timing_agreement.py EVENTS.json SYNC.json [--tolerance 0.05] [--markdown PATH]

For every per-op run (kind ``op``) in both files: the median time per call in
each, their ratio, and whether they agree within the tolerance. Events time
the device span of each call; sync mode times the host between two device
synchronisations, so the two agree for ops that keep the device busy and
differ for launch-bound ones (microsecond kernels, where sync adds the launch
and synchronisation latency). The summary line counts the ops that agree; the
exit status is 0 unless a file cannot be read (2) or the files share no op (3):
this is a measurement, not a gate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_opperf.records.reader import read_results  # noqa: E402
from pytest_opperf.results import ResultsError


def medians(path: str) -> dict[str, tuple[str, float]]:
    """Per-op run id -> (its timing, median ms per call)."""
    out = {}
    for run in read_results(path).runs:
        if run.kind != "op" or not run.stats:
            continue
        s = run.stats[0]
        out[run.id] = (run.timing, statistics.median(s.samples_ms) if s.samples_ms else s.avg_ms)
    return out


def rows(events: dict[str, tuple[str, float]], sync: dict[str, tuple[str, float]],
         tolerance: float) -> list[tuple[str, float, float, float, bool]]:
    """(run id, events ms, sync ms, sync/events, agree) for the ops in both, by events time."""
    table = []
    for run_id in sorted(set(events) & set(sync), key=lambda r: -events[r][1]):
        e, s = events[run_id][1], sync[run_id][1]
        ratio = s / e if e > 0 else float("inf")
        table.append((run_id, e, s, ratio, abs(ratio - 1) <= tolerance))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("events")
    parser.add_argument("sync")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--markdown")
    args = parser.parse_args(argv)
    try:
        events, sync = medians(args.events), medians(args.sync)
    except ResultsError as exc:
        print(f"timing_agreement: {exc}", file=sys.stderr)
        return 2
    table = rows(events, sync, args.tolerance)
    if not table:
        print(f"timing_agreement: no per-op run in both {args.events} and {args.sync}",
              file=sys.stderr)
        return 3
    timings = sorted({t for t, _ in events.values()}), sorted({t for t, _ in sync.values()})
    agree = sum(1 for r in table if r[4])
    weight = sum(r[1] for r in table)
    agree_weight = sum(r[1] for r in table if r[4])
    lines = [f"| op | {'/'.join(timings[0])} ms | {'/'.join(timings[1])} ms | ratio | within "
             f"{args.tolerance:.0%} |",
             "|---|---:|---:|---:|---|"]
    lines += [f"| {r[0]} | {r[1]:.4f} | {r[2]:.4f} | {r[3]:.3f} | {'yes' if r[4] else 'no'} |"
              for r in table]
    summary = (f"{agree} of {len(table)} ops agree within {args.tolerance:.0%} "
               f"({agree_weight / weight:.1%} of the events time)" if weight > 0
               else f"{agree} of {len(table)} ops")
    print("\n".join(lines))
    print(summary)
    if args.markdown:
        Path(args.markdown).write_text("## events against sync, per op\n\n" + "\n".join(lines)
                                       + f"\n\n{summary}\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
