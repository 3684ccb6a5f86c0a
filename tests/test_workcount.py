"""Work counts: the counting pass after the window, its determinism, attribution and faults, the
gate's rule against a stored baseline and in A/B, and the report's lines."""

from __future__ import annotations

import copy
import random
import sys
import threading
import time

import pytest

from pytest_opperf import measure, timers
from pytest_opperf.ab import paired
from pytest_opperf.ab.pairs import e2e_samples
from pytest_opperf.comparison import gate
from pytest_opperf.comparison.thresholds import CompareSettings, parse_thresholds
from pytest_opperf.core.port import Window
from pytest_opperf.device import CPU_HOST
from pytest_opperf.records.checks import results_from_dict
from pytest_opperf.reports import report
from pytest_opperf.results import ResultsError, ResultSet
from pytest_opperf.workcounts.workcount import OUTSIDE, Counter, WorkCounts
from tests.opperf_factories import e2e_run

# --- a toy framework: an executor timer around two ops, each with some Python work ----------


class Toy:
    def __init__(self, extra_call: bool = False, dict_copy: bool = False) -> None:
        self.extra_call = extra_call
        self.dict_copy = dict_copy
        self.attrs = {"axis": -1, "scale": 2.0}
        self.pool = threading.Event()

    def helper(self, x: int) -> int:
        return x + 1

    def add(self, n: int) -> int:
        with timers.timer("elementwise_add", kernel=True):
            total = 0
            for i in range(n):
                total += self.helper(i)
            if self.extra_call:
                self.helper(0)
            return total

    def relu(self, n: int) -> int:
        with timers.timer("relu", kernel=True):
            return sum(max(0, i - n // 2) for i in range(n))

    def step(self) -> None:
        with timers.timer("ExecutorRunTimer"):
            for op in (self.add, self.relu):
                attrs = dict(self.attrs) if self.dict_copy else self.attrs
                op(20 + len(attrs))
        self.helper(1)  # outside every region


def counted(toy: Toy, steps: int = 2, run_id: str = "suite.py::test_train") -> measure.Run:
    run = measure.Run(run_id, "e2e", {}, CPU_HOST, "events", "ExecutorRunTimer",
                      window=Window(count_steps=steps))
    with measure.measure_window(run):
        for _ in range(3):
            toy.step()
            run.step(examples=4)
    run.counting_pass(toy.step)
    return run


def work_of(toy: Toy, steps: int = 2) -> WorkCounts:
    run = counted(toy, steps)
    assert run.result is not None and run.result.work is not None, run.result
    return run.result.work


def test_counts_are_the_same_in_every_step_and_every_pass():
    first, second = work_of(Toy(), steps=3), work_of(Toy(), steps=3)
    assert first.stats == second.stats
    assert not first.varies and first.steps == 3
    assert set(first.stats) == {"ExecutorRunTimer", "elementwise_add", "relu", OUTSIDE}
    assert first.stats["elementwise_add"]["py_calls"] >= 22  # helper per element, at least
    assert first.total("bytecodes") == sum(s.get("bytecodes", 0) for s in first.stats.values())


def test_an_extra_call_is_counted_at_its_stat_and_nowhere_else():
    base, head = work_of(Toy()), work_of(Toy(extra_call=True))
    changed = {name for name in base.stats if base.stats[name] != head.stats[name]}
    assert changed == {"elementwise_add"}
    add = "elementwise_add"
    assert head.stats[add]["py_calls"] == base.stats[add]["py_calls"] + 1


def test_a_dict_copy_is_no_call_but_the_bytecodes_see_it():
    base, head = work_of(Toy()), work_of(Toy(dict_copy=True))
    assert head.stats["ExecutorRunTimer"]["bytecodes"] > base.stats["ExecutorRunTimer"]["bytecodes"]
    assert head.stats["elementwise_add"] == base.stats["elementwise_add"]


def test_waiting_for_another_thread_is_not_work():
    class Waits(Toy):
        def __init__(self) -> None:
            super().__init__()
            # the other thread is done before the wait (no wait at all) or long after it
            self.delays = [random.choice([0.0, 0.01]) for _ in range(10)]

        def relu(self, n: int) -> int:
            with timers.timer("relu", kernel=True):
                done = threading.Event()
                threading.Timer(self.delays.pop(), done.set).start()
                time.sleep(0.005)
                done.wait()
                return n

    counts = [work_of(Waits()).stats for _ in range(4)]
    assert all(c == counts[0] for c in counts)


def test_the_tracer_and_profiler_in_place_are_restored():
    def mine(frame, event, arg):
        return None

    sys.settrace(mine)
    sys.setprofile(mine)
    try:
        work_of(Toy())
        assert sys.gettrace() is mine and sys.getprofile() is mine
    finally:
        sys.settrace(None)
        sys.setprofile(None)


def test_the_counting_pass_runs_after_the_window_once():
    run = measure.Run("r", "e2e", {}, CPU_HOST, "events", "ExecutorRunTimer",
                      window=Window(count_steps=2))
    with measure.measure_window(run):
        with pytest.raises(RuntimeError, match="after the measure"):
            run.counting_pass(lambda: None)
        run.step()
    run.counting_pass(lambda: None)
    with pytest.raises(RuntimeError, match="already called"):
        run.counting_pass(lambda: None)


def test_zero_steps_count_nothing_and_call_nothing():
    run = measure.Run("r", "e2e", {}, CPU_HOST, "events", "ExecutorRunTimer",
                      window=Window(count_steps=0))
    with measure.measure_window(run):
        run.step()
    calls = []
    run.counting_pass(lambda: calls.append(1))
    assert calls == [] and run.result is not None and run.result.work is None


def test_a_step_that_raises_keeps_the_timed_run_and_says_why():
    class Breaks(Toy):
        steps = 0

        def step(self) -> None:
            Breaks.steps += 1
            if Breaks.steps > 3:
                raise ValueError("boom\nsecond line")
            super().step()

    run = counted(Breaks())
    assert run.result is not None and run.result.work is None and run.result.stats
    assert any("counting pass: no work counts, step 1 of 2 raised ValueError: boom second line"
               in n for n in run.result.notes), run.result.notes
    assert sys.gettrace() is None


def test_a_pass_past_its_time_limit_ends_even_when_the_step_swallows_the_timeout():
    class Slow(Toy):
        calls = 0

        def step(self) -> None:
            Slow.calls += 1
            if Slow.calls <= 3:
                return super().step()
            try:
                while True:  # bytecodes forever, until the counter's deadline
                    pass
            except Exception:  # the framework's own handler must not take the timeout
                pytest.fail("the timeout was caught as an Exception")

    run = measure.Run("r", "e2e", {}, CPU_HOST, "events", "ExecutorRunTimer",
                      window=Window(count_steps=2, count_timeout_s=0.2))
    toy = Slow()
    with measure.measure_window(run):
        for _ in range(3):
            toy.step()
            run.step()
    run.counting_pass(toy.step)
    assert run.result is not None and run.result.work is None
    assert any("ran past the 0.2 s limit" in n for n in run.result.notes), run.result.notes


def test_the_deadline_is_seen_by_the_counter_on_a_fake_clock(monkeypatch):
    from pytest_opperf.workcounts import workcount

    now = [0]
    monkeypatch.setattr(workcount, "_CHECK_EVERY", 10)
    with timers.recording() as table:
        counter = Counter(table, deadline_ns=100, clock=lambda: now[0])
        counter.start()
        try:
            sum(i for i in range(50))  # the clock stands still: no timeout
        finally:
            counter.stop()
        assert not counter.timed_out
        now[0] = 101
        with pytest.raises(TimeoutError):
            counter.start()
            try:
                sum(i for i in range(50))
            finally:
                counter.stop()
        assert counter.timed_out


def _pass_of(step, steps: int = 2, clock=None) -> measure.Run:
    # the 1 s limit only on the fake clock: on the real one a loaded machine could pass it
    run = measure.Run("r", "e2e", {}, CPU_HOST, "events", "ExecutorRunTimer",
                      window=Window(count_steps=steps,
                                    count_timeout_s=1.0 if clock is not None else 600.0))
    if clock is not None:
        run._count_clock = clock
    with measure.measure_window(run):
        run.step()
    run.counting_pass(step)
    return run


def test_one_step_that_ends_past_the_limit_has_no_counts_and_a_note():
    now = [0]

    def step() -> None:  # no bytecode reads the clock: the time passes in C code
        now[0] += 2 * 10**9

    run = _pass_of(step, steps=1, clock=lambda: now[0])
    assert run.result is not None and run.result.work is None
    assert any("ran past the 1 s limit (--opperf-count-timeout) in step 1 of 1" in n
               for n in run.result.notes), run.result.notes


def _remove_trace() -> None:
    sys.settrace(None)


def _remove_profile() -> None:
    sys.setprofile(None)


def _replace_trace() -> None:
    sys.settrace(lambda frame, event, arg: None)


def _remove_and_restore_trace() -> None:
    saved = sys.gettrace()
    sys.settrace(None)
    sum(i for i in range(100))
    sys.settrace(saved)


def _remove_through_threading() -> None:
    threading.setprofile(None)  # other threads only: harmless, but then
    sys.setprofile(None)


@pytest.mark.parametrize("tamper, how", [
    (_remove_trace, "it called sys.settrace()"),
    (_remove_profile, "it called sys.setprofile()"),
    (_replace_trace, "it called sys.settrace()"),
    (_remove_and_restore_trace, "it called sys.settrace()"),
    (_remove_through_threading, "it called sys.setprofile()"),
])
def test_a_step_that_changes_the_tracing_has_no_counts_and_a_note(tamper, how):
    calls = []

    def step() -> None:
        calls.append(1)
        sum(i for i in range(100))
        if len(calls) == 2:
            tamper()

    sys.settrace(None)  # (pytest's own tracer, if any, is restored by the counter)
    run = _pass_of(step, steps=3)
    sys.settrace(None)
    sys.setprofile(None)
    assert run.result is not None and run.result.work is None and len(calls) == 2
    assert [n for n in run.result.notes if n.startswith("counting pass")] == [
        f"counting pass: no work counts, step 2 of 3 changed the tracing the counts come from: "
        f"{how}"]


def test_a_tracer_replaced_from_c_code_is_seen_at_the_step_end():
    import _lsprof  # cProfile's C profiler: sets the profile function without sys.setprofile

    profiler = _lsprof.Profiler()
    run = _pass_of(profiler.enable)
    profiler.disable()
    assert run.result is not None and run.result.work is None
    assert any("step 1 of 2 changed the tracing the counts come from: the profiler was removed "
               "or replaced (sys.getprofile())" in n for n in run.result.notes), run.result.notes


def test_a_step_that_raises_restores_the_tracing_in_place():
    def mine(frame, event, arg):
        return None

    def step() -> None:
        raise KeyError("x")

    sys.settrace(mine)
    sys.setprofile(mine)
    try:
        run = _pass_of(step)
        assert sys.gettrace() is mine and sys.getprofile() is mine
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    assert run.result is not None and run.result.work is None
    assert any("step 1 of 2 raised KeyError" in n for n in run.result.notes), run.result.notes


@pytest.mark.parametrize("steps", [-1, 1.5, True, "2"])
def test_bad_step_numbers_are_refused(steps):
    run = measure.Run("r", "e2e", {}, CPU_HOST, "events", "ExecutorRunTimer",
                      window=Window(count_steps=2))
    with measure.measure_window(run):
        run.step()
    with pytest.raises(ValueError, match="expects an int >= 0"):
        run.counting_pass(lambda: None, steps=steps)


# --- the results file -------------------------------------------------------------------


def test_work_counts_round_trip_through_a_results_file():
    run = e2e_run()
    run.work = WorkCounts({"conv2d": {"bytecodes": 10, "py_calls": 2}, OUTSIDE: {"c_calls": 1}},
                          2, 1.5, {"python": "3.11.7", "numpy": "2.0"}, [], 123, "AMD EPYC")
    back = results_from_dict(ResultSet(runs=[run]).to_dict()).runs[0]
    assert back.work == run.work


@pytest.mark.parametrize("work, problem", [
    ({"steps": 0, "pass_s": 1.0, "versions": {}, "stats": {}}, "steps must be"),
    ({"steps": 2, "pass_s": -1, "versions": {}, "stats": {}}, "pass_s must be"),
    ({"steps": 2, "pass_s": 1, "versions": {}, "stats": {"a": {"bytecodes": -3}}}, "int >= 0"),
    ({"steps": 2, "pass_s": 1, "versions": {}, "stats": {}, "instructions": 1.5}, "instructions"),
])
def test_a_malformed_work_object_is_one_line(work, problem):
    data = ResultSet(runs=[e2e_run()]).to_dict()
    data["runs"][0]["work"] = work
    with pytest.raises(ResultsError, match=problem):
        results_from_dict(data)


def test_unknown_keys_of_a_work_object_are_read_and_ignored():
    """The work object is open (the results format's contract): an unknown field or counter is
    ignored, the known counts kept."""
    data = ResultSet(runs=[e2e_run()]).to_dict()
    data["runs"][0]["work"] = {"steps": 2, "pass_s": 1, "versions": {}, "extra": 1,
                               "stats": {"a": {"bytecodes": 3, "lines": 3}}}
    work = results_from_dict(data).runs[0].work
    assert work is not None and work.stats == {"a": {"bytecodes": 3}}


# --- the gate ---------------------------------------------------------------------------


def with_work(stats, versions=None, instructions=None, cpu="AMD EPYC", run_id=None):
    run = e2e_run(run_id) if run_id else e2e_run()
    run.work = WorkCounts(copy.deepcopy(stats), 2, 1.0, versions or {"python": "3.11.7"}, [],
                          instructions, cpu if instructions is not None else None)
    return run


BASE = {"conv2d_grad": {"bytecodes": 1000, "py_calls": 100, "c_calls": 50},
        OUTSIDE: {"bytecodes": 200, "py_calls": 10}}


def evaluate(new, base, toml=""):
    import tomllib

    thresholds = parse_thresholds(tomllib.loads(toml)) if toml else None
    return gate.evaluate(ResultSet(runs=[new]), thresholds, ResultSet(runs=[base]), "base.json")


def test_unchanged_work_passes_and_is_checked():
    verdict = evaluate(with_work(BASE), with_work(BASE))
    assert verdict.passed and not verdict.violations
    assert verdict.checks >= 6  # each stat's three counters


def test_more_work_at_one_stat_fails_naming_it():
    more = copy.deepcopy(BASE)
    more["conv2d_grad"]["py_calls"] = 102
    verdict = evaluate(with_work(more), with_work(BASE))
    assert [(v.metric, v.value, v.baseline) for v in verdict.violations] == [
        ("py_calls:conv2d_grad", 102, 100)]
    assert verdict.violations[0].message == (
        "+2.0% Python calls in conv2d_grad: 102 per step, baseline 100 (exact)")


def test_less_work_passes_with_a_note_and_a_tolerance_lets_a_little_more_pass():
    less = copy.deepcopy(BASE)
    less[OUTSIDE]["bytecodes"] = 150
    verdict = evaluate(with_work(less), with_work(BASE))
    assert verdict.passed
    assert any("-25.0% bytecodes in (outside)" in n for n in verdict.notes), verdict.notes
    more = copy.deepcopy(BASE)
    more["conv2d_grad"]["bytecodes"] = 1004
    assert evaluate(with_work(more), with_work(BASE),
                    "[regression]\nmax_work_increase = 0.005\n").passed
    assert not evaluate(with_work(more), with_work(BASE)).passed


def test_other_library_versions_make_work_advisory_in_one_warning_line():
    more = copy.deepcopy(BASE)
    more["conv2d_grad"]["bytecodes"] = 2000
    verdict = evaluate(with_work(more, {"python": "3.11.7", "numpy": "2.1.0"}),
                       with_work(BASE, {"python": "3.11.7", "numpy": "2.0.2"}))
    assert verdict.passed
    assert [w for w in verdict.warnings if "work counts" in w] == [
        "work counts of 1 run(s) are advisory: the library versions differ from baseline "
        "base.json's: suite.py::test_train (numpy 2.1.0 vs 2.0.2)"]


def test_a_baseline_without_work_counts_is_a_note_and_a_lost_count_a_warning():
    verdict = evaluate(with_work(BASE), e2e_run())
    assert verdict.passed and any("save a new baseline" in n for n in verdict.notes)
    verdict = evaluate(e2e_run(), with_work(BASE))
    assert verdict.passed
    assert any("have no work counts but their baseline runs have" in w for w in verdict.warnings)


def test_work_counts_on_neither_side_are_a_warning_naming_the_runs():
    verdict = evaluate(e2e_run(), e2e_run())
    assert verdict.passed
    assert [w for w in verdict.warnings if "work counts" in w] == [
        "1 run(s) have no work counts and neither have their baseline runs: work counts not "
        "compared (a run has them from run.counting_pass(); see the run's notes): "
        "suite.py::test_train"]
    assert not [w for w in evaluate(with_work(BASE), with_work(BASE)).warnings
                if "work counts" in w]


def test_instructions_compare_on_the_same_cpu_within_the_tolerance():
    assert evaluate(with_work(BASE, instructions=1_000_500),
                    with_work(BASE, instructions=1_000_000)).passed
    verdict = evaluate(with_work(BASE, instructions=1_100_000),
                       with_work(BASE, instructions=1_000_000))
    assert [v.metric for v in verdict.violations] == ["instructions"]
    other = evaluate(with_work(BASE, instructions=2_000_000, cpu="Intel Xeon"),
                     with_work(BASE, instructions=1_000_000))
    assert other.passed and any("another CPU" in n for n in other.notes)


def test_work_counts_never_drift():
    verdict = evaluate(with_work(BASE), with_work(BASE))
    assert verdict.drift is not None
    assert not [r for r in verdict.drift.rows if ":" in r.metric
                and r.metric.split(":")[0] in ("bytecodes", "py_calls", "c_calls")]


# --- A/B --------------------------------------------------------------------------------


def test_ab_pairs_hold_the_work_counts_and_only_more_work_regresses():
    more = copy.deepcopy(BASE)
    more["conv2d_grad"]["c_calls"] = 51
    more[OUTSIDE]["bytecodes"] = 100
    samples = {s.metric: s for s in e2e_samples(with_work(BASE), with_work(more))}
    assert samples["c_calls:conv2d_grad"].base == [50.0]
    assert samples["c_calls:conv2d_grad"].head == [51.0]
    decisions = {}
    for name in ("c_calls:conv2d_grad", "bytecodes:(outside)", "py_calls:conv2d_grad"):
        p = paired.Paired(paired.MetricKey("suite.py::test_train", name), "count")
        p.add(samples[name].base[0], samples[name].head[0])
        decisions[name] = p
    settings = CompareSettings()
    verdicts = {d.key.metric: d.verdict
                for d in paired.decide(list(decisions.values()), settings)}
    assert verdicts == {"c_calls:conv2d_grad": "regressed", "bytecodes:(outside)": "improved",
                        "py_calls:conv2d_grad": "unchanged"}
    compare = paired.CompareResult("b", "h", paired.decide(list(decisions.values()), settings))
    from pytest_opperf.comparison.verdict import Verdict

    verdict = Verdict()
    gate.add_compare(verdict, compare)
    assert [v.message for v in verdict.violations] == [
        "+2.0% C calls in conv2d_grad: 51 per step, base 50 (A/B, exact)"]


def test_a_run_without_work_counts_on_one_side_pairs_none():
    names = {s.metric for s in e2e_samples(e2e_run(), with_work(BASE))}
    assert not any(n.startswith(("bytecodes:", "py_calls:", "c_calls:")) for n in names)


# --- the report -------------------------------------------------------------------------


def test_the_report_shows_the_work_per_step_and_where_it_is_done():
    run = with_work(BASE, instructions=5_000_000)
    run.executor_stat = "ExecutorRunTimer"
    lines = report.work_lines(run)
    assert lines[0] == ("work per step (counting pass: 2 steps, 1.0 s): 1,200 bytecodes | "
                        "110 Python calls | 50 C calls; outside every timed region: 200 bytecodes "
                        "(16.7%)")
    assert lines[1] == "most bytecodes per step (self): conv2d_grad 83.3%"
    assert lines[2] == "CPU instructions per step: 5,000,000 (valgrind, on AMD EPYC)"
    run = with_work({"aten::conv2d": {"bytecodes": 7}}, run_id="suite.py::test_torch")
    run.executor_stat = None
    assert "untimed (outside every op): 0 bytecodes" in report.work_lines(run)[0]
    assert report.work_lines(e2e_run()) == []


def test_a_python_hook_per_torch_module_is_caught_in_the_untimed_work():
    torch = pytest.importorskip("torch")
    from pytest_opperf.torch import profile

    def work(hooked: bool) -> WorkCounts:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(6)))
        if hooked:
            for module in model:
                module.register_forward_hook(lambda mod, args, out: None)
        x = torch.randn(8, 16)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            model(x).sum().backward()

        run = measure.Run("t.py::test_torch", "e2e", {}, CPU_HOST, "events", "ExecutorRunTimer",
                          window=Window(count_steps=2))
        with measure.measure_window(run), profile():
            for _ in range(3):
                step()
                run.step(examples=8)
        run.counting_pass(step)
        assert run.result is not None and run.result.work is not None
        return run.result.work

    plain, again, hooked = work(False), work(False), work(True)
    assert plain.stats == again.stats and not plain.varies
    assert set(plain.stats) == {OUTSIDE}  # no timed regions in a torch step: all untimed
    assert hooked.stats[OUTSIDE]["py_calls"] >= plain.stats[OUTSIDE]["py_calls"] + 6
    base, new = e2e_run("t.py::test_torch"), e2e_run("t.py::test_torch")
    base.work, new.work = plain, hooked
    failed = {v.metric for v in gate.evaluate(ResultSet(runs=[new]), None,
                                              ResultSet(runs=[base])).violations}
    assert {"py_calls:(outside)", "bytecodes:(outside)"} <= failed


def test_the_reference_training_counts_the_same_in_two_processes(tmp_path):
    """The suites' own counting pass, in two processes with other hash seeds (and so other set
    orders and other addresses): the same work counts, and none that varies."""
    import json
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    works = []
    for seed in ("1", "2"):
        out = tmp_path / f"r{seed}.json"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "suites/test_resnet50.py", "-q", "-p",
             "no:cacheprovider", "--opperf", "--opperf-workload=tiny", "--opperf-device=cpu",
             f"--opperf-json={out}"], cwd=root, capture_output=True, text=True,
            env={**os.environ, "PYTHONHASHSEED": seed}, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        works.append({r["id"]: r["work"] for r in json.loads(out.read_text())["runs"]})
    assert set(works[0]) == {"suites/test_resnet50.py::test_train[tiny]",
                             "suites/test_resnet50.py::test_train[tiny-no-overheads]"}
    for run, work in works[0].items():
        assert work["stats"] == works[1][run]["stats"], run
        assert not work.get("varies") and not works[1][run].get("varies")
        assert {"ExecutorRunTimer", "conv2d", "conv2d_grad", OUTSIDE} <= set(work["stats"])
    faithful = works[0]["suites/test_resnet50.py::test_train[tiny]"]["stats"]
    assert {"CreateOpTimer", "ProgramCloneTimer", "CreateLocalScopeTimer"} <= set(faithful)
