"""Table.record (regions timed outside the table's own, e.g. on other threads), Table.on_flush,
measure.active_run and Run.kernels_are_executor: the entry points pytest_opperf.torch uses."""

from __future__ import annotations

import threading

import pytest

from pytest_opperf import measure, timers
from pytest_opperf.device import CPU_HOST


def _on_thread(fn) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join()


def test_record_files_a_region_inside_the_region_open_on_the_recording_thread() -> None:
    with timers.recording() as table:
        with timers.timer("backward"):
            _on_thread(lambda: table.record("op", 0, 5000, kernel=True))
        with timers.timer("block", kernel=True):
            _on_thread(lambda: table.record("op", 0, 7000, kernel=True))
        _on_thread(lambda: table.record("op", 0, 1000, kernel=True))
    op = table["op"]
    # the first filing names the stat and gives its parent, as timers.timer would
    assert (op.parent, op.kernel, op.count, op.total_ns, op.min_ns, op.max_ns) == (
        "backward",
        True,
        2,
        6000,
        1000,
        5000,
    )
    assert (table["block/op"].parent, table["block/op"].total_ns) == ("block", 7000)
    assert table.kernel_ms() == pytest.approx((6000 + table["block"].total_ns) / 1e6)


def test_record_from_many_threads_loses_no_sample() -> None:
    with timers.recording() as table:
        threads = [
            threading.Thread(
                target=lambda: [table.record(f"op{i % 3}", 0, 2, True) for i in range(2000)]
            )
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sum(table[f"op{i}"].count for i in range(3)) == 8000
    assert sum(table[f"op{i}"].total_ns for i in range(3)) == 16000


def test_record_keeps_a_trace_event_at_its_depth() -> None:
    with timers.recording() as table:
        table.start_trace()
        with timers.timer("step"):
            table.record("op", 123, 45, kernel=True)
        events = table.stop_trace()
    assert ("op", 123, 45, 1) in events


def test_on_flush_callbacks_run_at_every_step_and_at_the_end() -> None:
    calls = []
    run = measure.Run("r", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with measure.measure_window(run):
        timers.current().on_flush(lambda: calls.append(len(calls)))
        run.step()
        run.step()
    assert len(calls) >= 3  # two steps, and the window's end


def test_active_run_is_the_innermost_open_window_on_this_thread() -> None:
    outer = measure.Run("outer", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    inner = measure.Run("inner", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    seen = []
    assert measure.active_run() is None
    with measure.measure_window(outer):
        seen.append(measure.active_run())
        with measure.measure_window(inner):
            seen.append(measure.active_run())
            _on_thread(lambda: seen.append(measure.active_run()))
        seen.append(measure.active_run())
    assert seen == [outer, inner, None, outer]
    assert measure.active_run() is None


def test_kernels_are_executor_takes_executor_time_from_the_top_level_kernels() -> None:
    run = measure.Run("r", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with measure.measure_window(run) as r:
        table = timers.current()
        r.kernels_are_executor("executor: the ops")
        table.record("op", 0, 3_000_000, kernel=True)
        table.add("data", 5_000_000)  # a top-level non-kernel stat: not executor time here
        r.step()
    result = run.result
    assert result.executor_stat is None and result.executor_ms == 3.0 and result.kernel_ms == 3.0
    assert "executor: the ops" in result.notes


def test_an_executor_stat_still_takes_precedence() -> None:
    run = measure.Run("r", "e2e", None, CPU_HOST, "events", "ExecutorRunTimer")
    with measure.measure_window(run) as r:
        r.kernels_are_executor("executor: the ops")
        timers.current().add("ExecutorRunTimer", 4_000_000)
        r.step()
    assert run.result.executor_stat == "ExecutorRunTimer" and run.result.executor_ms == 4.0
    assert "executor: the ops" not in run.result.notes
