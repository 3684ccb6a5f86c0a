"""Acceptance of A/B mode: injected regressions caught, A/A false alarms, interval widths.

Each case makes a temporary copy of this repository at HEAD (``git worktree add``), the head,
with one regression patched into its ``reference_framework/__init__.py`` as an uncommitted change
(never by hooks in product code). It then runs ``pytest suites/ --opperf --opperf-compare=HEAD``
in the head copy N times, as a pull request's job does (the base: a worktree of HEAD that the
session makes, its root as long as the head's), and counts the sessions whose A/B section has the
expected metric regressed. Cases:

* ``conv2d-10`` (and ``conv2d-3``, ``conv2d-5``): the conv2d forward kernel
  made 10 % (3 %, 5 %) slower by spinning for that share of its own time;
* ``relu-20``: relu forward 20 % slower; ``batch_norm-15``: batch_norm forward 15 % slower;
* ``share-2``: the Python share of a training step up by about 2 points (busy
  work in the benchmark loop, outside the executor, 2.5 % of the step's
  executor time);
* ``throughput-5``: examples/sec 5 % lower (busy work of 5.3 % of each step);
* ``extra-op``: one more op per training step (a ``fill_zeros_like``);
* ``layout-5``: a slowdown only time can see: three of the six ``[256, 256, 3, 3]`` conv weights
  and the four ``[128, 128, 3, 3]`` start column-major, so each step copies them inside numpy
  (the conv ops' Python work unchanged; momentum's falls, a column-major array being split along
  its first axis rather than flattened: "less work, slower"); about 5 % fewer examples/sec with the
  framework keeping its host memory (its sizing: the comment at ``CASES``); ``layout-3``: one
  of the six and one of the four, for the e2e threshold lowered to 3 %;
* ``gc-3``: a slowdown only time can see whatever the memory placement: the interpreter's cyclic
  garbage collector collects its youngest generation every 5 net new container objects instead
  of every 700 (the same Python calls; the collections are C code of the interpreter, inside the
  step, and the work counts run with the collector off); about 4 % more time per example in the
  faithful run on AMD EPYC (examples/sec 0.962 at the median of 15 sessions), for the e2e
  threshold lowered to 3 %;
* ``gemm-unsplit``: GEMMs no longer split over the pool's threads (each runs on the one BLAS
  thread the pool holds it to): less Python work, and slower conv2d kernels on two cores or more;
* ``null``: the head's code differs and no op's work does (an unused function appended): every
  regressed (or inconclusive) metric is a false alarm of the two sides' different code, such as
  its memory layout;
* ``aa``: no change, ``--opperf-compare=HEAD`` in the copy: every regressed
  (or inconclusive) metric is a false alarm; prints the median interval width (high/low - 1)
  of the per-op and e2e metrics.

    python benchmarks/ab_acceptance.py --sessions 10                 # every case, 10 sessions each
    python benchmarks/ab_acceptance.py --cases aa --sessions 20
    python benchmarks/ab_acceptance.py --cases conv2d-3,conv2d-5,conv2d-10 --sessions 10
    python benchmarks/ab_acceptance.py --cases conv2d-10+batch_norm-15 --sessions 5 --single \\
        -- suites/test_ops.py suites/test_resnet50.py \\
        -k "((conv2d or batch_norm) and not grad) or (test_train and not no-overheads)"

Cases joined by ``+`` are patched together, and each one's metric must fail. ``--single`` times
the head alone (the same tests, no A/B) before each session and prints the A/B's wall time over
it. It prints one line per session (each failing metric with its explanation's class and first
function, when it has one) and a summary per case; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SPIN = '''

# --- injected by benchmarks/ab_acceptance.py -----------------------------------------
import time as _time


def _spin(seconds):
    end = _time.perf_counter() + seconds
    while _time.perf_counter() < end:
        pass
'''

SLOW_KERNEL = SPIN + '''
from reference_framework.registry import get_op_def as _get_op_def


def _slowed(kernel, share):
    def slow(*args, **kwargs):
        start = _time.perf_counter()
        out = kernel(*args, **kwargs)
        _spin((_time.perf_counter() - start) * share)
        return out
    return slow


_get_op_def("{op}").kernel = _slowed(_get_op_def("{op}").kernel, {share})
'''

# Busy work per step, outside the executor: run_benchmark's on_batch is wrapped before the
# suites import it (they import the name from reference_framework.benchmark).
STEP_WORK = SPIN + '''
from pytest_opperf import timers as _timers
from reference_framework import benchmark as _benchmark

_run_benchmark = _benchmark.run_benchmark


def _with_work(config, on_batch=None, on_build=None, **kwargs):
    last = {{"executor": 0.0, "t": _time.perf_counter()}}

    def batch(examples):
        table = _timers.current()
        stat = table.get("ExecutorRunTimer") if table is not None else None
        executor_ms = stat.total_ms if stat is not None else 0.0
        now = _time.perf_counter()
        {work}
        last["executor"], last["t"] = executor_ms, _time.perf_counter()
        if on_batch is not None:
            on_batch(examples)

    return _run_benchmark(config, on_batch=batch, on_build=on_build, **kwargs)


_benchmark.run_benchmark = _with_work
'''

EXTRA_OP = '''

# --- injected by benchmarks/ab_acceptance.py: one more op per training step -------------
from reference_framework import benchmark as _benchmark

_run_benchmark = _benchmark.run_benchmark


def _add_an_op(main):
    block = main.global_block()
    block.create_var(name="injected_extra", dtype="float32")
    block.append_op(type="fill_zeros_like", inputs={"X": [block.ops[-1].output_arg_names[0]]},
                    outputs={"Out": ["injected_extra"]})


def _with_op(config, on_batch=None, on_build=None, **kwargs):
    def build(main):
        _add_an_op(main)
        if on_build is not None:
            on_build(main)
    return _run_benchmark(config, on_batch=on_batch, on_build=build, **kwargs)


_benchmark.run_benchmark = _with_op
'''

FORTRAN_WEIGHTS = '''

# --- injected by benchmarks/ab_acceptance.py: a slowdown only time can see ------------------
# Of each startup's conv weights of a shape in _EVERY, every n-th (from the first) starts
# column-major (Fortran order): every step makes the same Python calls, and inside numpy each
# reshape of those weights to the GEMM's matrix copies them (and momentum's ufuncs run on a
# strided array).
_EVERY = @EVERY@


def _fortran_weights(kernel, seen={}):
    import numpy

    def init(ins, attrs, ctx):
        out = kernel(ins, attrs, ctx)
        for name, value in out.items():
            shape = getattr(value, "shape", None)
            if shape in _EVERY:
                if seen.get(shape, 0) % _EVERY[shape] == 0:
                    out[name] = numpy.asfortranarray(value)
                seen[shape] = seen.get(shape, 0) + 1
        return out
    return init


def _inject():
    from reference_framework.registry import get_op_def

    for op in ("gaussian_random", "uniform_random"):
        get_op_def(op).kernel = _fortran_weights(get_op_def(op).kernel)


_inject()
'''

GC_PRESSURE = '''

# --- injected by benchmarks/ab_acceptance.py: a slowdown only time can see ------------------
# The cyclic garbage collector collects its youngest generation once @N@ container objects more
# were made than freed, instead of 700: every step makes the same Python calls, and the
# collections, C code of the interpreter, run inside the step.
import gc as _gc

_gc.set_threshold(@N@, *_gc.get_threshold()[1:])
'''

UNSPLIT_GEMM = '''

# --- injected by benchmarks/ab_acceptance.py: GEMMs stop splitting over the pool ----------------
from reference_framework.ops import _parallel as _p

_p.MIN_GEMM_FLOPS = float("inf")
'''

NULL_CHANGE = '''

# --- injected by benchmarks/ab_acceptance.py: code that no step runs ---------------------------
def _never_called(n):
    return [i * i for i in range(n)]
'''

CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    # name: (patch, metrics that must be regressed: suffix matches)
    "conv2d-3": (SLOW_KERNEL.format(op="conv2d", share=0.03), (":conv2d",)),
    "conv2d-5": (SLOW_KERNEL.format(op="conv2d", share=0.05), (":conv2d",)),
    "conv2d-10": (SLOW_KERNEL.format(op="conv2d", share=0.10), (":conv2d",)),
    "relu-20": (SLOW_KERNEL.format(op="relu", share=0.20), (":relu",)),
    "batch_norm-15": (SLOW_KERNEL.format(op="batch_norm", share=0.15), (":batch_norm",)),
    # +2 points of a ~10 % share: b = 0.02 E / ((1 - s)(1 - s - 0.02)) per step with s ~ 0.1
    "share-2": (STEP_WORK.format(work='_spin((executor_ms - last["executor"]) / 1e3 * 0.0253)'),
                ("python_share",)),
    # 5 % fewer examples/sec: 1/0.95 - 1 = 5.26 % more time per step
    "throughput-5": (STEP_WORK.format(work='_spin((now - last["t"]) * 0.0526)'),
                     ("examples_per_sec",)),
    "extra-op": (EXTRA_OP, ("count:fill_zeros_like",)),
    # about 5 % fewer examples/sec in the faithful and the no-overheads run (0.946-0.958 in ten
    # pull requests, AMD EPYC, host memory kept); of the [256, 256, 3, 3] weights alone, every
    # third: 3.5-3.7 % (about 5.5 % before the framework kept its host memory: the copies now
    # land in memory the heap holds), every second: 3.4-4.3 %, all six: 6.6-7 %
    "layout-5": (FORTRAN_WEIGHTS.replace("@EVERY@", "{(256, 256, 3, 3): 2, (128, 128, 3, 3): 1}"),
                 ("examples_per_sec",)),
    # for the e2e threshold lowered to 3 %: one of the six [256, 256, 3, 3] weights alone made
    # examples/sec 0.963-0.984 (median 0.973), below the threshold; one of the four
    # [128, 128, 3, 3] weights too
    "layout-3": (FORTRAN_WEIGHTS.replace("@EVERY@", "{(256, 256, 3, 3): 6, (128, 128, 3, 3): 4}"),
                 ("examples_per_sec",)),
    # for the e2e threshold lowered to 3 %, where the layout cases' cost depends on the memory
    # placement (on AMD EPYC layout-3 gave 0.982-1.009): collections every 5 net new objects
    # read 0.951-0.989 in 15 sessions (AMD EPYC), every 10 0.974-0.977 in 2
    "gc-3": (GC_PRESSURE.replace("@N@", "5"), ("examples_per_sec",)),
    # GEMMs no longer split over the pool (each runs on one BLAS thread): less Python work
    # (no parts to hand out) and slower conv2d on a machine of two cores or more
    "gemm-unsplit": (UNSPLIT_GEMM, (":conv2d",)),
    "null": (NULL_CHANGE, ()),
    "aa": ("", ()),
}
DEFAULT = ("conv2d-10", "relu-20", "share-2", "throughput-5", "extra-op", "aa")


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def inject(tree: Path, patch: str) -> None:
    """``patch`` appended to the reference framework of the checkout at ``tree``, uncommitted."""
    if patch:
        with open(tree / "reference_framework" / "__init__.py", "a", encoding="utf-8") as f:
            f.write(patch)


def copy(where: Path, name: str, patch: str) -> Path:
    target = where / name
    git("worktree", "add", "--detach", "--quiet", str(target), "HEAD")
    inject(target, patch)
    return target


def single(head: Path, args: list[str]) -> float:
    """The wall time of the head alone: the same tests, ``--opperf`` and no A/B."""
    command = [sys.executable, "-m", "pytest", "--opperf", "-q", "--benchmark-quiet", "-p",
               "no:cacheprovider", *args]
    start = time.monotonic()
    subprocess.run(command, cwd=head, capture_output=True, text=True)
    return time.monotonic() - start


def combined(case: str) -> tuple[str, tuple[tuple[str, ...], ...]]:
    """The patch and the expected metrics of ``case``: one of CASES, or several joined by ``+``
    (their patches together; each one's metrics must fail)."""
    parts = [CASES[c] for c in case.split("+")]
    return "".join(p for p, _ in parts), tuple(e for _, e in parts if e)


def session(head: Path, base: str, args: list[str], out: Path) -> tuple[int, dict, float]:
    command = [sys.executable, "-m", "pytest", "--opperf", f"--opperf-compare={base}",
               f"--opperf-json={out}", "-q", "--benchmark-quiet", "-p", "no:cacheprovider", *args]
    start = time.monotonic()
    done = subprocess.run(command, cwd=head, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if not out.exists():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise SystemExit(f"session failed without results (exit status {done.returncode}):\n{tail}")
    return done.returncode, json.loads(out.read_text()), elapsed


def caught(compare: dict, expected: tuple[tuple[str, ...], ...]) -> tuple[bool, list[str]]:
    """Whether each group of expected metrics has one that fails the gate (regressed, or
    inconclusive: undecided with its pairs pointing past the threshold, which fails by default),
    and every metric that does (with its estimate). With no group, whether none fails."""
    failing = [d for d in compare["decisions"]
               if d["verdict"] == "regressed" or d.get("inconclusive")]
    names = [f"{d['run']} {d['metric']}" for d in failing]
    hit = (all(any(r.endswith(e) for r in names for e in group) for group in expected)
           if expected else not names)
    return hit, [(f"{n} {d['estimate']:.3f}" if d.get("estimate") is not None else n)
                 + _why(d) for n, d in zip(names, failing, strict=True)]


def _why(decision: dict) -> str:
    """A failing decision's explanation, as `` [class: first function]``; empty without one."""
    e = decision.get("explain")
    if not isinstance(e, dict):
        return ""
    first = (e.get("functions") or [{}])[0].get("text")
    return f" [{e.get('class')}{': ' + first if first else ''}]"


def shown(compare: dict, expected: tuple[tuple[str, ...], ...]) -> str:
    """The decisions of the expected metrics (every e2e run's headline metric in an A/A): verdict,
    estimate, interval and pairs, one run per entry."""
    names = tuple(m for group in expected for m in group) or ("examples_per_sec",)
    out = []
    for d in compare["decisions"]:
        if d["metric"] in names:
            verdict = "inconclusive" if d.get("inconclusive") else d["verdict"]
            run = d["run"].rsplit("[", 1)[-1].rstrip("]")
            interval = (f"[{d['low']:.3f}, {d['high']:.3f}]"
                        if d.get("low") is not None and d.get("high") is not None else "[none]")
            estimate = f"{d['estimate']:.3f}" if d.get("estimate") is not None else "none"
            out.append(f"{run} {d['metric']} {verdict} {estimate} {interval} {d['pairs']} pairs")
    return "; ".join(out)


def widths(compare: dict) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"per-op": [], "e2e": []}
    for d in compare["decisions"]:
        low, high = d.get("low"), d.get("high")
        if d["metric"].startswith("count:") or not low or not high or d["metric"] == "python_share":
            continue
        out["per-op" if d["metric"].startswith("call_ms:") else "e2e"].append(high / low - 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(DEFAULT),
                        help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--sessions", type=int, default=10, help="sessions per case (default 10)")
    parser.add_argument("--workload", default="small")
    parser.add_argument("--thresholds", default="ci/thresholds.toml",
                        help="thresholds file of the sessions, relative to the copy (its [compare] "
                             "table: budget, min_slowdown)")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep each session's results JSON in this directory "
                             "(CASE-N.json)")
    parser.add_argument("--single", action="store_true",
                        help="time the head alone before each session, and print the ratio")
    parser.add_argument("pytest_args", nargs="*", default=["suites/"],
                        help="what the sessions run (default suites/: the main job)")
    opts = parser.parse_args()
    cases = [c for c in opts.cases.split(",") if c]
    unknown = [c for c in cases if any(part not in CASES for part in c.split("+"))]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; expected some of {', '.join(CASES)}")
    env_note = f"OPPERF_NUM_THREADS={os.environ.get('OPPERF_NUM_THREADS', '(default)')}"
    print(f"A/B acceptance: {opts.sessions} session(s) per case, workload {opts.workload}, "
          f"{env_note}, {os.cpu_count()} CPUs, tests {' '.join(opts.pytest_args)}")
    args = [f"--opperf-workload={opts.workload}", "--opperf-device=cpu",
            f"--opperf-thresholds={opts.thresholds}", *opts.pytest_args]
    summary = []
    with tempfile.TemporaryDirectory(prefix="ab-acceptance-") as tmp:
        where = Path(tmp)
        try:
            unpatched = copy(where, "unpatched", "")  # the head of the cases with no patch
            for case in cases:
                patch, expected = combined(case)
                head = copy(where, f"head-{case}", patch) if patch else unpatched
                null = not expected  # every regressed metric is a false alarm
                hits, alarms, times, ratios = 0, 0, [], []
                all_widths: dict[str, list[float]] = {"per-op": [], "e2e": []}
                for i in range(opts.sessions):
                    out = where / f"{case}-{i}.json"
                    alone = single(head, args) if opts.single else None
                    ret, data, elapsed = session(head, "HEAD", args, out)
                    if alone is not None:
                        ratios.append(elapsed / alone)
                    if opts.out is not None:
                        opts.out.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(out, opts.out / f"{case}-{i + 1}.json")
                    compare = data["compare"]
                    hit, regressed = caught(compare, expected)
                    hits += hit
                    alarms += bool(regressed) if null else 0
                    times.append(elapsed)
                    for k, v in widths(compare).items():
                        all_widths[k] += v
                    undecided = sum(d["verdict"] == "undecided" for d in compare["decisions"])
                    status = (("no false alarm" if hit else "FALSE ALARM") if null
                              else "caught" if hit else "MISSED")
                    print(f"{case} #{i + 1}: exit {ret}, {status}; "
                          f"{len(regressed)} regressed "
                          f"({', '.join(regressed[:4])}{'...' if len(regressed) > 4 else ''}), "
                          f"{undecided} undecided, "
                          f"{compare['pairs']} pairs, {elapsed:.0f} s"
                          + (f" ({elapsed / alone:.2f}x the head alone, {alone:.0f} s)"
                             if alone is not None else ""), flush=True)
                    if shown(compare, expected):
                        print(f"    {shown(compare, expected)}", flush=True)
                line = (f"{case}: {'no false alarm in' if null else 'caught in'} "
                        f"{opts.sessions - alarms if null else hits}/{opts.sessions} "
                        "sessions, "
                        f"median session {statistics.median(times):.0f} s")
                if ratios:
                    line += (f"; A/B over the head alone {min(ratios):.2f}-{max(ratios):.2f}x, "
                             f"median {statistics.median(ratios):.2f}x")
                if null:
                    for k, v in all_widths.items():
                        if v:
                            width = 100 * statistics.median(v)
                            line += f"; median interval width {k} {width:.1f} %"
                summary.append(line)
                if patch:
                    git("worktree", "remove", "--force", str(head))
        finally:
            for path in where.iterdir():
                if path.is_dir():
                    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT,
                                   capture_output=True)
            git("worktree", "prune")
            shutil.rmtree(where, ignore_errors=True)
    print("\n".join(["", *summary]))


if __name__ == "__main__":
    main()
