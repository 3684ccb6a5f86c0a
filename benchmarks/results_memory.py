"""Peak memory of ``compare`` and ``show`` on ~200 MB results files.

    python benchmarks/results_memory.py              # writes /tmp/opperf-mem/{a,b}.json once
    python benchmarks/results_memory.py --src /path/to/other/checkout   # the same files, older code

Builds two results files (seeds 1 and 2; kept in ``--dir`` and reused while their size matches)
shaped like the plugin's: what dominates a real file is the per-call samples of its stats, so each
of ``--runs`` per-op runs has ``--stats`` stats of ``--samples`` samples (defaults: 8,000 x 5 x
500, 20 million samples, ~200 MB a file), written one run per line as the plugin writes them. Then
runs ``python -m pytest_opperf compare a.json b.json`` and ``show a.json`` as subprocesses, each
from its own small parent so that ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` is that command's
alone, and prints each peak RSS in MB and as a multiple of the files' size. ``--src`` puts another
checkout's code be the one measured (the figures before a change); by default, this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys


def _run(rng: random.Random, i: int, stats: int, samples: int) -> dict[str, object]:
    body = []
    for j in range(stats):
        values = [round(rng.uniform(0.05, 2.0), 6) for _ in range(samples)]
        total = sum(values)
        body.append({"name": f"conv2d/op{j}" if j else "conv2d", "parent": "conv2d" if j else None,
                     "count": samples, "total_ms": total, "avg_ms": total / samples,
                     "min_ms": min(values), "max_ms": max(values), "samples_ms": values,
                     "kernel": j == 0, "clock": "host"})
    wall = body[0]["total_ms"] / 1e3  # type: ignore[operator]
    return {"id": f"suites/test_ops.py::test_op[conv2d-{i}]", "kind": "op",
            "config": {"shape": [8, 64, 56, 56], "dtype": "float32"}, "device": "cpu",
            "timing": "host", "wall_s": wall, "examples": samples * 8, "batches": samples,
            "examples_per_sec": samples * 8 / wall, "sec_per_batch": wall / samples,
            "python_share": 0.0, "stats": body, "counts": {s["name"]: 1 for s in body},
            "step_ms": [], "step_examples": [], "notes": []}


def _write(path: str, seed: int, runs: int, stats: int, samples: int) -> None:
    rng = random.Random(seed)
    head = {"schema": "opperf/1", "created": "2026-12-01T00:00:00+00:00",
            "machine": {"cpu": "bench", "device_class": "cpu"}, "commit": None,
            "session": {"device": "cpu", "device_class": "cpu", "workload": "small",
                        "timing": "host"}}
    with open(path + ".part", "w", encoding="utf-8") as f:
        f.write(json.dumps(head)[:-1] + ', "runs": [\n')
        for i in range(runs):
            f.write((",\n" if i else "") + json.dumps(_run(rng, i, stats, samples)))
        f.write("\n]}\n")
    os.replace(path + ".part", path)


def _peak_mb(command: list[str], env: dict[str, str], cwd: str) -> tuple[float, int]:
    """The peak RSS of ``command`` (MB) and its exit status, measured from a fresh parent."""
    probe = ("import resource, subprocess, sys\n"
             "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)\n")
    out = subprocess.run([sys.executable, "-c", probe, *command], env=env, cwd=cwd, check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) / 1024, int(out[1])  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8000)
    parser.add_argument("--stats", type=int, default=5, help="stats per run")
    parser.add_argument("--samples", type=int, default=500, help="samples per stat")
    parser.add_argument("--dir", default="/tmp/opperf-mem")
    parser.add_argument("--src", help="a checkout to put first on PYTHONPATH")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    paths = [os.path.join(args.dir, name) for name in ("a.json", "b.json")]
    shape = os.path.join(args.dir, "shape")
    wanted = f"{args.runs} {args.stats} {args.samples}"
    same = os.path.exists(shape) and open(shape, encoding="utf-8").read() == wanted
    for seed, path in enumerate(paths, 1):
        if not (same and os.path.exists(path)):
            _write(path, seed, args.runs, args.stats, args.samples)
    with open(shape, "w", encoding="utf-8") as f:
        f.write(wanted)
    size = os.path.getsize(paths[0]) / 2 ** 20
    print(f"files: {args.runs} runs x {args.stats} stats x {args.samples} samples, "
          f"{size:.0f} MB each ({paths[0]}, {paths[1]})")
    # run from --dir: python -m puts the working directory before PYTHONPATH
    src = args.src or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    cli = [sys.executable, "-m", "pytest_opperf"]
    for label, command, files in (("compare a b", [*cli, "compare", *paths], 2),
                                  ("show a", [*cli, "show", paths[0]], 1)):
        mb, rc = _peak_mb(command, env, args.dir)
        whose = "the two files' size" if files == 2 else "the file's size"
        print(f"{label}: peak RSS {mb:,.0f} MB ({mb / (files * size):.2f}x {whose}), exit {rc}")


if __name__ == "__main__":
    main()
