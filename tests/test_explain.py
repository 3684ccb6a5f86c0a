"""Why it got slower: the per-function diff, its classes, the reports, the gate JSON, the comment,
the differential profile and the changed lines, on the reference framework's training step."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from pytest_opperf import measure
from pytest_opperf.ab import render
from pytest_opperf.ab.paired import CompareResult, Decision
from pytest_opperf.bisect.core import Culprit, Estimate, Outcome
from pytest_opperf.bisect.repo import BisectCommit
from pytest_opperf.bisect.runner import explain_culprits
from pytest_opperf.comparison.gate import add_compare, evaluate
from pytest_opperf.comparison.metrics import MetricKey
from pytest_opperf.comparison.verdict import Verdict
from pytest_opperf.core.port import Window
from pytest_opperf.device import CPU_HOST
from pytest_opperf.explain import diff
from pytest_opperf.explain.changes import Changes, function_lines, parse_hunks
from pytest_opperf.explain.profile import BASE_LABEL, profile_class
from pytest_opperf.explain.session import (
    explain_ab,
    explain_compare,
    profile_files,
    rerun_command,
    rerun_options,
)
from pytest_opperf.reports.comment import render_comment
from pytest_opperf.reports.report import gate_lines
from pytest_opperf.reports.report import markdown as report_markdown
from pytest_opperf.results import ResultSet, RunResult
from pytest_opperf.workcounts.functions import FunctionCounts
from pytest_opperf.workcounts.workcount import WorkCounts
from tests.ab_suites import git
from tests.pprof_read import net_bytecodes, read_profile

ROOT = Path(__file__).resolve().parent.parent
BATCH_NORM = "reference_framework/ops/batch_norm.py"
NORMALISE_LINE = 81  # where reference_framework's batch_norm helper _normalise starts
LOOP_AFTER = "    count = n * s\n"
LOOP = "    for _ in range(200):  # the head's added work\n        count = n * s\n"


def _training_step() -> Any:
    from reference_framework.benchmark import WORKLOADS, run_benchmark

    result = run_benchmark(WORKLOADS["tiny"].replace(device="CPU", iterations=2))
    assert result.extra_step is not None
    return result.extra_step


def _counted(step: Any, run_id: str = "suites/test_resnet50.py::test_train[tiny]") -> RunResult:
    run = measure.Run(run_id, "e2e", {}, CPU_HOST, "events", "ExecutorRunTimer",
                      window=Window(count_steps=2, count_root=str(ROOT)))
    with measure.measure_window(run):
        run.step(examples=1)
    run.counting_pass(step)
    assert run.result is not None and run.result.work is not None, run.result
    return run.result


@pytest.fixture(scope="module")
def sides() -> Iterator[tuple[RunResult, RunResult, RunResult]]:
    """Base, an A/A base again, and a head whose batch_norm helper ``_normalise`` runs a loop
    more: the module's source compiled with the loop, under its own file name."""
    from reference_framework.ops import batch_norm

    step = _training_step()
    base, again = _counted(step), _counted(step)
    lines = (ROOT / BATCH_NORM).read_text().splitlines(keepends=True)
    first, last = function_lines("".join(lines), NORMALISE_LINE, "_normalise")
    helper = "".join(lines[first - 1:last])
    assert LOOP_AFTER in helper
    saved = batch_norm._normalise
    # the helper alone, at its own lines of its own file
    exec(compile("\n" * (first - 1) + helper.replace(LOOP_AFTER, LOOP, 1), batch_norm.__file__,
                 "exec"), batch_norm.__dict__)
    try:
        head = _counted(step)
    finally:
        batch_norm._normalise = saved
    yield base, again, head


def _decision(run: str, metric: str, verdict: str = "regressed", kind: str = "time",
              inconclusive: bool = False) -> Decision:
    return Decision(MetricKey(run, metric), kind, verdict, 1.0, 1.3, 1.3, 1.2, 1.4, 20, "test",
                    1.05, inconclusive)


def _result(base: RunResult, head: RunResult, decisions: list[Decision]) -> CompareResult:
    result = CompareResult("REV abc1234", "working tree", decisions)
    explain_compare(result, {head.id: (base, head)},
                    command=lambda test: rerun_command(test, "abc1234", ["--opperf-device=cpu"]))
    return result


def test_more_work_in_one_helper_names_it_first_with_its_path_line_and_delta(sides, tmp_path):
    base, _, head = sides
    run = head.id
    result = _result(base, head, [_decision(run, "step_ms:batch_norm"),
                                  _decision(run, "examples_per_sec", kind="rate"),
                                  _decision(run, "step_ms:conv2d", "unchanged")])
    e = result.explain[MetricKey(run, "step_ms:batch_norm")]
    assert e.cls == diff.MORE
    first = e.functions[0]
    line = NORMALISE_LINE
    assert (first.name, first.where) == ("_normalise", f"{BATCH_NORM}:{line}")
    assert first.delta("bytecodes") > 1000 and first.text().startswith("+")
    assert f"in _normalise ({BATCH_NORM}:{line})" in first.text()
    # the whole step's metric is explained by the same function, first
    assert result.explain[MetricKey(run, "examples_per_sec")].functions[0].name == "_normalise"
    assert MetricKey(run, "step_ms:conv2d") not in result.explain  # unchanged: none
    # the terminal report, the markdown, the gate JSON and the comment name it first
    lines = render.terminal_lines(result, 120)
    at = lines.index("why it got slower (work counts per step, head - base):")
    assert "_normalise" in lines[at + 3] and f"{BATCH_NORM}:{line}" in lines[at + 3]
    assert any("rerun: python -m pytest" in x and "--opperf-compare=abc1234" in x for x in lines)
    assert f"_normalise ({BATCH_NORM}:{line})" in render.markdown(result)
    verdict = Verdict()
    add_compare(verdict, result)
    gate = json.loads(json.dumps(verdict.to_dict()))
    explained = {v["metric"]: v["explain"] for v in gate["violations"]}
    assert explained["step_ms:batch_norm"]["functions"][0]["name"] == "_normalise"
    decisions = CompareResult.from_dict(json.loads(json.dumps(result.to_dict()))).explain
    assert decisions == result.explain  # the gate JSON's compare reads back
    comment = render_comment(ResultSet(runs=[head]), verdict, result)
    row = next(x for x in comment.splitlines() if "step_ms:batch_norm" in x).replace("\\_", "_")
    assert "more work" in row and f"_normalise ({BATCH_NORM}:{line})" in row
    assert row.count(" in ") <= 4  # at most three functions per metric (and the message's)


def test_the_differential_profile_reads_back_and_its_largest_sample_is_the_helper(sides,
                                                                                   tmp_path):
    base, _, head = sides
    result = CompareResult("REV abc1234", "working tree", [_decision(head.id,
                                                                     "step_ms:batch_norm")])
    explain_ab(result, {head.id: (base, head)}, tmp_path, None, "DIR x", tmp_path / "out")
    profile = read_profile(tmp_path / "out" / "explain.pb.gz")
    strings = list(profile.string_table)
    assert [strings[t.type] for t in profile.sample_type] == ["bytecodes", "py_calls", "c_calls"]
    for sample in profile.sample:
        labels = {strings[la.key]: strings[la.str] for la in sample.label}
        assert labels["run"] == head.id and "stat" in labels
        base_side = labels.get(BASE_LABEL) == "true"
        assert all(v <= 0 for v in sample.value) if base_side else all(
            v >= 0 for v in sample.value)
    by_function = net_bytecodes(profile)
    assert max(by_function, key=lambda n: by_function[n]) == "_normalise"
    assert sum(1 for v in by_function.values() if v) == 1  # every other function's delta is 0
    folded = (tmp_path / "out" / "explain-bytecodes.folded").read_text().splitlines()
    row = next(x for x in folded if ";batch_norm;_normalise (" in x)
    b, h = map(int, row.rsplit(" ", 2)[1:])
    assert h > b
    assert any("differential profile" in n for n in result.notes)


def test_an_aa_session_has_no_explanation_and_every_delta_is_0(sides):
    base, again, _ = sides
    assert diff.function_deltas(base.work, again.work) == []  # type: ignore[arg-type]
    result = _result(base, again, [_decision(again.id, "step_ms:batch_norm", "unchanged"),
                                   _decision(again.id, "examples_per_sec", "undecided", "rate")])
    assert result.explain == {}
    assert not any("why it got slower" in x for x in render.terminal_lines(result))
    assert "Why it got slower" not in render.markdown(result)


def test_the_same_work_slower_names_no_function(sides):
    base, again, _ = sides
    result = _result(base, again, [_decision(again.id, "step_ms:conv2d")])
    e = result.explain[MetricKey(again.id, "step_ms:conv2d")]
    assert (e.cls, e.functions) == (diff.SAME, [])
    assert "unchanged" in e.why and e.changed is None


def test_same_work_slower_says_which_stats_inside_got_slower_or_changed_count(sides):
    base, again, _ = sides
    run = again.id
    count = Decision(MetricKey(run, "count:relu"), "count", "regressed", 2.0, 3.0, 1.0, 1.0, 1.0,
                     12, "exact", 0.0)
    result = _result(base, again, [
        _decision(run, "examples_per_sec", kind="rate"),
        _decision(run, "step_ms:conv2d"),  # 1.3x [1.2, 1.4]
        Decision(MetricKey(run, "step_ms:conv2d_grad"), "time", "undecided", 1.0, 1.1, 1.1,
                 1.0, 1.2, 20, "test", 1.05, True),  # inconclusive
        _decision(run, "step_ms:relu", "unchanged"), count,
        _decision("other.py::test_x", "step_ms:pool2d")])
    e = result.explain[MetricKey(run, "examples_per_sec")]
    assert (e.cls, e.functions) == (diff.SAME, [])
    # counts first, then the times that regressed or are inconclusive, the largest first; not
    # the unchanged one, nor another run's
    assert e.inside == ["relu count 3 per step, base 2", "conv2d 1.300x [1.200, 1.400]",
                        "conv2d_grad 1.100x [1.000, 1.200]"]
    assert "  inside: relu count 3 per step, base 2; conv2d 1.300x [1.200, 1.400]; " in "\n".join(
        e.lines())
    # a stat's metric lists the stats nested in it only: conv2d has none here
    assert result.explain[MetricKey(run, "step_ms:conv2d")].inside == []
    again_read = diff.Explanation.from_dict(json.loads(json.dumps(e.to_dict())), "x")
    assert again_read == e
    verdict = Verdict()
    add_compare(verdict, result)
    row = next(x for x in render_comment(ResultSet(runs=[again]), verdict, result).splitlines()
               if "examples_per_sec" in x and "same work" in x)
    assert "inside: relu count 3 per step" in row


def test_less_work_slower_and_not_counted_are_said_as_such(sides):
    base, _, head = sides
    # the head as the base: the loop removed
    result = _result(head, base, [_decision(head.id, "step_ms:batch_norm"),
                                  _decision("ops.py::test_op[relu]", "call_ms:relu")])
    assert result.explain[MetricKey(head.id, "step_ms:batch_norm")].cls == diff.FEWER
    op = result.explain[MetricKey("ops.py::test_op[relu]", "call_ms:relu")]
    assert op.cls == diff.NOT_COUNTED and "no work counts" in op.why


def _repo(tmp_path: Path, extra: dict[str, str] | None = None) -> tuple[Path, str, str]:
    """A git repository holding the reference framework's batch_norm module (and ``extra``
    files), committed: its directory, the module's source and the commit."""
    repo = tmp_path / "repo"
    target = repo / BATCH_NORM
    target.parent.mkdir(parents=True)
    source = (ROOT / BATCH_NORM).read_text()
    target.write_text(source)
    for name, text in (extra or {}).items():
        (repo / name).write_text(text)
    git(repo, "init", "-q", ".")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo, source, git(repo, "rev-parse", "HEAD")


def test_the_changed_lines_name_the_hunk_the_added_work_runs_through(sides, tmp_path):
    base, _, head = sides
    repo, source, commit = _repo(tmp_path, {"other.py": "x = 1\n"})
    (repo / BATCH_NORM).write_text(source.replace(LOOP_AFTER, LOOP, 1))
    (repo / "other.py").write_text("x = 2\n")
    changes = Changes.from_git(repo, commit)
    assert set(changes.hunks) == {BATCH_NORM, "other.py"}
    result = CompareResult("REV", "head", [_decision(head.id, "step_ms:batch_norm")])
    explain_compare(result, {head.id: (base, head)}, changes)
    e = result.explain[MetricKey(head.id, "step_ms:batch_norm")]
    added = source.splitlines().index(LOOP_AFTER.rstrip("\n")) + 1
    assert e.changed == [f"{BATCH_NORM}:{added}-{added + 1}"]
    assert e.changed_text() == f"changed lines: {BATCH_NORM}:{added}-{added + 1}"
    # work added elsewhere: none of the changed lines
    elsewhere = Changes(repo, {"other.py": [(1, 1)]}, "x")
    elsewhere.apply(e)
    assert e.changed == [] and "none of the changed lines" in (e.changed_text() or "")


def test_hunks_are_read_with_the_heads_line_numbers():
    text = ("diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -3,0 +4,2 @@\n+a\n+b\n"
            "@@ -9 +11 @@\n-c\n+d\n@@ -20,2 +21,0 @@\n-e\n-f\n--- a/g.py\n+++ /dev/null\n"
            "@@ -1 +0,0 @@\n-x\n")
    assert parse_hunks(text) == {"f.py": [(4, 5), (11, 11), (21, 21)]}
    src = "import x\n\n\n@dec\ndef f():\n    return 1\n\n\nclass A:\n    def g(self):\n" \
          "        pass\n"
    assert function_lines(src, 4, "f") == (4, 6)
    assert function_lines(src, 10, "A.g") == (10, 11)
    assert function_lines(src, 1, "<module>") == (1, 11)
    assert function_lines(src, 99, "<lambda>") == (99, 99)


def test_an_explanation_reads_back_and_a_malformed_one_is_refused():
    e = diff.Explanation(diff.MORE, "x", ["conv2d"], [diff.FunctionDelta(
        "a.py", 3, "f", (1, 2, 3), (5, 2, 4), (("len", 1),))], ["a.py:3-4"], None, "cmd")
    assert diff.Explanation.from_dict(json.loads(json.dumps(e.to_dict())), "w") == e
    assert e.functions[0].text() == "+4 bytecodes, +1 C calls (+1 len) in f (a.py:3)"
    with pytest.raises(ValueError, match="w: explain: class must be one of"):
        diff.Explanation.from_dict({"class": "faster", "why": ""}, "w")
    assert math.isfinite(len(e.lines()))


@pytest.mark.skipif(shutil.which("go") is None, reason="needs Go's pprof (go tool pprof)")
def test_pprof_itself_reads_the_profile_and_puts_the_helper_on_top(sides, tmp_path):
    base, _, head = sides
    result = CompareResult("REV abc1234", "working tree", [_decision(head.id,
                                                                     "step_ms:batch_norm")])
    explain_ab(result, {head.id: (base, head)}, tmp_path, None, "DIR x", tmp_path / "out")
    top = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=bytecodes",
                          str(tmp_path / "out" / "explain.pb.gz")], check=True,
                         capture_output=True, text=True, cwd=tmp_path).stdout.splitlines()
    at = next(i for i, x in enumerate(top) if x.split()[:1] == ["flat"])
    assert top[at + 1].split()[-1] == "_normalise", top


PPROF_PROTO = Path("/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto")


def _pprof_proto(tmp_path: Path) -> descriptor_pb2.FileDescriptorProto:
    """pprof's own proto/profile.proto (Debian's golang-github-google-pprof-dev, which .ci/run
    installs), compiled by protoc (grpcio-tools) into its descriptor."""
    if not PPROF_PROTO.is_file():
        pytest.skip(f"pprof's profile.proto is not installed ({PPROF_PROTO}: Debian's "
                    "golang-github-google-pprof-dev)")
    protoc = pytest.importorskip("grpc_tools.protoc", reason="protoc: pip install grpcio-tools")
    out = tmp_path / "profile.desc"
    assert protoc.main(["protoc", f"-I{PPROF_PROTO.parent}", f"--descriptor_set_out={out}",
                        PPROF_PROTO.name]) == 0
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]


def test_the_profile_is_in_pprofs_own_schema_and_reads_back_with_it(sides, tmp_path):
    proto = _pprof_proto(tmp_path)
    ours = descriptor_pb2.FileDescriptorProto()
    profile_class().DESCRIPTOR.file.CopyToProto(ours)

    def fields(f: descriptor_pb2.FileDescriptorProto) -> dict[str, set[tuple[Any, ...]]]:
        return {m.name: {(x.name, x.number, x.type, x.label, x.type_name) for x in m.field}
                for m in f.message_type}
    assert ours.package == proto.package == "perftools.profiles"
    assert fields(ours) == fields(proto)  # every message and field as pprof's file has them
    # what the session writes reads back with pprof's schema: the helper's delta on top
    base, _, head = sides
    result = CompareResult("REV abc1234", "working tree", [_decision(head.id,
                                                                     "step_ms:batch_norm")])
    explain_ab(result, {head.id: (base, head)}, tmp_path, None, "DIR x", tmp_path / "out")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    profile = read_profile(tmp_path / "out" / "explain.pb.gz", message_factory.GetMessageClass(
        pool.FindMessageTypeByName("perftools.profiles.Profile"))())
    strings = list(profile.string_table)
    assert [strings[t.type] for t in profile.sample_type] == ["bytecodes", "py_calls", "c_calls"]
    delta = net_bytecodes(profile)
    assert max(delta, key=lambda n: delta[n]) == "_normalise" and delta["_normalise"] > 1000
    assert sorted(set(delta.values()) - {delta["_normalise"]}) == [0]  # the rest nets 0


def test_against_a_stored_baseline_the_failed_work_count_names_the_helper(sides):
    base, _, head = sides
    verdict = evaluate(ResultSet(runs=[head], session={"device_class": "cpu"}), None,
                       ResultSet(runs=[base], session={"device_class": "cpu"}), "base.json")
    v = next(v for v in verdict.violations if v.metric == "bytecodes:batch_norm")
    assert v.explain is not None and v.explain["class"] == diff.MORE
    # the nested functions that moved a line down are not named: only the loop's function
    assert [f["name"] for f in v.explain["functions"]] == ["_normalise"]
    lines = gate_lines(verdict, 200)
    at = lines.index("     why it got slower: more work")
    assert "in _normalise (reference_framework/ops/batch_norm.py:81)" in lines[at + 1]
    assert f"_normalise ({BATCH_NORM}:{NORMALISE_LINE})" in report_markdown(
        ResultSet(runs=[head]), verdict)
    row = next(x for x in render_comment(ResultSet(runs=[head]), verdict).splitlines()
               if "bytecodes:batch_norm" in x).replace("\\_", "_")  # the comment's inert text
    assert "more work;<br> +" in row and "_normalise (" in row
    # an A/A baseline: no violation, nothing to explain
    again = evaluate(ResultSet(runs=[base]), None, ResultSet(runs=[base]), "base.json")
    assert not again.violations


def test_a_baseline_without_per_function_counts_names_no_function(sides):
    # a baseline written before per-function counts were kept: its totals still explain the
    # failed check, but no function is named (each of the head's would read as added work)
    base, _, head = sides
    old = dataclasses.replace(base, work=dataclasses.replace(base.work, functions=None))
    assert old.work is not None and old.work.functions is None
    verdict = evaluate(ResultSet(runs=[head], session={"device_class": "cpu"}), None,
                       ResultSet(runs=[old], session={"device_class": "cpu"}), "base.json")
    v = next(v for v in verdict.violations if v.metric == "bytecodes:batch_norm")
    assert v.explain is not None and v.explain["class"] == diff.MORE
    assert v.explain["functions"] == []
    assert "the base side has no per-function counts, so no function is named" in v.explain["why"]
    result = _result(old, head, [_decision(head.id, "step_ms:batch_norm")])
    assert result.explain[MetricKey(head.id, "step_ms:batch_norm")].functions == []
    assert profile_files(result, {head.id: (old, head)}) == {}  # no one-sided profile


def test_a_function_that_only_moved_is_compared_with_itself():
    def work(line: int, bytecodes: int) -> WorkCounts:
        return WorkCounts({"op": {"bytecodes": bytecodes + 5}}, 2, 0.1, functions={"op": [
            FunctionCounts("a.py", line, "f", bytecodes), FunctionCounts("a.py", 1, "g", 5)]})
    assert diff.function_deltas(work(10, 7), work(12, 7)) == []
    (moved,) = diff.function_deltas(work(10, 7), work(12, 9))
    assert (moved.line, moved.base[0], moved.head[0]) == (12, 7, 9)


def test_the_rerun_command_of_a_tests_second_window_selects_the_test():
    result = CompareResult("REV abc1234", "working tree",
                           [_decision("t.py::test_x#warm", "examples_per_sec", kind="rate")])
    explain_compare(result, {}, command=lambda test: rerun_command(test, "abc1234", []))
    e = result.explain[MetricKey("t.py::test_x#warm", "examples_per_sec")]
    assert e.command == "python -m pytest t.py::test_x --opperf --opperf-compare=abc1234"


def test_the_rerun_command_keeps_what_the_session_measured_in_either_spelling():
    args = ["suites", "--opperf", "--opperf-compare", "main", "--opperf-device", "cpu",
            "--opperf-workload=small", "--opperf-instructions", "-q", "--opperf-count-steps", "3"]
    options = rerun_options(args)
    assert options == ["--opperf-device=cpu", "--opperf-workload=small", "--opperf-instructions",
                       "--opperf-count-steps=3"]
    assert rerun_command("t.py::test_a[x y]", "main", options) == (
        "python -m pytest 't.py::test_a[x y]' --opperf --opperf-compare=main --opperf-device=cpu "
        "--opperf-workload=small --opperf-instructions --opperf-count-steps=3")


def test_bisects_culprit_is_explained_against_its_parent_with_its_changed_lines(sides,
                                                                               tmp_path):
    base, _, head = sides
    repo, source, _ = _repo(tmp_path)
    (repo / BATCH_NORM).write_text(source.replace(LOOP_AFTER, LOOP, 1))
    git(repo, "commit", "-q", "-am", "the loop")
    shas = git(repo, "rev-list", "--reverse", "HEAD").split()
    commits = [BisectCommit(sha, f"c{i}", "A", "2026-01-01") for i, sha in enumerate(shas)]
    metric = f"{head.id} step_ms:batch_norm"
    estimate = Estimate("different", 0.26, 0.18, 0.34, 1.3, 1.2, 1.4, 20)
    outcome = Outcome("culprit", "", culprits=[Culprit(1, 0, True, {metric: estimate}, {})])
    oracle = SimpleNamespace(commits=commits, counted={(0, 1): {head.id: (base, head)}},
                             worktrees=SimpleNamespace(checkout=lambda sha: repo))
    explained, notes = explain_culprits(oracle, outcome)  # type: ignore[arg-type]
    e = explained[(1, metric)]
    assert e.cls == diff.MORE and e.functions[0].name == "_normalise" and notes == []
    added = source.splitlines().index(LOOP_AFTER.rstrip("\n")) + 1
    assert e.changed == [f"{BATCH_NORM}:{added}-{added + 1}"]
    # a culprit whose comparison kept no runs: not in the counted code
    oracle.counted = {}
    explained, _ = explain_culprits(oracle, outcome)  # type: ignore[arg-type]
    assert explained[(1, metric)].cls == diff.NOT_COUNTED
