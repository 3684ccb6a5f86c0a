"""The stat tree: validation, display order, kernel ancestors, executor membership, shares."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_opperf import timers
from pytest_opperf.records.reader import read_results
from pytest_opperf.results import ResultsError, RunResult, dumps_results
from pytest_opperf.stattree import SORT_KEYS, Shares, StatResult, StatTree, StatTreeError
from tests.opperf_factories import e2e_run, results

ROOT = Path(__file__).resolve().parent.parent


def s(name: str, total: float, parent: str | None = None, kernel: bool = True, count: int = 1,
      samples: list[float] | None = None) -> StatResult:
    return StatResult(name, parent, count, total, total / count, 0.1, 1.0, samples_ms=samples,
                      kernel=kernel)


def reference_tree() -> StatTree:
    """ExecutorRunTimer > CreateOpTimer, conv2d > Im2ColTimer, conv2d > Block > GemmTimer
    (Block a framework timer inside a kernel), relu; ProgramCloneTimer outside the executor."""
    return StatTree([
        s("ExecutorRunTimer", 100.0, kernel=False),
        s("CreateOpTimer", 5.0, "ExecutorRunTimer", kernel=False, count=50),
        s("conv2d", 60.0, "ExecutorRunTimer", count=2),
        s("conv2d/Im2ColTimer", 10.0, "conv2d", count=20),
        s("conv2d/Block", 30.0, "conv2d", kernel=False),
        s("conv2d/GemmTimer", 25.0, "conv2d/Block", count=8),
        s("relu", 20.0, "ExecutorRunTimer", count=3),
        s("ProgramCloneTimer", 8.0, kernel=False, count=3),
    ])


# --- validation --------------------------------------------------------------------------


def test_a_duplicate_name_is_refused_naming_it():
    with pytest.raises(StatTreeError, match="^stat 'a' appears twice$"):
        StatTree([s("a", 1.0), s("b", 1.0), s("a", 2.0)])


def test_a_missing_parent_is_refused_naming_the_stat_and_the_parent():
    missing = "^stat 'b' has the parent 'gone', which is not a stat of the run$"
    with pytest.raises(StatTreeError, match=missing):
        StatTree([s("a", 1.0), s("b", 1.0, "gone")])
    # deep in a chain, the stat whose parent is missing is named, not the one the walk began at
    with pytest.raises(StatTreeError, match="^stat 'b' has the parent 'gone'"):
        StatTree([s("c", 1.0, "b"), s("b", 1.0, "gone")])


def test_cycles_are_refused_with_the_whole_loop():
    with pytest.raises(StatTreeError, match="^stat parents form a cycle: 'x' -> 'z' -> 'y' -> 'x'"):
        StatTree([s("x", 1.0, "z"), s("y", 1.0, "x"), s("z", 1.0, "y")])
    with pytest.raises(StatTreeError, match="^stat parents form a cycle: 'a' -> 'a'$"):
        StatTree([s("a", 1.0, "a")])
    # a cycle hanging below a sound root is found too
    with pytest.raises(StatTreeError, match="cycle: 'c' -> 'd' -> 'c'"):
        StatTree([s("r", 1.0), s("c", 1.0, "d"), s("d", 1.0, "c"), s("e", 1.0, "r")])


def test_a_run_validates_its_stats_when_given_or_assigned():
    run = e2e_run(stats={"a": [1.0], "b": [1.0]})
    assert isinstance(run.stats, StatTree) and [x.name for x in run.stats] == ["a", "b"]
    with pytest.raises(StatTreeError, match="stat 'b' has the parent 'z'"):
        run.stats = [s("a", 1.0), s("b", 1.0, "z")]
    assert [x.name for x in run.stats] == ["a", "b"]  # the refused stats were not kept
    with pytest.raises(StatTreeError, match="appears twice"):
        RunResult(id="r", kind="e2e", config={}, device="cpu", timing="host", wall_s=1.0,
                  examples=0, batches=0, examples_per_sec=0.0, sec_per_batch=0.0,
                  python_share=0.0, stats=[s("a", 1.0), s("a", 1.0)], counts={})


def test_the_reader_refuses_a_missing_parent_in_one_line(tmp_path):
    doc = json.loads(dumps_results(results(e2e_run("r", stats={"a": [1.0], "b": [1.0]}))))
    doc["runs"][0]["stats"][1]["parent"] = "nowhere"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError) as info:
        read_results(path)
    assert str(info.value) == (f"{path}: malformed results file: run 'r': stat 'b' has the parent "
                               "'nowhere', which is not a stat of the run")


# --- what the readers ask ------------------------------------------------------------------


def test_kernel_ancestors_skip_framework_timers():
    tree = reference_tree()
    # through the framework timer Block
    assert tree.kernel_ancestor("conv2d/GemmTimer") is tree.get("conv2d")
    assert tree.kernel_ancestor("conv2d/Block") is tree.get("conv2d")
    assert tree.kernel_ancestor("conv2d") is None  # ExecutorRunTimer is no kernel
    assert tree.kernel_ancestor("ExecutorRunTimer") is None


def test_kernel_time_counts_only_the_outermost_kernels():
    # conv2d and relu; Im2Col and Gemm are inside conv2d
    assert reference_tree().kernel_ms == 60.0 + 20.0


def test_display_order_indents_only_under_kernels_and_sorts_siblings():
    order = [(depth, x.name) for depth, x in reference_tree().ordered()]
    assert order == [(0, "ExecutorRunTimer"), (0, "conv2d"), (1, "conv2d/Block"),
                     (1, "conv2d/GemmTimer"), (1, "conv2d/Im2ColTimer"), (0, "relu"),
                     (0, "ProgramCloneTimer"), (0, "CreateOpTimer")]
    by_count = [(depth, x.name) for depth, x in reference_tree().ordered("count")]
    assert by_count == [(0, "CreateOpTimer"), (0, "relu"), (0, "ProgramCloneTimer"), (0, "conv2d"),
                        (1, "conv2d/Im2ColTimer"), (1, "conv2d/GemmTimer"), (1, "conv2d/Block"),
                        (0, "ExecutorRunTimer")]
    # relu and ProgramCloneTimer both count 3: the sort is stable (recording order)
    assert [x.name for _, x in StatTree([s("b", 1.0), s("a", 1.0)]).ordered()] == ["b", "a"]
    assert [x.name for _, x in StatTree([s("b", 1.0), s("a", 1.0)]).ordered("name")] == ["a", "b"]
    assert set(SORT_KEYS) == {"total", "avg", "max", "min", "count", "name"}


def test_executor_membership_and_time():
    tree = reference_tree()
    members = [x.name for x in tree if tree.in_executor(x.name, "ExecutorRunTimer")]
    assert members == ["CreateOpTimer", "conv2d", "conv2d/Im2ColTimer", "conv2d/Block",
                       "conv2d/GemmTimer", "relu"]
    assert not tree.in_executor("ExecutorRunTimer", "ExecutorRunTimer")
    # without an executor stat the executor is the top level
    top = [x.name for x in tree if tree.in_executor(x.name, None)]
    assert top == ["ExecutorRunTimer", "ProgramCloneTimer"]
    assert tree.executor_ms("ExecutorRunTimer") == 100.0
    assert tree.executor_ms(None) == tree.executor_ms("NoSuchTimer") == 108.0
    assert [x.name for x in tree.roots] == ["ExecutorRunTimer", "ProgramCloneTimer"]


def test_executor_samples_per_step():
    tree = StatTree([s("a", 3.0, samples=[1.0, 2.0]), s("b", 7.0, samples=[3.0, 4.0]),
                     s("a/c", 1.0, "a", samples=[0.5, 0.5])])
    assert tree.executor_samples(None) == [4.0, 6.0]  # the top-level stats, step by step
    assert tree.executor_samples("b") == [3.0, 4.0]
    assert tree.executor_samples("missing") is None
    assert StatTree([s("a", 1.0, samples=[1.0]), s("b", 1.0)]).executor_samples(None) is None


def test_trace_category_by_region_name():
    tree = reference_tree()
    assert tree.trace_category("GemmTimer") == "kernel"  # the event of conv2d/GemmTimer
    assert (tree.trace_category("conv2d"), tree.trace_category("Block")) == ("kernel", "framework")
    assert tree.trace_category("ExecutorRunTimer") == "framework"


def test_shares_of_wall_hand_computed():
    sh = Shares.of(wall_ms=200.0, executor_ms=150.0, kernel_ms=120.0)
    assert (sh.python, sh.framework, sh.kernel) == (0.25, 0.15, 0.6)
    assert sh.line() == "Python 25.00% | framework overhead 15.00% | kernels 60.00% of wall time"
    # an executor longer than the window (clock skew) gives no negative share; no wall gives zeros
    assert Shares.of(100.0, 120.0, 130.0) == Shares(0.0, 0.0, 1.3)
    assert Shares.of(0.0, 5.0, 5.0) == Shares(0.0, 0.0, 0.0)
    assert reference_tree().kernel_ms == 80.0 and Shares.of(400.0, 100.0, 80.0).kernel == 0.2


# --- from a live table ---------------------------------------------------------------------


def test_from_table_with_a_fake_clock(monkeypatch):
    ticks = iter(int(ms * 1e6) for ms in [0, 1, 4, 5, 9, 10])
    monkeypatch.setattr(timers, "perf_counter_ns", lambda: next(ticks))
    with timers.recording() as table:
        with timers.timer("ExecutorRunTimer"):
            with timers.timer("conv2d", kernel=True):
                with timers.timer("GemmTimer", kernel=True):
                    pass
    tree = StatTree.from_table(table, samples={"conv2d": [4.0]}, work={"conv2d": [2e9, 1e6]})
    assert [(x.name, x.parent, x.kernel, x.total_ms) for x in tree] == [
        ("ExecutorRunTimer", None, False, 10.0), ("conv2d", "ExecutorRunTimer", True, 8.0),
        ("conv2d/GemmTimer", "conv2d", True, 1.0)]
    conv = tree.get("conv2d")
    assert conv is not None
    assert (conv.samples_ms, conv.flops, conv.bytes, conv.host_ms) == ([4.0], 2e9, 1e6, None)
    assert tree.get("ExecutorRunTimer").samples_ms is None  # type: ignore[union-attr]
    assert table.kernel_ms() == tree.kernel_ms == 8.0
    assert timers.format_stat_lines(table)[2].startswith("    Stat=GemmTimer ")


# --- layering ------------------------------------------------------------------------------


def test_the_tree_and_the_timers_load_only_the_standard_library():
    code = ("import sys\nbefore = set(sys.modules)\n"
            "import pytest_opperf.stattree, pytest_opperf.timers\n"
            "bad = sorted(m for m in set(sys.modules) - before if m.split('.')[0] not in "
            "sys.stdlib_module_names and m not in ('pytest_opperf', 'pytest_opperf.stattree', "
            "'pytest_opperf.timers'))\nassert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_the_framework_imports_only_the_instrumentation_side():
    allowed = {"pytest_opperf.timers", "pytest_opperf.stattree"}
    found = set()
    for path in sorted((ROOT / "reference_framework").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                base = node.module or ""
                names = [f"{base}.{a.name}" if base == "pytest_opperf" else base
                         for a in node.names]
            else:
                continue
            found |= {(path.name, n) for n in names if n.split(".")[0] == "pytest_opperf"}
    assert found and {n for _, n in found} <= allowed, sorted(found)
