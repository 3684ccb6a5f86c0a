"""The plugin's options, declared once: each with its metavar, parser, default, help and child
policy (:mod:`pytest_opperf.glue.child`: what a child pytest of the plugin gets), and what a child
of a session is given."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..comparison import shard
from ..comparison.gate import UNDECIDED_MODES
from ..stattree import SORT_KEYS
from . import child
from .child import Policy
from .settings import Settings

WORKLOADS = ("tiny", "small", "full", "auto")
DEVICES = ("auto", "cpu", "gpu")
TIMINGS = ("events", "sync")


def _parser(name: str, ok: Callable[[str], bool], expected: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def _choice(option: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    return _parser(option, choices.__contains__, f"one of {'|'.join(choices)}")


MAX_TIMEOUT_S = 7 * 86400.0  # a week: beyond it (inf, 1e10) the waits' clocks overflow


def _timeout(value: str) -> bool:
    try:
        return 0 < float(value) <= MAX_TIMEOUT_S  # False for nan
    except ValueError:
        return False


_seconds = _parser("seconds", _timeout, f"a number of seconds in (0, {MAX_TIMEOUT_S:.0f}]")
MAX_COUNT_STEPS = 1000
_steps = _parser("steps", lambda v: v.strip().isdigit() and int(v) <= MAX_COUNT_STEPS,
                 f"a whole number of steps in [0, {MAX_COUNT_STEPS}]")
_path = _parser("path", lambda value: bool(value.strip()), "a path")


def _shard_ok(value: str) -> bool:
    try:
        shard.parse(value)
    except shard.ShardError:
        return False
    return True


_shard = _parser("shard", _shard_ok, f"K/N, shard K of N (1 <= K <= N <= {shard.MAX_SHARDS})")


# (option suffix, child policy, metavar, parser, default, help); every option is also ini key
# opperf_<suffix>. The child policy (pytest_opperf.glue.child): what a child pytest of the plugin
# gets.
OPTIONS: tuple[tuple[str, Policy, str, Callable[[str], str] | None, str | None, str], ...] = (
    ("workload", "fixed", "NAME", _choice("workload", WORKLOADS), "auto",
     "size of the e2e workload: tiny|small|full|auto (auto: full on GPU, small on CPU)"),
    ("device", "fixed", "NAME", _choice("device", DEVICES), "auto",
     "where the framework runs: auto|cpu|gpu (gpu without a usable GPU is a usage error)"),
    ("timing", "fixed", "MODE", _choice("timing", TIMINGS), "events",
     "GPU timing: events (CUDA events, one sync per step) | sync (sync around every op)"),
    ("thresholds", "stripped", "PATH", _path, None,
     "thresholds file (TOML) with absolute limits and regression tolerances"),
    ("baseline", "stripped", "PATH", _path, None,
     "compare against a results file, or a directory holding <device_class>-<workload>.json"),
    ("save", "stripped", "PATH", _path, None,
     "write this session's results as a baseline (atomic replace; a directory gets "
     "<device_class>-<workload>.json)"),
    ("json", "stripped", "PATH", _path, None, "write the results JSON"),
    ("markdown", "stripped", "PATH", _path, None,
     "write the markdown report (also appended to $GITHUB_STEP_SUMMARY when set)"),
    ("trace", "fixed", "PATH", _path, None,
     "write a Chrome trace (chrome://tracing, Perfetto) of one step per run"),
    ("sort", "stripped", "COLUMN", _choice("sort", tuple(SORT_KEYS)), "total",
     "stat table order: total|avg|max|min|count|name"),
    ("history", "stripped", "PATH|URL", _path, None,
     "append this session to a history: a SQLite file (created on first use) or a postgresql:// "
     "URL"),
    # A/B in one job (pytest_opperf/ab): ini keys with underscores, opperf_compare_python...
    ("compare", "stripped", "REV|DIR", _path, None,
     "A/B: run the base side too (a git revision of the rootdir's repository, or a checkout) and "
     "compare head against base, interleaved"),
    ("compare-python", "stripped", "PATH", _path, None,
     "A/B: the base side's interpreter (an environment with the base build installed; default: "
     "this one)"),
    ("compare-timeout", "stripped", "SECONDS", _seconds, "600",
     "A/B: the longest a side may take to answer (a hang ends both)"),
    ("tests-from", "stripped", "SOURCE", _parser("tests-from", lambda v: bool(v.strip()),
                                                 "worktree, head or a git revision"), None,
     "A/B: both sides run the selection's test files (and their conftest.py) as the head's "
     "working tree has them (worktree or head), each against its own code: a benchmark the "
     "base lacks is compared (default: each side's own tests)"),
    ("count-steps", "fixed", "N", _steps, "2",
     "steps of the counting pass of each run that has one (run.counting_pass): work counts per "
     "step, counted after the timed window; 0: no counting pass"),
    ("count-timeout", "fixed", "SECONDS", _seconds, "300",
     "the longest a run's counting pass may take (past it the run has no work counts)"),
    ("compare-undecided", "stripped", "MODE", _choice("compare-undecided", UNDECIDED_MODES),
     "inconclusive",
     "A/B: what a metric left undecided does: inconclusive (a slowdown shown that may be past "
     "the threshold) fails and the others warn; warn: every one only warns (shown in the gate "
     "line); fail: every one fails: inconclusive|warn|fail"),
    # a child gets no shard: an A/B side collects every test and runs what the controller, which
    # applies the shard to both sides' tests, sends it; the valgrind child runs one given test
    ("shard", "stripped", "K/N", _shard, None,
     "run shard K of N: a deterministic part of the selected tests, balanced by the baseline's "
     "durations (by count without one); merge the shards' results with python -m pytest_opperf "
     "merge"),
)
# switches (name, child policy, help; each also an ini key); the GPU ones: see
# docs/reference/options.md
FLAGS: tuple[tuple[str, Policy, str], ...] = (
    ("record_benchmarks", "fixed",
     "also record tests using pytest-benchmark's plain `benchmark` fixture as per-op runs, timed "
     "by pytest-benchmark's own timer (without it they are only counted)"),
    ("nvtx", "fixed",
     "NVTX ranges around every op and step, named as in the report, for Nsight Systems (needs "
     "nvtx)"),
    ("l2_flush", "fixed",
     "per-op benchmarks flush the GPU's L2 cache before each timed call (cold-cache timing)"),
    ("instructions", "stripped",
     "also count the CPU instructions of each counted step under valgrind (callgrind; each test "
     "with a counting pass runs again in a child process)"),
    ("gpu_workers", "stripped",
     "one pytest-xdist worker per GPU, each with its own CUDA_VISIBLE_DEVICES (use with -n "
     "auto)"),
)

# A child pytest's options (pytest_opperf.glue.child), by option name as on the command line
CHILD_POLICIES: dict[str, Policy] = {
    **{name: policy for name, policy, *_ in OPTIONS},
    **{name.replace("_", "-"): policy for name, policy, _ in FLAGS}}
VALUED_OPTIONS = tuple(name for name, *_ in OPTIONS)  # the options that take a value
# each option's default as a child's fixed value would say it ("false" for a switch)
CHILD_DEFAULTS: dict[str, str] = {
    **{name: default for name, _, _, _, default, _ in OPTIONS if default is not None},
    **{name.replace("_", "-"): "false" for name, *_ in FLAGS}}


def child_options(settings: Settings, **given: str | None) -> dict[str, str]:
    """The options a child of this session gets (pytest_opperf.glue.child): the session's own of
    every fixed option, ``given`` (by option name, dashes as underscores) instead where given."""
    def flag(on: bool) -> str:
        return "true" if on else "false"

    values: dict[str, str | None] = {
        "workload": settings.workload, "device": settings.device, "timing": settings.timing,
        "count-steps": str(settings.count_steps), "count-timeout": f"{settings.count_timeout:g}",
        "trace": None, "record-benchmarks": flag(settings.record_benchmarks),
        "nvtx": flag(settings.nvtx), "l2-flush": flag(settings.l2_flush)}
    values.update({name.replace("_", "-"): value for name, value in given.items()})
    missing = sorted(n for n, policy in CHILD_POLICIES.items() if policy == "fixed"
                     and n not in values)
    if missing:  # a new fixed option must say what a child gets
        raise RuntimeError(f"child_options: no value for the fixed option(s) {missing}")
    return child.fixed_values(CHILD_POLICIES, values)
