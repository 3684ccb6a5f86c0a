"""Write large results files, to measure how reading, ``compare`` and ``show`` scale.

    python benchmarks/big_results.py --runs 100000 --out /tmp/a.json            # 100k per-op runs
    python benchmarks/big_results.py --runs 100000 --out /tmp/b.json --seed 2
    /usr/bin/time -v python -m pytest_opperf compare /tmp/a.json /tmp/b.json   # time, peak RSS

    python benchmarks/big_results.py --e2e --runs 40 --stats 100 --samples 2500 --out /tmp/big.json
    /usr/bin/time -v python -m pytest_opperf show /tmp/big.json > /dev/null    # ~200 MB of samples

Per-op runs have one stat with ``--samples`` per-call samples (default 10); ``--e2e`` runs have
``--stats`` stats with ``--samples`` per-step samples each. Values are random but valid (the file
is written one run per line, as the plugin writes it). Prints the file's size.
"""

from __future__ import annotations

import argparse
import json
import os
import random


def _stat(rng: random.Random, name: str, samples: int, parent: str | None) -> dict[str, object]:
    values = [round(rng.uniform(0.5, 2.0), 6) for _ in range(samples)]
    total = sum(values)
    return {"name": name, "parent": parent, "count": samples, "total_ms": total,
            "avg_ms": total / samples, "min_ms": min(values), "max_ms": max(values),
            "samples_ms": values, "kernel": True, "clock": "host"}


def _run(rng: random.Random, i: int, e2e: bool, stats: int, samples: int) -> dict[str, object]:
    if e2e:
        body = [_stat(rng, f"op{j}", samples, None) for j in range(stats)]
        steps = [sum(s["samples_ms"][k] for s in body) * 1.25 for k in range(samples)]  # type: ignore[index]
        run_id, kind, batches = f"suites/test_e2e.py::test_train[{i}]", "e2e", samples
    else:
        body = [_stat(rng, "conv2d", samples, None)]
        steps = []
        run_id, kind, batches = f"suites/test_ops.py::test_op[conv2d-{i}]", "op", samples
    wall = sum(steps) / 1e3 if steps else body[0]["total_ms"] / 1e3  # type: ignore[operator]
    return {"id": run_id, "kind": kind, "config": {}, "device": "cpu", "timing": "host",
            "wall_s": wall, "examples": batches * 32, "batches": batches,
            "examples_per_sec": batches * 32 / wall, "sec_per_batch": wall / batches,
            "python_share": 0.2 if e2e else 0.0, "stats": body,
            "counts": {s["name"]: 1 for s in body}, "step_ms": steps,
            "step_examples": [32] * len(steps), "notes": []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--e2e", action="store_true", help="e2e runs (default: per-op runs)")
    parser.add_argument("--stats", type=int, default=50, help="stats per e2e run")
    parser.add_argument("--samples", type=int, default=10, help="samples per stat")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    head = {"schema": "opperf/1", "created": "2026-12-01T00:00:00+00:00",
            "machine": {"cpu": "bench", "device_class": "cpu"}, "commit": None,
            "session": {"device": "cpu", "device_class": "cpu", "workload": "small",
                        "timing": "host"}}
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(json.dumps(head)[:-1] + ', "runs": [\n')
        for i in range(args.runs):
            f.write((",\n" if i else "") + json.dumps(_run(rng, i, args.e2e, args.stats,
                                                          args.samples)))
        f.write("\n]}\n")
    print(f"{args.out}: {args.runs} runs, {os.path.getsize(args.out) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
