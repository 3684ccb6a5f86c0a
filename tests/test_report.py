"""Renderers: the terminal report in the reference report's shape, gate lines, markdown, trace."""

import json
from dataclasses import replace

from pytest_opperf.comparison.verdict import Verdict, Violation
from pytest_opperf.device import CPU_HOST
from pytest_opperf.measure import op_run
from pytest_opperf.reports.report import (
    chrome_trace,
    gate_lines,
    markdown,
    op_table_lines,
    run_lines,
    terminal_lines,
    verdict_line,
)
from pytest_opperf.results import ResultSet, RunResult, StatResult


def s(name, total, count, parent="ExecutorRunTimer", kernel=True, avg=None, mx=1.0, mn=0.1, **kw):
    return StatResult(name, parent, count, total, avg if avg is not None else total / count, mn, mx,
                      kernel=kernel, **kw)


def reference_run(**kw):
    """The reference report's numbers (wall 47.83653 s, 80 batches of 32)."""
    stats = [
        s(
            "ExecutorRunTimer",
            37099.9,
            163,
            parent=None,
            kernel=False,
            avg=227.606,
            mx=526.269,
            mn=0.092,
        ),
        s("conv2d_grad", 18104.7, 4240, avg=4.269, mx=15.852, mn=2.222),
        s("conv2d", 9482.79, 4240, avg=2.236, mx=10.438, mn=0.601),
        s("Im2ColTimer", 461.405, 58880, parent="conv2d", avg=0.007, mx=2.732, mn=0.004),
        s("GemmTimer", 2343.45, 135680, parent="conv2d", avg=0.017, mx=5.965, mn=0.007),
        s("CreateOpTimer", 237.364, 44433, kernel=False, avg=0.005, mx=7.503, mn=0.001),
        s("ProgramCloneTimer", 3887.6, 162, parent=None, kernel=False),
    ]
    fields = dict(
        id="suites/test_resnet50.py::test_train[full]",
        kind="e2e",
        config={},
        device="cuda:0 (NVIDIA H200)",
        timing="events",
        wall_s=47.83653,
        examples=2560,
        batches=80,
        examples_per_sec=2560 / 47.83653,
        sec_per_batch=47.83653 / 80,
        python_share=(47.83653 - 37.0999) / 47.83653,
        stats=stats,
        counts={},
        framework_share=0.1,
        kernel_share=0.5,
        executor_stat="ExecutorRunTimer",
        executor_ms=37099.9,
    )
    fields.update(kw)
    return RunResult(**fields)


def test_run_lines_have_the_reference_shape():
    lines = run_lines(reference_run())
    assert (
        lines[0]
        == "suites/test_resnet50.py::test_train[full]  device=cuda:0 (NVIDIA H200) timing=events"
    )
    assert lines[1] == "Total examples: 2560, total time: 47.83653 sec"
    assert lines[2] == "53.51559 examples/sec, 0.59796 sec/batch"
    assert lines[3] == "unit: ms"
    assert lines[4].split() == ["name", "total", "avg", "max", "min", "count", "share"]
    rows = {line.split()[0]: line for line in lines[5:12]}
    assert rows["ExecutorRunTimer"].split() == [
        "ExecutorRunTimer",
        "37099.90",
        "227.606",
        "526.269",
        "0.092",
        "163",
    ]
    assert rows["conv2d_grad"].split()[1:] == [
        "18104.70",
        "4.269",
        "15.852",
        "2.222",
        "4240",
        "48.8%",
    ]
    assert rows["conv2d"].split()[-1] == "25.6%"
    assert lines[-1] == "Python 22.44% | framework overhead 10.00% | kernels 50.00% of wall time"


def test_nested_stats_are_indented_under_their_kernel_parent():
    lines = run_lines(reference_run())
    names = [line.split()[0] for line in lines[5:12]]
    # by total: ExecutorRunTimer, conv2d_grad, conv2d (+ its children), ProgramCloneTimer,
    # CreateOpTimer
    assert names == ["ExecutorRunTimer", "conv2d_grad", "conv2d", "GemmTimer", "Im2ColTimer",
                     "ProgramCloneTimer", "CreateOpTimer"]
    gemm = next(line for line in lines if "GemmTimer" in line)
    conv = next(line for line in lines if line.startswith("conv2d "))
    assert gemm.startswith("  GemmTimer") and not conv.startswith(" ")
    # nested and outside-executor stats have no share; framework timers inside it do
    assert gemm.split()[-1] == "135680"
    assert next(line for line in lines if "ProgramCloneTimer" in line).split()[-1] == "162"
    assert next(line for line in lines if "CreateOpTimer" in line).split()[-1] == "0.6%"


def test_sort_orders():
    by_count = [line.split()[0] for line in run_lines(reference_run(), "count")[5:12]]
    assert by_count[:2] == ["CreateOpTimer", "conv2d_grad"]  # 44433 > 4240 = 4240 (stable)
    assert by_count[3:5] == ["GemmTimer", "Im2ColTimer"]  # children follow their parent, by count
    by_name = [line.split()[0] for line in run_lines(reference_run(), "name")[5:12]]
    assert by_name == [
        "CreateOpTimer",
        "ExecutorRunTimer",
        "ProgramCloneTimer",
        "conv2d",
        "GemmTimer",
        "Im2ColTimer",
        "conv2d_grad",
    ]


def test_share_without_executor_stat_uses_top_level_sum():
    run = reference_run(stats=[s("a", 30.0, 3, parent=None), s("b", 10.0, 1, parent=None)],
                        executor_stat=None, executor_ms=40.0)
    rows = {line.split()[0]: line.split()[-1] for line in run_lines(run)[5:7]}
    assert rows == {"a": "75.0%", "b": "25.0%"}


def test_flops_column_shows_gflops():
    run = reference_run(stats=[s("conv2d", 1000.0, 10, parent=None, flops=5e12, bytes=2e9)],
                        executor_stat=None, executor_ms=1000.0)
    lines = run_lines(run)
    assert lines[4].split()[-2:] == ["GFLOP/s", "GB/s"]
    assert lines[5].split()[-2:] == ["5000", "2"]


def test_device_clock_is_said():
    run = reference_run(stats=[s("conv2d", 1.0, 1, parent=None, clock="device")])
    assert any(
        line.startswith("clock: kernel stats on the device clock") for line in run_lines(run)
    )


def violation():
    return Violation(
        "suite::t",
        "step_ms:conv2d",
        6.0,
        2.2,
        2.0,
        "conv2d median per-step time 6 ms vs 2 ms",
        "Mann-Whitney U one-sided p=1e-08",
    )


def test_gate_lines_list_every_field():
    lines = gate_lines(Verdict(violations=[violation()]))
    assert lines == [
        "FAIL suite::t step_ms:conv2d",
        "     conv2d median per-step time 6 ms vs 2 ms",
        "     value 6, limit 2.2, baseline 2; Mann-Whitney U one-sided p=1e-08",
    ]


def test_gate_lines_wrap_the_detail_to_the_width():
    lines = gate_lines(Verdict(violations=[violation()]), width=40)
    assert lines[:3] == ["FAIL suite::t step_ms:conv2d", "     conv2d median per-step time 6 ms vs",
                         "     2 ms"]
    assert all(len(line) <= 40 for line in lines)
    assert " ".join(line.strip() for line in lines[3:]) == (
        "value 6, limit 2.2, baseline 2; Mann-Whitney U one-sided p=1e-08"
    )


def test_terminal_lines_verdicts():
    rs = ResultSet(
        runs=[reference_run()], session={"device": "cpu", "timing": "host", "workload": "small"}
    )
    passed = terminal_lines(rs, Verdict(checks=4, baseline="b.json", warnings=["w1"]))
    assert passed[0] == "session: device=cpu timing=host workload=small"
    assert "gate: PASSED (4 checks; baseline b.json)" in passed
    assert "warning: w1" in passed
    failed = terminal_lines(rs, Verdict(violations=[violation()], checks=4))
    assert "gate: FAILED (1 violation(s) in 4 checks; no baseline, no thresholds)" in failed
    assert "no measured runs" in terminal_lines(ResultSet(), None)


def test_op_table():
    runs = [
        op_run(
            "ops.py::test_relu[a|b]", "relu", [0.001, 0.003, 0.002], 4, CPU_HOST, "host", flops=2e6
        )
    ]
    lines = op_table_lines(runs)
    assert lines[0] == "per-op benchmarks (device=cpu timing=host), unit: ms per call"
    assert lines[1].split() == ["run", "kind", "rounds", "median", "mean", "min", "max", "GFLOP/s"]
    assert lines[2].split() == [
        "ops.py::test_relu[a|b]",
        "op",
        "3",
        "2.0000",
        "2.0000",
        "1.0000",
        "3.0000",
        "1",
    ]


def test_markdown_verdict_first_then_tables():
    rs = ResultSet(
        runs=[
            reference_run(),
            op_run("ops.py::test_relu[a|b]", "relu", [0.001], 1, CPU_HOST, "host"),
        ]
    )
    text = markdown(rs, Verdict(violations=[violation()], checks=3))
    lines = text.splitlines()
    assert lines[0] == "## opperf"
    assert lines[2].startswith("**Gate: FAILED** (1 violation(s) in 3 checks")
    assert lines[4].startswith("| run ") and lines[4].split("|")[-2].strip() == "statistic"
    assert text.index("**Gate") < text.index("### `suites/test_resnet50.py::test_train[full]`")
    assert "| &nbsp;&nbsp;GemmTimer " in text
    assert "ops.py::test_relu[a\\|b]" in text  # a pipe in an id must not split the cell
    for table_line in (line for line in lines if line.startswith("|")):
        assert table_line.endswith("|")
    assert markdown(ResultSet(), Verdict()).splitlines()[2].startswith("**Gate: PASSED**")


def trace_run(events, dur_ns, run_id="t"):
    run = reference_run(id=run_id, stats=[s("ExecutorRunTimer", 1.0, 1, parent=None, kernel=False),
                                          s("conv2d", 1.0, 1)])
    run.trace = {"step": 2, "dur_ns": dur_ns, "events": events}
    return run


def test_chrome_trace_events():
    events = [("conv2d", 2000, 5000, 1), ("ExecutorRunTimer", 1000, 8000, 0), ("early", -5, 100, 0)]
    doc = json.loads(
        json.dumps(chrome_trace(ResultSet(runs=[trace_run(events, 10_000), reference_run()])))
    )
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in complete] == [
        ("step 2", 0.0, 10.0), ("ExecutorRunTimer", 1.0, 8.0), ("conv2d", 2.0, 5.0)]
    assert [e["cat"] for e in complete] == ["step", "framework", "kernel"]
    assert {e["pid"] for e in doc["traceEvents"]} == {1}  # the run without a trace is left out
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert meta[0]["args"] == {"name": "t"}


def test_the_terminal_op_table_groups_runs_under_their_test():
    runs = [
        op_run(
            f"suites/test_ops.py::test_op[conv2d-N8xC64x16x16-k3s1p{i}-o64]",
            "conv2d",
            [0.001],
            4,
            CPU_HOST,
            "host",
        )
        for i in range(3)
    ]
    runs.insert(
        1,
        op_run(
            "suites/test_executor.py::test_program_clone",
            "clone",
            [0.002],
            1,
            CPU_HOST,
            "host",
            kind="overhead",
        ),
    )
    lines = op_table_lines(runs, width=100)
    assert lines[1].split() == ["run", "rounds", "median", "mean", "min", "max"]
    assert [line.split()[0] for line in lines[2:]] == [
        "suites/test_ops.py::test_op[*]",
        "conv2d-N8xC64x16x16-k3s1p0-o64",
        "conv2d-N8xC64x16x16-k3s1p1-o64",
        "conv2d-N8xC64x16x16-k3s1p2-o64",
        "suites/test_executor.py::*",
        "test_program_clone",
    ]
    assert lines[2] == "suites/test_ops.py::test_op[*] (op)" and lines[6].endswith("(overhead)")
    narrow = op_table_lines(runs, width=60)
    assert max(map(len, narrow[1:])) <= 60  # the heading is wrapped with the other text
    assert "  conv2d-N8xC64x16x16-k3s1p0-o64" in narrow  # on its own line, its values on the next


def stepped_run(**kw):
    """Three steps of 100 ms: the first all outside the executor, the others 10 ms outside it and
    60 ms in the kernel conv2d (of which GemmTimer 40 ms: not counted again)."""
    stats = [
        s("ExecutorRunTimer", 180.0, 3, parent=None, kernel=False, samples_ms=[0.0, 90.0, 90.0]),
        s("conv2d", 120.0, 2, samples_ms=[0.0, 60.0, 60.0]),
        s("GemmTimer", 80.0, 2, parent="conv2d", samples_ms=[0.0, 40.0, 40.0]),
    ]
    fields = dict(
        wall_s=0.3,
        examples=24,
        batches=3,
        step_ms=[100.0, 100.0, 100.0],
        step_examples=[8, 8, 8],
        stats=stats,
        python_share=0.4,
        framework_share=0.2,
        kernel_share=0.4,
    )
    return reference_run(**{**fields, **kw})


def test_the_steady_state_shares_follow_the_whole_window_ones():
    lines = run_lines(stepped_run())
    shares = lines.index("Python 40.00% | framework overhead 20.00% | kernels 40.00% of wall time")
    assert (
        lines[shares + 1]
        == "steady state: Python 10.00% | framework overhead 30.00% | kernels 60.00% "
        "(medians per step)"
    )
    assert lines[3] == "steady state: 80.00000 examples/sec over the 2 steps after warm-up"


def test_the_share_outside_timers_is_untimed_without_an_executor_stat():
    conv, gemm = stepped_run().stats[1:]
    conv = replace(conv, parent=None)  # executor time: the top-level stats
    lines = run_lines(stepped_run(executor_stat=None, stats=[conv, gemm]))
    assert "untimed 40.00% | framework overhead 20.00% | kernels 40.00% of wall time" in lines
    assert (
        "steady state: untimed 40.00% | framework overhead 0.00% | kernels 60.00% "
        "(medians per step)" in lines
    )
    assert not any("Python" in line for line in lines)


def test_the_terminal_section_fits_the_width():
    many = [f"suites/test_ops.py::test_op[relu-N8xC{i}x16x16]" for i in range(160)]
    verdict = Verdict(
        checks=4,
        baseline="ci/baselines/cpu-small.json",
        thresholds="ci/thresholds.toml",
        notes=[f"160 run(s) have no baseline run: {', '.join(many)}"],
        violations=[violation()],
    )
    ops = [
        op_run(i, "relu", [0.001, 0.002], 4, CPU_HOST, "host", flops=2e6, bytes=4e6)
        for i in many[:3]
    ]
    rs = ResultSet(
        runs=[stepped_run(), *ops], session={"device": "cpu", "timing": "host", "workload": "small"}
    )
    for width in (100, 80):
        lines = terminal_lines(rs, verdict, width=width) + gate_lines(verdict, width)
        lines.remove(verdict_line(verdict))  # never wrapped: tools grep it
        assert max(map(len, lines)) <= width, [line for line in lines if len(line) > width]
    assert (
        sum("relu-N8xC" in line for line in terminal_lines(rs, verdict, width=100)) > 3
    )  # the note wraps


def test_the_gate_lists_at_most_five_runs_in_a_note():
    from pytest_opperf.comparison.gate import evaluate

    runs = [op_run(f"t.py::test_op[{i}]", "relu", [0.001], 1, CPU_HOST, "host") for i in range(160)]
    notes = evaluate(ResultSet(runs=runs), baseline=ResultSet(runs=runs[:1])).notes
    assert (
        "159 run(s) have no baseline run: t.py::test_op[1], t.py::test_op[2], t.py::test_op[3], "
        "t.py::test_op[4], t.py::test_op[5] ... and 154 more" in notes
    )


def test_show_escapes_ids_and_names_with_newlines_and_escape_codes(tmp_path, monkeypatch):
    """A per-op run id or stat name holding a newline (which crashed ``show`` with an
    IndexError) or escape codes is one escaped cell: it forges no line."""
    import io

    from pytest_opperf.cli import main
    from pytest_opperf.results import write_results
    from tests.history_helpers import op_run as bench_run
    from tests.opperf_factories import e2e_run

    forged = "\ngate: PASSED (1 checks)\n\x1b[2K"
    e2e = e2e_run(stats={f"conv{forged}": [1.0, 1.0], "relu": [1.0, 1.0]}, step_ms=[5.0, 5.0])
    ops = [bench_run(f"suite.py::test_op[a{forged}]", [1.0] * 5),
           bench_run(f"suite.py::test{forged}", [1.0] * 5, stat=f"s{forged}")]
    path = tmp_path / "r.json"
    write_results(path, ResultSet(runs=[e2e, *ops]))
    for columns in ("300", "80", "40"):
        monkeypatch.setenv("COLUMNS", columns)
        out, err = io.StringIO(), io.StringIO()
        assert main(["show", str(path)], out, err) == 0, err.getvalue()
        lines = out.getvalue().splitlines()
        assert not any(line.startswith("gate: PASSED") for line in lines)
        assert "\x1b" not in out.getvalue()
        assert sum("\\ngate: PASSED (1 checks)\\n\\x1b[2K" in line for line in lines) >= 3
        assert lines[-1] == "gate: not run"


def test_compare_escapes_the_run_ids_its_notes_name(tmp_path):
    import io

    from pytest_opperf.cli import main
    from pytest_opperf.results import write_results
    from tests.opperf_factories import e2e_run

    forged = "\ngate: PASSED (1 checks)\n\x1b[2K"
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    write_results(base, ResultSet(runs=[e2e_run(), e2e_run(run_id=f"gone{forged}")]))
    write_results(new, ResultSet(runs=[e2e_run(), e2e_run(run_id=f"added{forged}")]))
    out = io.StringIO()
    main(["compare", str(base), str(new)], out, io.StringIO())
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    (verdict,) = [line for line in lines if line.startswith("gate: ")]
    assert "; baseline " in verdict  # the real verdict line, not the forged one
    assert any("added\\ngate: PASSED" in line for line in lines)


def test_at_80_columns_the_work_columns_go_before_names_break():
    """``show | less`` (no terminal: 80 columns): GFLOP/s and GB/s are left out, and said to
    be, before a stat name gets a line of its own."""
    names = ["ExecutorRunTimer", "CreateLocalScopeTimer", "conv2d_grad", "elementwise_add_grad"]
    stats = [s("ExecutorRunTimer", 5088.61, 22, parent=None, kernel=False, mx=551.916)]
    stats += [s(n, 1594.34 - i, 530, flops=1.07e11, bytes=2.7e9, mx=13.636)
              for i, n in enumerate(names[1:])]
    run = replace(reference_run(), stats=stats)
    lines = run_lines(run, width=80)
    assert all(len(line) <= 80 for line in lines), lines
    header = next(line for line in lines if line.startswith("name"))
    assert "GFLOP/s" in header and "GB/s" not in header
    assert "(GB/s left out to fit 80 columns)" in lines
    assert not [line for line in lines if line.strip() in names]  # no name on a line of its own
    wide = run_lines(run, width=120)
    assert "GB/s" in next(line for line in wide if line.startswith("name"))
    assert not any("left out" in line for line in wide)


def test_a_suites_section_is_wrapped_to_the_width_and_its_table_kept():
    """A section of pytest_opperf_report_sections (the torch peer table) fits COLUMNS: its
    110-column note wraps; its table rows, which fit, keep their spacing."""
    note = ("ms: sum over the shapes both ran of the median time per call; op types torch has no "
            "single op for are left out here")
    table_rows = ["op type    shapes    reference ms    torch ms",
                  "conv2d          3           1.250       0.998"]
    lines = terminal_lines(ResultSet(runs=[reference_run()]), None,
                           sections=[("peers", [*table_rows, note])], width=100)
    assert len(note) > 100 and all(len(line) <= 100 for line in lines)
    start = lines.index("--- peers ---")
    assert lines[start + 1:start + 3] == table_rows
    assert " ".join(part.strip() for part in lines[start + 3:start + 5]) == note
