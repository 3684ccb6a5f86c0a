"""Bad results and thresholds files: one line, exit 4, never a hang or a traceback; files written
as users expect."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import threading
from dataclasses import replace

import pytest

from pytest_opperf import cli
from pytest_opperf.comparison.thresholds import ThresholdsError, load_thresholds
from pytest_opperf.comparison.verdict import Verdict
from pytest_opperf.records.atomic import write_text_atomic
from pytest_opperf.records.reader import read_results
from pytest_opperf.reports import report
from pytest_opperf.results import ResultsError, dumps_results, write_results
from pytest_opperf.workcounts.workcount import WorkCounts
from tests.opperf_factories import e2e_run, results
from tests.opperf_suites import assert_one_line_usage_error, e2e, inner_run_env  # noqa: F401
from tests.results_schema import assert_valid, problems

pytest_plugins = ["pytester"]


def good_doc() -> dict:
    return json.loads(dumps_results(results(e2e_run("a", stats={"conv2d": [1.0, 2.0]}))))


def edit(doc: dict, path: str, value) -> dict:
    """``doc`` with the value at a dotted path (list indices as numbers) replaced."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = doc
    for key in parents:
        node = node[key]
    node[last] = value
    return doc


def write_doc(tmp_path, text: str):
    path = tmp_path / "r.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"schema": "opperf/1", "runs": [], "x": NaN}',
            "not valid JSON: NaN is not a number JSON allows at line 1 column 41",
        ),
        (
            '{"schema": "opperf/1", "runs": [], "x": -Infinity}',
            "-Infinity is not a number JSON allows at line 1 column 41",
        ),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (
            '{"schema": "opperf/1", "runs": [], "x": ' + "9" * 5000 + "}",
            "not valid JSON: an integer of 5000 digits at line 1 column 41",
        ),
    ],
)
def test_unparsable_documents_are_one_line(tmp_path, text, message):
    with pytest.raises(ResultsError) as info:
        read_results(write_doc(tmp_path, text))
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("path, value, message", [
    ("runs.0.wall_s", "BIG", "wall_s is missing or not a finite number"),
    ("runs.0.batches", 10 ** 400, "batches must be below 2**63, got 100000...000 (401 digits)"),
    ("runs.0.examples", -5, "examples must be a whole number >= 0, got -5"),
    ("runs.0.examples", 2.5, "examples must be a whole number >= 0, got 2.5"),
    ("runs.0.python_share", 14.12, "python_share is a share and must be in [0, 1], got 14.12"),
    ("runs.0.step_examples", [32, -1], "step_examples is not a list of finite numbers >= 0"),
    ("runs.0.step_ms", [1.0, "BIG"], "step_ms is not a list of finite numbers >= 0"),
    ("runs.0.counts", {"conv2d": -1}, "counts is not an object of integers >= 0"),
    ("runs.0.stats.0.count", -2, "stats[0] ('conv2d').count must be an integer >= 0, got -2"),
    ("runs.0.stats.0.total_ms", -3.0, "total_ms must not be negative, got -3.0"),
    ("runs.0.stats.0.samples_ms", [1.0, -1.0], "samples_ms is not a list of finite numbers >= 0"),
    ("runs.0.stats.0.parent", "conv2d", "stat parents form a cycle: 'conv2d' -> 'conv2d'"),
    ("gate", {"violations": 5}, "gate.violations is not a list of objects"),
    ("gate", {"warnings": 5}, "gate.warnings is not a list of strings"),
    ("gate", {"checks": "many"}, "gate.checks is not an integer >= 0"),
    ("gate", {"violations": [{"value": "x"}]}, "gate.violations[0].value is not a number"),
])
def test_invalid_values_are_rejected_naming_the_field(tmp_path, path, value, message):
    doc = edit(good_doc(), path, value)
    text = json.dumps(doc).replace('"BIG"', "1e999")  # a float literal that parses to inf
    with pytest.raises(ResultsError) as info:
        read_results(write_doc(tmp_path, text))
    assert "malformed results file" in str(info.value) and message in str(info.value), str(
        info.value
    )


def test_duplicate_run_ids_and_stat_names_are_rejected(tmp_path):
    doc = good_doc()
    doc["runs"].append(dict(doc["runs"][0]))
    with pytest.raises(ResultsError, match="run 'a' appears twice"):
        read_results(write_doc(tmp_path, json.dumps(doc)))
    doc = good_doc()
    doc["runs"][0]["stats"].append(dict(doc["runs"][0]["stats"][0]))
    with pytest.raises(ResultsError, match="stat 'conv2d' appears twice"):
        read_results(write_doc(tmp_path, json.dumps(doc)))


def test_a_cycle_of_stat_parents_is_rejected_once_on_read_and_show_does_not_hang(tmp_path):
    doc = good_doc()
    doc["runs"][0]["stats"] = [{**doc["runs"][0]["stats"][0], "name": name, "parent": parent}
                               for name, parent in (("x", "z"), ("y", "x"), ("z", "y"))]
    # a RunResult refuses such stats: only a file can hold them
    path = write_doc(tmp_path, json.dumps(doc))
    with pytest.raises(ResultsError, match="stat parents form a cycle: 'x' -> 'z' -> 'y' -> 'x'"):
        read_results(path)
    err = io.StringIO()
    assert cli.main(["show", str(path)], out=io.StringIO(), err=err) == 4
    assert cli.main(["compare", str(path), str(path), "--markdown", str(tmp_path / "m.md")],
                    out=io.StringIO(), err=io.StringIO()) == 4
    assert err.getvalue().count("\n") == 1 and "cycle" in err.getvalue()


def test_deeply_nested_thresholds_are_one_line(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ThresholdsError, match="nested too deeply"):
        load_thresholds(path)


# --- what sits at the path ---------------------------------------------------------------


def test_broken_and_looping_links_and_fifos_are_errors_not_missing_files(tmp_path):
    broken, loop, fifo = tmp_path / "broken.json", tmp_path / "loop.json", tmp_path / "fifo.json"
    broken.symlink_to(tmp_path / "gone.json")
    loop.symlink_to(loop)
    os.mkfifo(fifo)
    for path, message in (
        (broken, "is a broken symbolic link (to"),
        (loop, "Too many levels of symbolic links"),
        (fifo, "is not a regular file (a FIFO, device or socket)"),
    ):
        with pytest.raises(ResultsError) as info:
            read_results(path)  # a FIFO must not block
        assert message in str(info.value)
        with pytest.raises(ThresholdsError):
            load_thresholds(path)


@pytest.mark.parametrize("kind", ["broken", "fifo"])
def test_a_baseline_directory_with_a_broken_link_or_fifo_is_exit_4(pytester, kind):
    (pytester.path / "baselines").mkdir()
    target = pytester.path / "baselines" / "cpu-small.json"
    if kind == "broken":
        target.symlink_to(pytester.path / "nowhere.json")
    else:
        os.mkfifo(target)
    pytester.makepyfile(test_suite=e2e(steps=2))
    result = pytester.runpytest("--opperf", "--opperf-baseline=baselines")
    assert_one_line_usage_error(result, "--opperf-baseline baselines", "cpu-small.json")


def test_writing_through_a_symlink_keeps_the_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_writing_to_a_fifo_writes_into_it_and_leaves_it_a_fifo(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text_atomic(fifo, "hello")
    reader.join(10)
    assert got == ["hello"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_temp_files_of_killed_writers_are_cleaned_by_the_next_save(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    stale = tmp_path / f".base.json.{pid}.0123abcd.tmp"
    stale.write_text("x" * 1000)
    other = tmp_path / ".other.json.1.0123abcd.tmp"  # another file's temp: not ours to remove
    other.write_text("x")
    write_results(tmp_path / "base.json", results(e2e_run("a")))
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.1.0123abcd.tmp", "base.json"]


# --- what reaches the screen ----------------------------------------------------------------


FORGED = "x.py::t\n**Gate: PASSED**\x1b[32m <img src=x>"


def test_run_ids_with_newlines_ansi_and_html_are_escaped_in_show_and_markdown(tmp_path):
    run = e2e_run(FORGED)
    doc = results(run)
    doc.gate = Verdict(notes=[f"note about {FORGED}"]).to_dict()
    path = write_doc(tmp_path, dumps_results(doc))
    out = io.StringIO()
    assert cli.main(["show", str(path)], out=out, err=io.StringIO()) == 0
    text = out.getvalue()
    assert "\x1b" not in text and "\n**Gate" not in text
    assert "x.py::t\\n**Gate: PASSED**\\x1b[32m <img src=x>" in text
    back = read_results(path)
    md = report.markdown(back, Verdict.from_dict(back.gate), "total")
    assert "\x1b" not in md and "\n**Gate: PASSED**" not in md.split("\n", 3)[3]
    # a code span: shown as it is, no HTML
    heading = "### `x.py::t\\n**Gate: PASSED**\\x1b[32m <img src=x>`"
    assert md.count("<img") == 1 and heading in md.splitlines()
    assert "- note about x.py::t\\n**Gate: PASSED**\\x1b[32m &lt;img src=x&gt;" in md.splitlines()


# --- what the timers could not record --------------------------------------------------------


def test_regions_on_other_threads_are_counted_not_recorded():
    from pytest_opperf import timers

    with timers.recording() as table:
        before = timers.other_thread_regions().get("backward", 0)
        worker = threading.Thread(target=lambda: timers.timer("backward").__enter__())
        worker.start()
        worker.join()
        with timers.timer("forward"):
            pass
    assert list(table) == ["forward"]
    assert timers.other_thread_regions()["backward"] - before == 1


def test_an_exit_out_of_order_is_counted_and_does_not_reparent_later_stats():
    from pytest_opperf import timers

    with timers.recording() as table:
        outer, inner = timers.timer("a"), timers.timer("b")
        outer.__enter__()
        inner.__enter__()
        outer.__exit__(None, None, None)  # a closes while b is still open inside it
        with timers.timer("c"):
            pass
        inner.__exit__(None, None, None)
        with timers.timer("d"):
            pass
    assert (table.misnested, table.first_misnested) == (
        2,
        "'a' closed while 'b' was still open inside it",
    )
    assert (table["c"].parent, table["d"].parent) == (None, None)  # not the closed 'a' or 'b'


def test_chrome_trace_gives_nested_kernel_regions_the_kernel_category():
    run = e2e_run(
        "a", stats={"ExecutorRunTimer": [3.0], "conv2d": [2.0], "conv2d/GemmTimer": [1.0]}
    )
    run.stats = [replace(run.stats[0], kernel=False), *run.stats[1:]]
    run.trace = {
        "step": 1,
        "dur_ns": 4000,
        "events": [
            ("ExecutorRunTimer", 0, 3000, 0),
            ("conv2d", 100, 2000, 1),
            ("GemmTimer", 200, 1000, 2),
        ],
    }
    events = [
        e
        for e in report.chrome_trace(results(run))["traceEvents"]
        if e.get("cat") not in (None, "step")
    ]
    assert {e["name"]: e["cat"] for e in events} == {
        "ExecutorRunTimer": "framework",
        "conv2d": "kernel",
        "GemmTimer": "kernel",
    }


# --- keys given twice, unknown keys, numbers out of range -----------------------------------


def doc_with_work() -> dict:
    run = e2e_run("a", stats={"conv2d": [1.0, 2.0]})
    run.work = WorkCounts({"conv2d": {"bytecodes": 50, "py_calls": 4}}, 3, 0.5,
                          {"python": "3.11.7"}, [], 1000, "cpu")
    doc = results(run)
    doc.gate = Verdict().to_dict()
    return json.loads(dumps_results(doc))


def twice(text: str, member: str) -> str:
    """``text`` with the first ``member`` (``"key": value``) given a second time just after it,
    the second one on a line of its own."""
    assert member in text, member
    return text.replace(member, f"{member},\n{member}", 1)


@pytest.mark.parametrize("member, key, where, line", [
    ('"passed": true', "passed", "gate", 3),  # the gate's verdict: the last one must not win
    ('"total_ms": 3.0', "total_ms", "runs[0].stats[0]", 4),
    ('"bytecodes": 50', "bytecodes", "runs[0].work.stats.conv2d", 4),
    ('"schema": "opperf/1"', "schema", "the top level", 2),
])
def test_a_key_given_twice_is_refused_naming_the_key_and_its_line(tmp_path, member, key, where,
                                                                   line):
    text = twice(dumps_results_text(), member)
    path = write_doc(tmp_path, text)
    with pytest.raises(ResultsError) as info:
        read_results(path)
    message = str(info.value)
    assert f"the key {key!r} appears twice in {where} at line {line} column" in message, message
    assert "\n" not in message
    for command in (["show", str(path)], ["compare", str(path), str(path)]):
        err = io.StringIO()
        assert cli.main(command, out=io.StringIO(), err=err) == 4
        assert err.getvalue().count("\n") == 1 and f"{key!r} appears twice" in err.getvalue()


def dumps_results_text() -> str:
    """A document with work and a gate: the top-level members on line 1, the gate on line 2, the
    runs on line 3."""
    return json.dumps(doc_with_work()).replace(', "runs": [', ',\n"runs": [', 1).replace(
        ', "gate": ', ',\n"gate": ', 1)


def test_a_duplicate_passed_in_a_baseline_is_exit_4_before_tests_run(pytester):
    marker = pytester.path / "ran"
    pytester.makepyfile(f"def test_x(): open({str(marker)!r}, 'w').close()")
    text = json.dumps(doc_with_work())
    (pytester.path / "base.json").write_text(twice(text, '"passed": true'))
    result = pytester.runpytest("--opperf", "--opperf-baseline=base.json")
    assert_one_line_usage_error(result, "--opperf-baseline base.json",
                                "the key 'passed' appears twice in gate at line 2")
    assert not marker.exists()


def test_unknown_keys_in_open_objects_are_read_and_ignored(tmp_path):
    doc = doc_with_work()
    run = doc["runs"][0]
    doc["future"] = {"x": 1}
    run["future"] = [1, 2]
    run["stats"][0]["future"] = "x"
    run["work"]["future"] = {"y": 2}
    run["work"]["stats"]["conv2d"]["future_counter"] = 7
    run["work"]["stats"]["(outside)"] = {"future_counter": 3}
    doc["gate"]["future"] = True
    assert_valid(doc)  # the schema agrees: its objects are open
    back = read_results(write_doc(tmp_path, json.dumps(doc)))
    plain = read_results(write_doc(tmp_path, json.dumps(doc_with_work())))
    assert back.runs[0].work == plain.runs[0].work
    assert back.runs[0].stats == plain.runs[0].stats and back.gate == doc["gate"]


BIG = 10 ** 400


@pytest.mark.parametrize("path, value, message", [
    ("runs.0.work.steps", BIG, "run 'a': work: steps must be below 2**63, got 100000...000 (401 "
                               "digits)"),
    ("runs.0.work.stats.conv2d.bytecodes", BIG, "work: stats['conv2d']['bytecodes'] must be "
                                                "below 2**63"),
    ("runs.0.work.instructions", 2 ** 63, "work: instructions must be below 2**63, got "
                                          "9223372036854775808"),
    ("runs.0.work.pass_s", 1e13, "work: pass_s must be at most 1e+12 s, got 10000000000000.0"),
    ("runs.0.stats.0.count", BIG, "stats[0] ('conv2d').count must be below 2**63"),
    ("runs.0.stats.0.samples_ms", [1.0, 2e12], "samples_ms[1] must be at most 1e+12 ms, got "
                                               "2000000000000.0"),
    ("runs.0.counts", {"conv2d": BIG}, "counts['conv2d'] must be below 2**63"),
    ("runs.0.examples_per_sec", 1e31, "examples_per_sec must be within +-1e30, got 1e+31"),
])
def test_numbers_out_of_range_are_refused_naming_the_field_and_value(tmp_path, path, value,
                                                                     message):
    doc = edit(doc_with_work(), path, value)
    assert problems(doc), "the schema states the bound too"
    with pytest.raises(ResultsError) as info:
        read_results(write_doc(tmp_path, json.dumps(doc)))
    assert "malformed results file" in str(info.value) and message in str(info.value), str(
        info.value)
    assert "\n" not in str(info.value)


def test_a_400_digit_work_count_in_a_baseline_is_exit_4_not_an_internal_error(pytester):
    marker = pytester.path / "ran"
    pytester.makepyfile(f"def test_x(): open({str(marker)!r}, 'w').close()")
    doc = edit(doc_with_work(), "runs.0.work.stats.conv2d.bytecodes", BIG)
    (pytester.path / "base.json").write_text(json.dumps(doc))
    result = pytester.runpytest("--opperf", "--opperf-baseline=base.json")
    assert_one_line_usage_error(result, "--opperf-baseline base.json",
                                "work: stats['conv2d']['bytecodes'] must be below 2**63, got "
                                "100000...000 (401 digits)")
    assert not marker.exists()


@pytest.mark.parametrize("path, value, shown", [
    ("runs.0.work.stats.conv2d.bytecodes", BIG, "work: stats['conv2d']['bytecodes'] must be "
                                                "below 2**63, got 100000...000 (401 digits)"),
    ("runs.0.wall_s", "NAN", "NaN is not a number JSON allows at line 1 column"),
])
def test_compare_and_show_of_a_file_out_of_range_are_exit_4_without_a_traceback(tmp_path, path,
                                                                                value, shown):
    good = write_doc(tmp_path, json.dumps(doc_with_work()))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(edit(doc_with_work(), path, value)).replace('"NAN"', "NaN"))
    for command in (["compare", str(bad), str(good)], ["compare", str(good), str(bad)],
                    ["show", str(bad)]):
        done = subprocess.run([sys.executable, "-m", "pytest_opperf", *command],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 4, done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
        assert done.stderr.count("\n") == 1 and shown in done.stderr, done.stderr
