"""The controller and its pieces: the protocol, paired e2e samples, side arguments, step hand-over.

The controller is driven against fake sides (small scripts speaking the
protocol with fixed numbers), so that what it does with the answers holds by
construction: the order of blocks, the sequential stop, the reruns.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_opperf import measure
from pytest_opperf.ab import controller as controller_module
from pytest_opperf.ab import decide, family, paired, processes, signedrank, tuning
from pytest_opperf.ab.controller import Controller, rerun_budget
from pytest_opperf.ab.pairs import e2e_samples
from pytest_opperf.ab.processes import SideFailure, SideSpec
from pytest_opperf.ab.protocol import Channel, SideGone, SideTimeout
from pytest_opperf.ab.side import SidePlugin, current_cpu
from pytest_opperf.ab.tuning import MIN_CHANGE_GENERATIONS, RERUN_SHARE, SMALL_SESSION_S
from pytest_opperf.core.port import Window
from pytest_opperf.device import CPU_HOST
from pytest_opperf.results import RunResult, StatResult


def test_channel_sends_lines_and_names_timeouts_and_eof():
    a, b = socket.socketpair()
    left, right = Channel(a), Channel(b)
    left.send({"cmd": "go", "n": 1})
    left.send({"cmd": "finish"})
    assert right.receive(1) == {"cmd": "go", "n": 1} and right.receive(1) == {"cmd": "finish"}
    with pytest.raises(SideTimeout, match="no message in 0.05 s"):
        right.receive(0.05)
    left.close()
    with pytest.raises(SideGone):
        right.receive(1)


def _run(step_ms, relu, executor, counts, examples=4):
    stats = [
        StatResult(
            "ExecutorRunTimer", None, len(step_ms), sum(executor), 0, 0, 0, samples_ms=executor
        ),
        StatResult("relu", "ExecutorRunTimer", len(step_ms), sum(relu), 0, 0, 0, samples_ms=relu),
    ]
    return RunResult(
        "t.py::test_e2e",
        "e2e",
        {},
        "cpu",
        "host",
        sum(step_ms) / 1e3,
        examples * len(step_ms),
        len(step_ms),
        0.0,
        0.0,
        0.0,
        stats,
        counts,
        executor_stat="ExecutorRunTimer",
        step_ms=step_ms,
        step_examples=[examples] * len(step_ms),
    )


@pytest.mark.parametrize(("base_relu", "head_relu", "timed"), [
    ([50.0, 0.0, 0.0, 0.0], [40.0, 0.0, 0.0, 0.0], False),  # startup only: no steady time
    ([50.0, 0.0, 0.0, 0.0], [40.0, 0.0, 3.0, 0.0], True),  # one side does work in a step
])
def test_a_stat_without_steady_time_on_both_sides_has_no_time_metric(base_relu, head_relu, timed):
    step, executor = [100.0, 10.0, 10.0, 10.0], [60.0, 8.0, 8.0, 8.0]
    base = _run(step, base_relu, executor, {"relu": 0})
    head = _run(step, head_relu, executor, {"relu": 0})
    got = {s.metric for s in e2e_samples(base, head)}
    assert ("step_ms:relu" in got) is timed
    assert {"step_ms:ExecutorRunTimer", "examples_per_sec", "count:relu"} <= got


def test_e2e_samples_pair_steps_after_warm_up_and_counts_exactly():
    base = _run(
        [100.0, 10.0, 10.0, 10.0], [50.0, 4.0, 4.0, 4.0], [60.0, 8.0, 8.0, 8.0], {"relu": 1}
    )
    head = _run([90.0, 20.0, 10.0], [40.0, 8.0, 4.0], [50.0, 16.0, 9.0], {"relu": 2, "extra": 1})
    got = {s.metric: s for s in e2e_samples(base, head)}
    assert set(got) == {
        "step_ms:ExecutorRunTimer",
        "step_ms:relu",
        "examples_per_sec",
        "python_share",
        "count:relu",
        "count:extra",
    }
    assert (got["step_ms:relu"].base, got["step_ms:relu"].head) == (
        [4.0, 4.0],
        [8.0, 4.0],
    )  # 3 steps, warm-up out
    assert got["examples_per_sec"].base == [400.0, 400.0] and got["examples_per_sec"].head == [
        200.0,
        400.0,
    ]
    assert got["python_share"].base == pytest.approx([0.2, 0.2]) and got[
        "python_share"
    ].head == pytest.approx([0.2, 0.1])
    assert (got["count:relu"].base, got["count:relu"].head) == ([1.0], [2.0])
    assert (got["count:extra"].base, got["count:extra"].head, got["count:extra"].kind) == (
        [0.0],
        [1.0],
        "count",
    )


def test_the_e2e_pairs_keep_the_base_steps_for_the_step_share_floor(tmp_path):
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, {})
    step, executor = [100.0, 10.0, 12.0, 14.0], [60.0, 8.0, 8.0, 8.0]
    base = _run(step, [50.0, 4.0, 4.0, 4.0], executor, {"relu": 1})
    head = _run([90.0, 99.0, 99.0, 99.0], [40.0, 4.0, 4.0, 4.0], executor, {"relu": 1})
    c._e2e_pairs([base], [head])
    relu = c.samples.paired[paired.MetricKey("t.py::test_e2e", "step_ms:relu")]
    assert relu.step_ms == 12.0  # the base's steady steps (warm-up out), not the head's
    c._e2e_pairs([_run([100.0, 20.0, 20.0], [50.0, 4.0, 4.0], executor[:3], {"relu": 1})],
                 [head])
    assert relu.step_ms == 14.0  # the median of 10, 12, 14, 20 and 20: every visit's
    # the run's executor stat is its step, a headline metric (examples/sec's level)
    step = paired.MetricKey("t.py::test_e2e", "step_ms:ExecutorRunTimer")
    assert c.samples.step_keys == {step}
    assert c.samples.family().level(0.05, step) == c.samples.family().level(
        0.05, paired.MetricKey("t.py::test_e2e", "examples_per_sec"))


def test_side_arguments_leave_out_the_controllers_options():
    args = [
        "suites/",
        "--opperf",
        "--opperf-compare",
        "HEAD~1",
        "--opperf-json=x.json",
        "-k",
        "conv",
        "--opperf-workload",
        "tiny",
        "--benchmark-quiet",
        "--opperf-compare-python=/p",
    ]
    from pytest_opperf.glue.child import strip_opperf_args
    from pytest_opperf.glue.options import VALUED_OPTIONS

    assert strip_opperf_args(args, VALUED_OPTIONS) == ["suites/", "-k", "conv",
                                                       "--benchmark-quiet"]


def test_a_step_hand_over_is_left_out_of_the_window(monkeypatch):
    now = [0]
    monkeypatch.setattr(measure, "perf_counter_ns", lambda: now[0])
    waits = []

    def handover(run):  # the other side's step: 1 s on the clock
        waits.append(run.batches)
        now[0] += 1_000_000_000

    run = measure.Run("r", "e2e", {}, CPU_HOST, "host", "ExecutorRunTimer",
                      window=Window(after_step=handover))
    from pytest_opperf import timers

    with timers.recording() as table:
        run._open(table)
        for _ in range(3):
            now[0] += 10_000_000  # 10 ms of the side's own work per step
            run.step(examples=2)
        result = run._close()
    assert waits == [1, 2, 3]
    assert result.step_ms == [10.0, 10.0, 10.0]
    assert result.wall_s == pytest.approx(0.03) and result.examples_per_sec == pytest.approx(200.0)


FAKE_SIDE = """
import json, math, os, random, sys
from pytest_opperf.ab.protocol import Channel
from pytest_opperf.measure import op_run
from pytest_opperf.device import CPU_HOST
from pytest_opperf.results import ResultSet

side = os.environ["OPPERF_AB_SIDE"]
conf = json.loads(os.environ["FAKE"])
log = open(conf["log"], "a")
processes = conf["log"] + "." + side  # this side's processes so far
started = int(open(processes).read()) if os.path.exists(processes) else 0
open(processes, "w").write(str(started + 1))
process_factor = conf.get("first_process", {}).get(side, 1.0) if started == 0 else 1.0
rng = random.Random(f"{side}-{started}")
channel = Channel.from_fd(int(os.environ["OPPERF_AB_FD"]))
extensions = {"extensions": conf["extensions"][side]} if "extensions" in conf else {}
arena = {"arena": conf["arena"][side]} if "arena" in conf else {"arena": ""}
channel.send({"ev": "collected", "ids": conf["ids"][side], "errors": [], **extensions, **arena})
blocks = 0
while True:
    msg = channel.receive()
    if msg["cmd"] == "finish":
        sys.exit(0)
    nodeid = msg["nodeid"]
    if conf.get("die") == side:
        os._exit(5)
    # the controller starts a test on one side, waits for it, then on the other: count the starts
    starts = conf["log"] + ".starts"
    n = int(open(starts).read()) if os.path.exists(starts) else 0
    open(starts, "w").write(str(n + 1))
    factor = conf.get("second_slower", 1.0) if n % 2 else 1.0
    channel.send({"ev": "bench", "run": nodeid, "stat": "op"})
    runs = []
    while True:
        msg = channel.receive()
        if msg["cmd"] == "calibrate":
            channel.send({"ev": "calibrated", "iterations": 4, "round_s": 0.004})
        elif msg["cmd"] == "block":
            blocks += 1
            log.write(f"{side} {msg['rounds']} {msg['iterations']} {os.getpid()} {n % 2} "
                      f"{msg.get('cpu')} {msg.get('place')}\\n")
            log.flush()
            # a fixed pattern, the same on both sides unless "phase" gives the head another
            phase = conf.get("phase", {}).get(side, 7)
            noise = 1 + conf.get("noise", 0.01) * ((blocks * phase) % 5 - 2)
            if "gauss" in conf:  # log-normal noise, drawn from a seed per side and process
                noise *= math.exp(rng.gauss(0.0, conf["gauss"]))
            ms = conf.get("ms_of", {}).get(nodeid, conf["ms"])  # a test's own, or every test's
            per_call_s = ms[side] * factor * process_factor * noise / 1e3
            # the CPU the block ended on: the one it was pinned to, else one drawn per block
            ran_on = msg.get("cpu", conf.get("ran_on", [0])[blocks % len(conf.get("ran_on", [0]))])
            log.write(f"ran {ran_on}\\n")
            log.flush()
            broken = ({"arena": "kept"} if side == conf.get("breaks") and "place" in msg
                      and blocks >= 3 else {})
            channel.send({"ev": "block", "per_call_s": [per_call_s] * msg["rounds"],
                          "cpu": ran_on, **broken})
        else:
            break
    runs.append(op_run(nodeid, "op", [0.001], 1, CPU_HOST, "host"))
    channel.send({"ev": "done", "nodeid": nodeid, "failed": False, "reports": [],
                  "results": ResultSet(runs=runs).to_dict()})
"""


def controller(
    tmp_path: Path,
    ms: dict[str, float],
    ids: dict[str, list[str]],
    budget_s: float = 600.0,
    clock=None,
    on_outcome=None,
    undecided: str = "inconclusive",
    cpus=None,
    beta: float = 0.01,
    settle: bool = True,
    min_pairs: int = 10,
    **extra,
) -> Controller:
    script = tmp_path / "fake_side.py"
    script.write_text(FAKE_SIDE)
    conf = {"ms": ms, "ids": ids, "log": str(tmp_path / "blocks.log"), **extra}
    env = {**__import__("os").environ, "FAKE": json.dumps(conf)}
    specs = [SideSpec(name, [sys.executable, str(script)], tmp_path, env, tmp_path / f"{name}.log")
             for name in ("base", "head")]
    optional = {"clock": clock, "on_outcome": on_outcome, "cpus": cpus}
    return Controller(
        specs[0],
        specs[1],
        paired.CompareSettings(budget_s=budget_s, beta=beta, min_pairs=min_pairs),
        "REV x",
        "head",
        timeout_s=30,
        seed=1,
        warmup_s=0.0,  # one warm-up pair
        undecided=undecided,
        settle=settle,
        **{k: v for k, v in optional.items() if v is not None},
    )


def test_the_controller_pairs_blocks_in_random_order_stops_once_decided_and_confirms(tmp_path):
    ids = {"base": ["t::a", "t::gone"], "head": ["t::a", "t::new"]}
    c = controller(tmp_path, {"base": 1.0, "head": 2.0}, ids)
    try:
        plan, errors = c.start()
        assert (plan.common, plan.added, plan.removed) == (["t::a"], ["t::new"], ["t::gone"])
        assert errors == {"base": [], "head": []}
        result = c.run()
    finally:
        c.close()
    decisions = {(d.key.run, d.key.metric): d for d in result.decisions}
    assert list(decisions) == [
        ("t::a", "call_ms:op")
    ]  # the added test runs on the head alone, unpaired
    d = decisions["t::a", "call_ms:op"]
    assert d.verdict == "regressed" and d.estimate == pytest.approx(2.0, rel=0.02)
    # decided at the first look of each run of the test; a regression is confirmed by a second
    # run, in the other start order, and a third (MIN_CHANGE_GENERATIONS process pairs)
    assert MIN_CHANGE_GENERATIONS == 3 and d.pairs == 3 * MIN_PAIRS
    lines = [line for line in (tmp_path / "blocks.log").read_text().split("\n")[:-1]
             if not line.startswith("ran ")]
    assert len(lines) == 3 * (2 + 2 * MIN_PAIRS) + 1 + MIN_PAIRS  # + the added test, alone
    # 4 iterations of a 1 ms round: 2 rounds make the 8 ms block; the same block on both sides
    assert {" ".join(line.split()[1:3]) for line in lines} == {"2 4"}
    paired_lines = [
        line.split()[0] for line in lines[2 : 2 + 2 * MIN_PAIRS]
    ]  # after one warm-up pair
    orders = [tuple(paired_lines[i:i + 2]) for i in range(0, len(paired_lines), 2)]
    assert set(orders) == {
        ("base", "head"),
        ("head", "base"),
    }  # randomised per pair, both orders seen
    assert (
        result.added == ["t::new"]
        and result.removed == ["t::gone"]
        and result.pairs == 3 * MIN_PAIRS
    )


@pytest.mark.parametrize(("cpus", "ran_on", "pinned"), [
    ([3, 5, 7], [5, 3, 7, None], True),
    ([], [5, 3], False),  # one usable CPU (or no affinity here): nothing is pinned
    ([3, 5], [9, None], False),  # a CPU that is not usable, or none reported: not pinned
])
def test_the_second_block_of_a_pair_runs_on_the_cpu_the_first_ended_on(tmp_path, cpus, ran_on,
                                                                          pinned):
    ids = {"base": ["t::a", "t::b"], "head": ["t::a", "t::b"]}
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, ids, cpus=cpus, noise=0.05,
                   ran_on=ran_on)
    run_session(c)
    text = (tmp_path / "blocks.log").read_text().splitlines()
    blocks = [(a.split(), b.split()[1]) for a, b in zip(text[0::2], text[1::2], strict=True)]
    assert len(blocks) > 4 * MIN_PAIRS and len(blocks) % 2 == 0
    pairs = [blocks[i : i + 2] for i in range(0, len(blocks), 2)]  # warm-up pairs too
    assert all({first[0][0], second[0][0]} == {"base", "head"} for first, second in pairs)
    assert all(first[0][5] == "None" for first, _ in pairs)  # the first: where it is put
    for (_, first_ran_on), (second, second_ran_on) in pairs:
        if pinned and first_ran_on != "None":
            assert second[5] == first_ran_on == second_ran_on  # the second on the first's CPU
        else:
            assert second[5] == "None"
    assert pinned == any(second[5] != "None" for _, (second, _) in pairs)
    # both blocks of a pair on arrays placed by one seed, a new one for each pair
    assert all(first[0][6] == second[0][6] != "None" for first, second in pairs)
    assert len({first[0][6] for first, _ in pairs}) == len(pairs)


def test_where_a_side_cannot_share_memory_no_block_is_placed_and_a_note_says_why(tmp_path):
    ids = {"base": ["t::a"], "head": ["t::a"]}
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, ids, noise=0.05,
                   arena={"base": "", "head": "the shared memory cannot be mapped: no"})
    result = run_session(c)
    lines = [line.split() for line in (tmp_path / "blocks.log").read_text().splitlines()
             if not line.startswith("ran ")]
    assert lines and all(line[6] == "None" for line in lines)
    assert any("own memory" in n and "head: the shared memory cannot be mapped: no" in n
               and "base:" not in n for n in result.notes)


def test_once_a_side_stops_placing_arrays_no_later_pair_is_placed(tmp_path):
    ids = {"base": ["t::a", "t::b"], "head": ["t::a", "t::b"]}
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, ids, noise=0.05, breaks="head")
    result = run_session(c)
    places = [line.split()[6] for line in (tmp_path / "blocks.log").read_text().splitlines()
              if not line.startswith("ran ")]
    first = places.index("None")
    assert first >= 3 and "None" not in places[:first]
    assert set(places[first:]) == {"None"}  # for the rest of the session, both sides
    assert any("the head side stopped placing arrays (kept)" in n for n in result.notes)


def test_the_usable_cpus_are_those_of_the_affinity_when_there_is_a_choice(monkeypatch):
    monkeypatch.setattr(processes.os, "sched_getaffinity", lambda pid: {5, 2, 7},
                        raising=False)
    assert processes.usable_cpus() == [2, 5, 7]
    monkeypatch.setattr(processes.os, "sched_getaffinity", lambda pid: {4},
                        raising=False)
    assert processes.usable_cpus() == []  # one CPU: nothing to choose, nothing to pin
    monkeypatch.delattr(processes.os, "sched_getaffinity", raising=False)
    assert processes.usable_cpus() == []


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_side_keeps_only_its_calling_thread_on_the_cpu_a_block_names():
    class Failed(Exception):
        pass

    class FakeSide:
        def fail(self, text):
            raise Failed(text)

    side = FakeSide()
    before = os.sched_getaffinity(0)
    cpu = max(before)
    started, stop = threading.Event(), threading.Event()
    other = threading.Thread(target=lambda: (started.set(), stop.wait(30)))
    other.start()
    started.wait(30)
    try:
        with SidePlugin.on_cpu(side, cpu, "t::a"):
            assert os.sched_getaffinity(0) == {cpu}
            assert current_cpu() == cpu  # what the block's answer names
            assert os.sched_getaffinity(other.native_id) == before  # pool threads stay free
            # a pool made on first use, in the block: its thread inherits the one CPU...
            pool = ThreadPoolExecutor(1)
            worker_tid = pool.submit(threading.get_native_id).result()
            assert os.sched_getaffinity(worker_tid) == {cpu}
        assert os.sched_getaffinity(0) == before
        assert os.sched_getaffinity(worker_tid) == before  # ...and gets the CPUs back after it
        pool.shutdown()
        with pytest.raises(ZeroDivisionError), SidePlugin.on_cpu(side, cpu, "t::a"):
            1 / 0  # noqa: B018 - a benchmark that raises
        assert os.sched_getaffinity(0) == before
        with SidePlugin.on_cpu(side, None, "t::a"):
            assert os.sched_getaffinity(0) == before
        for bad in (-1, 1 << 20, "x"):
            with pytest.raises(Failed, match=r"cannot run the blocks of t::a on CPU"), \
                    SidePlugin.on_cpu(side, bad, "t::a"):
                pass
            assert os.sched_getaffinity(0) == before
    finally:
        stop.set()
        other.join()
        os.sched_setaffinity(0, before)


def test_a_side_that_dies_is_named_with_its_status(tmp_path):
    c = controller(
        tmp_path, {"base": 1.0, "head": 1.0}, {"base": ["t::a"], "head": ["t::a"]}, die="base"
    )
    try:
        c.start()
        processes = [side.process for side in c.sides.running.values()]
        with pytest.raises(
            SideFailure, match=r"^the base side exited with status 5 while running t::a$"
        ):
            c.run()
    finally:
        c.close(grace_s=1)
    assert len(processes) == 2 and all(p.poll() is not None for p in processes)


def run_session(c: Controller) -> paired.CompareResult:
    """Start, run and always close a controller."""
    try:
        c.start()
        return c.run()
    finally:
        c.close()


def test_a_change_not_confirmed_by_a_second_run_is_undecided(tmp_path):
    c = controller(
        tmp_path, {"base": 1.0, "head": 2.0}, {"base": ["t::a"], "head": ["t::a"]}, budget_s=1e-6
    )
    result = run_session(c)
    (d,) = result.decisions
    assert d.verdict == "undecided" and d.pairs == MIN_PAIRS and result.budget_exhausted
    assert d.statistic.endswith(
        "; regressed, but not shown by the pairs of each start order of the sides on their own"
    )


def _blocks(tmp_path: Path) -> list[tuple[str, int, int]]:
    """(side, pid, started second) per block of the fake sides."""
    rows = [line.split() for line in (tmp_path / "blocks.log").read_text().splitlines()]
    return [(r[0], int(r[3]), int(r[4])) for r in rows if r[0] != "ran"]


@pytest.mark.parametrize("head_ms", [1.0, 1.5])
def test_the_start_order_of_the_sides_cannot_make_a_regression(tmp_path, head_ms):
    # The side a test is started on second runs it 10 % slower (as memory-bound e2e stats did
    # here in A/A, 5-9 %). With one fixed order, base then head, A/A read as "regressed". (beta
    # at the corrected level of one metric: unchanged's bound at the default, 99 %, reaches the
    # two orders' +-10 % in these exact pairs and takes two generations more; so do visits of 10
    # pairs, the fewest at the default min_pairs)
    c = controller(tmp_path, {"base": 1.0, "head": head_ms}, {"base": ["t::a"], "head": ["t::a"]},
                   second_slower=1.10, beta=0.025, min_pairs=12)
    result = run_session(c)
    (d,) = result.decisions
    assert d.verdict == ("unchanged" if head_ms == 1.0 else "regressed")
    blocks = _blocks(tmp_path)
    for side in (
        "base",
        "head",
    ):  # each side's pairs come from two processes, started second in one only
        assert len({pid for s, pid, _ in blocks if s == side}) >= 2
        assert {second for s, _, second in blocks if s == side} == {0, 1}
    # a change is confirmed by a third process pair (MIN_CHANGE_GENERATIONS)
    generations = 2 if head_ms == 1.0 else 3
    assert f"{generations} generation(s) of side processes" in result.notes[-1]


def test_a_fluke_of_one_process_does_not_make_a_small_slowdown_a_regression(tmp_path):
    # The head's first process runs 20 % slower (a fluke of that process), the others 3 %,
    # below min_slowdown (5 %). All the pairs together lean past the threshold; the pairs of the
    # other start order must show a change that counts, and theirs, 3 % with a narrow interval,
    # is ruled out: checking them for direction only would have confirmed it.
    c = controller(tmp_path, {"base": 1.0, "head": 1.03}, {"base": ["t::a"], "head": ["t::a"]},
                   first_process={"head": 1.2 / 1.03})
    result = run_session(c)
    (d,) = result.decisions
    assert d.verdict != "regressed", d
    assert len({pid for s, pid, _ in _blocks(tmp_path) if s == "head"}) >= 2



# --- the budget and the early stop, on a fake clock ---------------------------------------------


class FakeClock:
    """A clock that moves only when told to: ``tick`` per reading, ``visit_s`` per test visit
    (``on_outcome`` runs once per side and visit: half each)."""

    def __init__(self, visit_s: float, tick: float = 1e-4) -> None:
        self.now = 1000.0
        self.visit_s = visit_s
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def outcome(self, outcome) -> None:
        self.now += self.visit_s / 2


def fake_clock_controller(tmp_path, ms, visit_s, **extra) -> tuple[Controller, FakeClock]:
    clock = FakeClock(visit_s)
    ids = {"base": ["t::a"], "head": ["t::a"]}
    return controller(tmp_path, ms, ids, clock=clock, on_outcome=clock.outcome, **extra), clock


# A/A with noise too wide to decide: x takes the values +-0.18, +-0.56 and 0 in turn, symmetric
# about 0, so the interval holds 0 and reaches past c = log(1.05) at any number of pairs here.
MIN_PAIRS = 10  # a small session's visit: min_pairs, the fewest pairs that decide
AA_UNDECIDED = {"noise": 0.2, "phase": {"base": 7, "head": 3}}


@pytest.mark.parametrize(("metrics", "beta", "pairs"), [
    (1, 0.01, MIN_PAIRS), (300, 0.01, MIN_PAIRS), (300, 0.05 / 300 / 2, 14)])
def test_a_visit_past_its_share_of_the_budget_still_takes_the_pairs_an_interval_needs(
        tmp_path, monkeypatch, metrics, beta, pairs):
    # every reading of the clock is 1000 s on: each visit is past its deadline at once. With
    # 300 metrics the corrected level bounds no interval below 14 pairs; the bound of unchanged,
    # at 98 % two-sided, bounds one from 7 on, and so min_pairs (10) do, unless beta is as small
    # as the correction's level
    c, clock = fake_clock_controller(tmp_path, {"base": 1.0, "head": 1.0}, 0.0, beta=beta,
                                     **AA_UNDECIDED)
    clock.tick = 1000.0
    monkeypatch.setattr(c, "_family", lambda: family.Family(0, metrics))
    run_session(c)
    blocks = _blocks(tmp_path)
    assert len(blocks) == 2 * (1 + pairs)  # one warm-up pair, one generation
    assert signedrank.pairs_for_interval(0.05 / 300) == 14


def test_the_reruns_budget_is_a_share_of_the_first_pass_and_the_budget_a_ceiling():
    # up to SMALL_SESSION_S from the start at least, RERUN_SHARE of the first pass past that
    assert rerun_budget(0.0) == SMALL_SESSION_S
    assert rerun_budget(10.0) == SMALL_SESSION_S - 10.0
    assert rerun_budget(1000.0) == RERUN_SHARE * 1000.0


@pytest.mark.parametrize(("budget_s", "left_s"), [(1e6, RERUN_SHARE * 100), (110.0, 10.0)])
def test_the_session_budget_follows_the_first_pass(tmp_path, budget_s, left_s):
    # the first pass takes 100 s on the fake clock: the reruns get RERUN_SHARE of that, or what
    # is left of [compare] budget_s
    c, _ = fake_clock_controller(tmp_path, {"base": 1.0, "head": 1.0}, 100.0,
                                 budget_s=budget_s, **AA_UNDECIDED)
    result = run_session(c)
    assert f"first pass 100 s, then a budget of {left_s:.0f} s for running tests again" in (
        result.notes)


@pytest.mark.parametrize(("budget_s", "generations"), [(30.0, 1), (1e6, 2)])
def test_an_aa_metric_that_cannot_end_regressed_is_not_run_again(tmp_path, budget_s, generations):
    # A visit takes 20 s. With budget_s 30 the session has room for one generation at most, so it
    # would be the last; its pairs (the other start order) cannot make the metric regressed, since
    # the first order's interval reaches below c/2: no generation is started. With time left,
    # the metric, undecided on the pairs of one start order, gets the other order (past the
    # reruns' 10 s, as a change to confirm does), and then no more.
    c, _ = fake_clock_controller(tmp_path, {"base": 1.0, "head": 1.0}, 20.0,
                                 budget_s=budget_s, **AA_UNDECIDED)
    result = run_session(c)
    (d,) = result.decisions
    assert d.verdict == "undecided" and result.budget_exhausted
    assert "stopped early" in result.notes[0]
    assert f"{generations} generation(s)" in result.notes[-1]
    assert len({pid for s, pid, _ in _blocks(tmp_path) if s == "head"}) == generations


def test_undecided_metrics_that_fail_the_gate_are_run_again_in_the_last_generation(tmp_path):
    c, _ = fake_clock_controller(tmp_path, {"base": 1.0, "head": 1.0}, 20.0,
                                 undecided="fail", **AA_UNDECIDED)
    result = run_session(c)
    assert int(result.notes[-1].split(" generation(s)")[0].rsplit(" ", 1)[1]) >= 2
    assert not any("stopped early" in note for note in result.notes)


@pytest.mark.parametrize(("visit_s", "rerun_s"), [(20.0, None), (0.0, None), (20.0, 0.0)])
def test_the_early_stop_never_drops_a_regression(tmp_path, monkeypatch, visit_s, rerun_s):
    # the head 2x slower: regressed in the first start order, so the last generations (visit_s
    # 20) or plain ones (visit_s 0) run it again, and it is confirmed by three; with no
    # budget for reruns at all (rerun_s 0) too: the last generation may run up to budget_s
    if rerun_s is not None:
        monkeypatch.setattr(tuning, "SMALL_SESSION_S", rerun_s)
        monkeypatch.setattr(tuning, "RERUN_SHARE", 0.0)
    c, _ = fake_clock_controller(tmp_path, {"base": 1.0, "head": 2.0}, visit_s)
    result = run_session(c)
    (d,) = result.decisions
    assert d.verdict == "regressed" and "3 generation(s)" in result.notes[-1]


@pytest.mark.parametrize("undecided", ["fail", "inconclusive"])
def test_past_the_budget_a_confirmed_regression_ends_the_session(tmp_path, monkeypatch,
                                                                  undecided):
    # no budget for reruns: past it at once. t::b is 4x slower on the head and is confirmed by
    # three generations; t::a is A/A and too noisy to decide, which with "fail" would keep it
    # running up to the ceiling (16 generations): once t::b is regressed, the gate fails
    # whatever t::a ends as, and the session ends
    monkeypatch.setattr(tuning, "SMALL_SESSION_S", 0.0)
    monkeypatch.setattr(tuning, "RERUN_SHARE", 0.0)
    clock = FakeClock(0.0)
    ids = {"base": ["t::a", "t::b"], "head": ["t::a", "t::b"]}
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, ids, clock=clock,
                   on_outcome=clock.outcome, undecided=undecided,
                   ms_of={"t::b": {"base": 1.0, "head": 4.0}}, **AA_UNDECIDED)
    result = run_session(c)
    verdicts = {d.key.run: d.verdict for d in result.decisions}
    assert verdicts == {"t::a": "undecided", "t::b": "regressed"}
    assert "3 generation(s)" in result.notes[-1]
    assert any(n.startswith("stopped once the gate's verdict was settled: 1 metric(s) "
                            "regressed, 1 left undecided") for n in result.notes)


@pytest.mark.parametrize("past_budget", [True, False])
def test_a_confirmed_regression_ends_no_session_with_settle_off_or_within_the_budget(
        tmp_path, monkeypatch, past_budget):
    # bisect's sessions (settle off): each step decides the metrics it chases, whatever else
    # regressed; and within the reruns' budget (visits cost nothing on the fake clock) every
    # undecided test still runs
    if past_budget:
        monkeypatch.setattr(tuning, "SMALL_SESSION_S", 0.0)
        monkeypatch.setattr(tuning, "RERUN_SHARE", 0.0)
    clock = FakeClock(0.0)
    ids = {"base": ["t::a", "t::b"], "head": ["t::a", "t::b"]}
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, ids, clock=clock,
                   on_outcome=clock.outcome, undecided="fail",
                   ms_of={"t::b": {"base": 1.0, "head": 4.0}}, settle=not past_budget,
                   **AA_UNDECIDED)
    result = run_session(c)
    assert not any("settled" in n for n in result.notes)
    assert c.sides.generation + 1 > 3


def test_with_time_left_an_undecided_aa_metric_is_run_again(tmp_path):
    # visits cost nothing on the fake clock: the next generation is not the last, so the A/A
    # metric (undecided after the first pass, as above) gets pairs of the other start order
    c, _ = fake_clock_controller(tmp_path, {"base": 1.0, "head": 1.0}, 0.0, **AA_UNDECIDED)
    result = run_session(c)
    assert c.sides.generation >= 1 and result.decisions[0].verdict != "regressed"
    assert len({pid for s, pid, _ in _blocks(tmp_path) if s == "head"}) == c.sides.generation + 1


def _key_with_pairs(c: Controller, kind: str, xs: list[float], first: str,
                    metric: str = "call_ms:op", run: str = "t::a") -> paired.MetricKey:
    """Pairs with ``x`` values ``xs`` (log ratios for time and rate, differences for the share),
    measured with ``first`` started first."""
    key = paired.MetricKey(run, metric)
    p = c.samples.of(key, kind)  # type: ignore[arg-type]
    for x in xs:
        if kind == "time":
            p.add(1.0, math.exp(x))
        elif kind == "rate":
            p.add(math.exp(x), 1.0)
        else:
            p.add(0.2, 0.2 + x)
        c.samples.firsts.setdefault(key, []).append(first)
        c.samples.generations.setdefault(key, []).append(0)
    return key


@pytest.mark.parametrize(("kind", "metric"), [("time", "call_ms:op"), ("rate", "examples_per_sec"),
                                              ("share", "python_share")])
def test_may_regress_reads_the_lower_end_of_the_final_orders_interval(tmp_path, kind, metric):
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, {"base": [], "head": []})
    c_ = 0.01 if kind == "share" else math.log(1.05)
    # 20 pairs of "base first" around +2c: the lower end is above no change
    slow = _key_with_pairs(c, kind, [2 * c_ + 0.1 * c_ * ((i * 7) % 5 - 2) for i in range(20)],
                           "base", metric)
    assert decide.may_regress(c.samples, slow, "base", c.settings)
    # the pairs of the other order are not those: none, so it cannot be confirmed
    assert not decide.may_regress(c.samples, slow, "head", c.settings)
    # around c/4: below c/2, but shown above no change, which is all the start order rule asks
    # of an order (the size of the change is ruled on all the pairs)
    _clear(c)
    small = _key_with_pairs(c, kind, [c_ / 4 + 0.01 * c_ * ((i * 7) % 5 - 2) for i in range(20)],
                            "base", metric)
    assert decide.may_regress(c.samples, small, "base", c.settings)
    # around 0: the lower end is below no change, whatever the other order's pairs do
    _clear(c)
    flat = _key_with_pairs(c, kind, [0.1 * c_ * ((i * 7) % 5 - 2) for i in range(20)], "base",
                           metric)
    assert not decide.may_regress(c.samples, flat, "base", c.settings)


def _clear(c: Controller) -> None:
    for table in (c.samples.paired, c.samples.firsts, c.samples.generations):
        table.clear()


def test_may_regress_needs_enough_pairs_and_keeps_counts(tmp_path):
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, {"base": [], "head": []})
    few = _key_with_pairs(c, "time", [1.0] * (paired.CompareSettings().min_pairs - 1), "base")
    # below min_pairs: never a verdict of its own
    assert not decide.may_regress(c.samples, few, "base", c.settings)
    count = _key_with_pairs(c, "count", [], "base", "count:op")
    assert decide.may_regress(c.samples, count, "head", c.settings)


def test_past_the_budget_an_aa_metric_gets_the_other_start_order_and_no_more(tmp_path,
                                                                            monkeypatch):
    # no budget for reruns: only what the gate waits for may go on; the A/A metric, undecided on
    # the pairs of one start order, gets the other (it may end regressed on them)
    monkeypatch.setattr(tuning, "SMALL_SESSION_S", 0.0)
    monkeypatch.setattr(tuning, "RERUN_SHARE", 0.0)
    c, _ = fake_clock_controller(tmp_path, {"base": 1.0, "head": 1.0}, 0.0, **AA_UNDECIDED)
    result = run_session(c)
    (d,) = result.decisions
    assert d.verdict == "undecided" and 0.97 < d.estimate < 1.0247
    assert "2 generation(s)" in result.notes[-1] and result.budget_exhausted


@pytest.mark.parametrize(("small_session_s", "visit_s", "gauss", "generations"),
                         [(60.0, 0.0, 0.1, None), (0.0, 0.0, 0.3, 2), (60.0, 40.0, 0.3, 2)])
def test_a_small_selections_undecided_metric_runs_again_for_small_session_s(
        tmp_path, monkeypatch, small_session_s, visit_s, gauss, generations):
    # 6 % slower in noise too wide to decide at first, and no share of the first pass for
    # reruns: until the session has run SMALL_SESSION_S it runs again, and is decided (a slowdown
    # at the threshold needs many pairs). With none, it gets only the other start order, as
    # every metric undecided on the pairs of one does, and then no more. SMALL_SESSION_S counts
    # from the session's start: after a first pass of 40 s, a 40 s generation does not fit
    monkeypatch.setattr(tuning, "RERUN_SHARE", 0.0)
    monkeypatch.setattr(tuning, "SMALL_SESSION_S", small_session_s)
    c, _ = fake_clock_controller(tmp_path, {"base": 1.0, "head": 1.06}, visit_s, noise=0.0,
                                 gauss=gauss, undecided="warn")
    result = run_session(c)
    (d,) = result.decisions
    ran = int(result.notes[-1].split(" generation(s)")[0].rsplit(" ", 1)[1])
    if generations is None:
        assert d.verdict == "regressed" and ran > 2, (ran, d.estimate, d.low, d.high, d.pairs)
    else:
        assert d.verdict == "undecided" and d.estimate > 1.0247, d
        assert ran == generations and result.budget_exhausted


def _three_tests(c: Controller, one_order: str) -> set[str]:
    """Three tests, each with one metric undecided on pairs symmetric about 0: ``t::flat``
    (estimate 0), ``t::leans`` (past ``c/2``), ``t::changed`` (2x slower); all three with the
    pairs of both start orders but ``one_order``, which has those of the base's only."""
    tests = ["t::flat", "t::leans", "t::changed"]
    c._plan = controller_module.Plan(tests, [], [], tests)
    wide = [0.5 * ((i * 7) % 5 - 2) for i in range(20)]
    shifts = {"t::flat": 0.0, "t::leans": 0.04, "t::changed": None}
    for test, shift in shifts.items():
        values = [math.log(2.0)] * 20 if shift is None else [x + shift for x in wide]
        if test == one_order:
            _key_with_pairs(c, "time", values, "base", run=test)
        else:
            _key_with_pairs(c, "time", values[:10], "base", run=test)
            _key_with_pairs(c, "time", values[10:], "head", run=test)
    return set(tests)


def test_the_gate_waits_for_changes_and_one_start_order_and_the_budget_for_the_rest(tmp_path):
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, {"base": [], "head": []})
    common = _three_tests(c, "t::changed")  # a change seen in one start order: to confirm
    assert c._wanted(common) == ({"t::changed": 1}, {"t::flat": 1, "t::leans": 1})
    # a visit of 5 s each, the sides' starts free: room in the budget for all three, for the
    # gate's test and one more (the most metrics per second: equal, the plan's order), or only
    # for the gate's test, which has the ceiling's room
    c._visit_s = {"t::flat": 5.0, "t::leans": 5.0, "t::changed": 5.0}
    c.sides.spawn_s = 0.0
    ceiling = c.clock() + 100.0
    for budget_s, tests in ((16.0, ["t::changed", "t::flat", "t::leans"]),
                            (11.0, ["t::changed", "t::flat"]), (1.0, ["t::changed"])):
        c._reruns_end = c.clock() + budget_s
        assert c._generation(common, ceiling)[:2] == (tests, False)
    # no room for the gate's test either: the last generation, which runs only what may still
    # end regressed on the other start order's pairs
    c._reruns_end = c.clock() + 16.0
    assert c._generation(common, c.clock() + 1.0) == ([], True, c._reruns_end)
    # the flat metric undecided on the pairs of one start order only: the gate waits for its
    # other order too (the visit that gave them may have stopped at the level of a smaller
    # family than the session's), unless those are final: it cannot end regressed
    _clear(c)
    common = _three_tests(c, "t::flat")
    assert c._wanted(common)[0] == {"t::flat": 1, "t::changed": 1}
    assert "t::flat" not in c._wanted(common, final="base")[0]


@pytest.mark.parametrize(("spawn_s", "run"), [(3.0, ["t::changed", "t::flat"]),
                                              (0.0, ["t::changed"])])
def test_past_the_budget_a_generation_takes_cheap_undecided_tests_along(tmp_path, spawn_s, run):
    # past the reruns' budget only the change to confirm (10 s a visit) runs again; the sides
    # start anyway, and the flat undecided test of 2 s fits in a start's 3 s, the one of 5 s not
    c = controller(tmp_path, {"base": 1.0, "head": 1.0}, {"base": [], "head": []},
                   clock=FakeClock(0.0))
    common = _three_tests(c, "t::changed")
    c._visit_s = {"t::flat": 2.0, "t::leans": 5.0, "t::changed": 10.0}
    c.sides.spawn_s = spawn_s
    c._reruns_end = c.clock()
    assert c._generation(common, c.clock() + 30.0)[0] == run


def test_an_inconclusive_metric_gets_the_generations_a_verdict_needs_unless_warn(tmp_path,
                                                                              monkeypatch):
    # 10 % slower in noise too wide to decide at first, and no budget for reruns:
    # with "warn" the session stops with the metric undecided past the threshold (it only warns);
    # by default it may end inconclusive, which fails the gate, so it runs again while its
    # estimate is past the threshold, until it is decided, or no longer past it, or the
    # generations run out
    monkeypatch.setattr(tuning, "SMALL_SESSION_S", 0.0)
    monkeypatch.setattr(tuning, "RERUN_SHARE", 0.0)
    generations, decisions = {}, {}
    for mode in ("warn", "inconclusive"):
        (tmp_path / mode).mkdir()
        c, _ = fake_clock_controller(tmp_path / mode, {"base": 1.0, "head": 1.10}, 0.0,
                                     noise=0.0, gauss=0.6, undecided=mode)
        result = run_session(c)
        (decisions[mode],) = result.decisions
        generations[mode] = int(result.notes[-1].split(" generation(s)")[0].rsplit(" ", 1)[1])
    assert decisions["warn"].verdict == "undecided" and decisions["warn"].past_threshold
    assert generations["inconclusive"] > generations["warn"]
    d = decisions["inconclusive"]
    assert not d.past_threshold or generations["inconclusive"] == 1 + tuning.MAX_RERUNS, d
    assert d.verdict == "regressed" or d.pairs > decisions["warn"].pairs
