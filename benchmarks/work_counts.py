"""Work counts, measured: A/A sessions give the same counts, injected overheads are caught.

    python benchmarks/work_counts.py --sessions 10 --out /tmp/wc           # everything
    python benchmarks/work_counts.py --out /tmp/wc --summary                # the tally so far
    python benchmarks/work_counts.py --sessions 10 --aa-sessions 0 --workload tiny --out /tmp/wct

From a clean copy of this checkout's HEAD (``git archive``, under ``--out``):

1. a baseline session: ``pytest TESTS --opperf --opperf-device=cpu --opperf-workload=W
   --opperf-save=base.json`` (TESTS: the reference framework's ``test_train`` runs and, where torch
   is installed, the torch one);
2. A/A: ``--sessions`` more sessions of the same copy, every other one with a CPU-bound process
   running beside it (``--busy``: a Python loop on every core but one); each session's work counts
   against the baseline's: the largest relative difference of any count;
3. injections, each into its own copy of the clean copy, ``--sessions`` sessions each against the
   baseline: ``dict-copy`` (one extra dict copy per op in the executor's op loop), ``clone``
   (``program.clone()`` no longer cached: the program cache keeps nothing), ``call`` (one extra
   Python call per element-wise kernel). A session catches an injection when it exits 1 with a
   work-count violation at the expected stat.

It also gives the dict copy's share of the step time (a dict copy of an op's attributes, timed
with ``timeit``, times the ops per step, over the baseline's median step) and the counting pass's
cost (``work.pass_s`` against the session's wall time). One JSON line per session goes to
``OUT/sessions.jsonl``; ``--summary`` prints the tally.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["suites/test_resnet50.py", "-k", "test_train"]
EXECUTOR = "reference_framework/executor.py"
ELEMENTWISE = "reference_framework/ops/elementwise.py"
LOOP = ("                            with table.region(op.type, kernel=True):\n"
        "                                op.run(local)\n")
# (file, text, replacement) edits of each injection, and the stats where it must show
INJECTIONS: dict[str, tuple[list[tuple[str, str, str]], set[str]]] = {
    "dict-copy": ([(EXECUTOR, LOOP, "                            dict(op.attrs)  # injected\n"
                    + LOOP)], {"ExecutorRunTimer"}),
    "clone": ([(EXECUTOR, "                prepared.program = run_program\n",
                "                pass  # injected: the cache keeps nothing\n")],
              {"ProgramCloneTimer"}),
    "call": ([(ELEMENTWISE, "def elementwise_add(ins", "def _injected() -> None:\n    return None"
               "\n\n\ndef elementwise_add(ins"),
              (ELEMENTWISE, "    x, y, xp = ins[\"X\"], ins[\"Y\"], ctx.xp\n",
               "    x, y, xp = ins[\"X\"], ins[\"Y\"], ctx.xp\n    _injected()\n")],
             {"elementwise_add", "elementwise_div"}),
}
COUNTERS = ("bytecodes", "py_calls", "c_calls")


def clean_copy(out: Path) -> Path:
    target = out / "clean"
    if not target.exists():
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True,
                                 capture_output=True).stdout
        target.mkdir(parents=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def injected_copy(out: Path, clean: Path, name: str) -> Path:
    target = out / f"inj-{name}"
    if not target.exists():
        shutil.copytree(clean, target)
        for file, text, replacement in INJECTIONS[name][0]:
            path = target / file
            source = path.read_text()
            if text not in source:
                raise SystemExit(f"injection {name}: {file} has no {text!r}: the benchmark is out "
                                 "of date with the framework")
            path.write_text(source.replace(text, replacement))
    return target


def busy(cores: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]


def session(copy: Path, out: Path, label: str, args: argparse.Namespace, extra: list[str],
            load: bool) -> dict[str, Any]:
    with_torch = args.torch and label.startswith(("base", "aa"))
    tests = ([*TESTS[:1], "suites/torch/test_torch.py", *TESTS[1:]] if with_torch else TESTS)
    json_path = out / f"{label}.json"
    cmd = [sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider", "--opperf",
           "--opperf-device=cpu", f"--opperf-workload={args.workload}",
           f"--opperf-json={json_path}", *extra]
    others = busy(max(1, (os.cpu_count() or 2) - 1)) if load else []
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=copy, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(copy)})
    finally:
        for p in others:
            p.kill()
            p.wait()
    wall = time.perf_counter() - started
    (out / f"{label}.log").write_text(done.stdout + done.stderr)
    record: dict[str, Any] = {"label": label, "exit": done.returncode, "wall_s": wall,
                              "load": os.getloadavg()[0], "busy": load}
    if json_path.exists():
        data = json.loads(json_path.read_text())
        record["pass_s"] = sum(r["work"]["pass_s"] for r in data["runs"] if r.get("work"))
        record["violations"] = [(v["run"], v["metric"]) for v in data["gate"]["violations"]]
        record["work"] = {r["id"]: r.get("work") for r in data["runs"]}
        record["step_ms"] = {r["id"]: r["step_ms"] for r in data["runs"]}
    with (out / "sessions.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
    return record


def largest_difference(base: dict[str, Any], new: dict[str, Any]) -> tuple[float, int]:
    """The largest relative difference of any count between two sessions' work, and how many
    counts were compared."""
    worst, compared = 0.0, 0
    for run, work in new.items():
        b = base.get(run)
        if not work or not b:
            continue
        for stat in set(work["stats"]) | set(b["stats"]):
            for counter in COUNTERS:
                x = b["stats"].get(stat, {}).get(counter, 0)
                y = work["stats"].get(stat, {}).get(counter, 0)
                compared += 1
                if x != y:
                    worst = max(worst, abs(y - x) / max(x, 1))
    return worst, compared


def dict_copy_share(base: dict[str, Any]) -> str:
    """The injected dict copy's share of a step of the faithful run."""
    sys.path.insert(0, str(ROOT))
    from reference_framework.benchmark import WORKLOADS, build_training_program
    from reference_framework.registry import create_op  # noqa: F401 (the op's attrs)

    config = WORKLOADS["small"]
    main = build_training_program(config).main
    ops = main.global_block().ops
    per_copy = min(timeit.repeat(lambda: [dict(op.attrs) for op in ops], number=20,
                                 repeat=5)) / 20 / len(ops)
    faithful = next(k for k in base["step_ms"] if k.endswith("test_train[small]"))
    steps = sorted(base["step_ms"][faithful][1:])
    step_ms = steps[len(steps) // 2]
    return (f"{len(ops)} ops per step x {per_copy * 1e9:.0f} ns = "
            f"{len(ops) * per_copy * 1e3:.3f} ms of a {step_ms:.0f} ms step "
            f"({len(ops) * per_copy * 1e3 / step_ms:.4%})")


def summary(out: Path) -> None:
    rows = [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines()]
    base = next((r for r in rows if r["label"] == "base"), None)
    if base is None:
        print("no baseline session yet")
        return
    aa = [r for r in rows if r["label"].startswith("aa-")]
    worst = [largest_difference(base["work"], r.get("work") or {}) for r in aa]
    print(f"A/A: {len(aa)} sessions ({sum(r['busy'] for r in aa)} with a CPU-bound job beside), "
          f"exit 0 in {sum(r['exit'] == 0 for r in aa)}; largest relative difference of any work "
          f"count against the baseline: {max((w for w, _ in worst), default=0.0):.3g} "
          f"(over {sum(n for _, n in worst)} counts compared)")
    for name, (_, stats) in INJECTIONS.items():
        runs = [r for r in rows if r["label"].startswith(f"inj-{name}-")]
        caught = [r for r in runs if r["exit"] == 1 and any(
            m.partition(":")[2] in stats and m.partition(":")[0] in COUNTERS
            for _, m in r.get("violations", []))]
        named = sorted({m for r in runs for _, m in r.get("violations", [])})
        print(f"{name}: caught {len(caught)} of {len(runs)}; violations named: {', '.join(named)}")
    costs = [(r["pass_s"], r["wall_s"]) for r in rows if r.get("pass_s")]
    if costs:
        print("counting pass: " + ", ".join(f"{p:.1f} s of {w:.0f} s" for p, w in costs[:6]))
    try:
        print("dict copy: " + dict_copy_share(base))
    except Exception as exc:  # the share is a by-product: the tally stands without it
        print(f"dict copy share not measured: {exc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sessions", type=int, default=10, help="per injection, and A/A")
    parser.add_argument("--aa-sessions", type=int, default=None,
                        help="A/A sessions (default: --sessions)")
    parser.add_argument("--workload", default="small")
    parser.add_argument("--torch", action="store_true", help="the torch test_train in A/A too")
    parser.add_argument("--summary", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.summary:
        summary(args.out)
        return
    clean = clean_copy(args.out)
    base_json = args.out / "base-results.json"
    if not base_json.exists():
        session(clean, args.out, "base", args, [f"--opperf-save={base_json}"], load=False)
    baseline = [f"--opperf-baseline={base_json}"]
    aa = args.sessions if args.aa_sessions is None else args.aa_sessions
    for i in range(aa):
        session(clean, args.out, f"aa-{i + 1}", args, baseline, load=i % 2 == 1)
    for name in INJECTIONS:
        copy = injected_copy(args.out, clean, name)
        for i in range(args.sessions):
            session(copy, args.out, f"inj-{name}-{i + 1}", args, baseline, load=i % 2 == 1)
    summary(args.out)


if __name__ == "__main__":
    main()
