"""What a bisection shows (pytest_opperf.bisect.report): progress, terminal, markdown, JSON."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import jsonschema

from pytest_opperf.bisect import core, report
from pytest_opperf.bisect.repo import BisectCommit
from pytest_opperf.explain.diff import MORE, Explanation, FunctionDelta
from tests.test_bisect_core import METRIC, FakeOracle, step_at

SCHEMA = Path(__file__).parent.parent / "pytest_opperf" / "schema" / "opperf-bisect-1.schema.json"


def _commits(n: int) -> list[BisectCommit]:
    return [BisectCommit(f"{i:02x}" * 20, f"change {i}", "Ann Author",
                         f"2026-01-{i + 1:02d}T10:00:00Z") for i in range(n)]


def _bisected(n: int = 17, culprit: int = 6, broken: dict[int, str] | None = None
              ) -> tuple[report.BisectRun, core.Outcome, list[str]]:
    run = report.BisectRun(_commits(n), ["suites/test_ops.py", "-k", "conv2d"], 900.0, 123.0, 0)
    out = core.Outcome("undecided", "")
    lines: list[str] = []
    core.bisect(n, FakeOracle({METRIC: step_at(n, culprit, 1.10)}, sigma=0.03, broken=broken),
                on_step=lambda *a: lines.append(report.progress(run, out, *a, 456.0)), into=out)
    return run, out, lines


def test_progress_says_each_step_as_it_starts_and_ends():
    run, out, lines = _bisected()
    starts = [line for line in lines if " starts: " in line]
    ends = [line for line in lines if " ends: " in line]
    assert len(starts) == len(ends) == len(out.steps)
    assert starts[0].startswith("bisect: step 1 (confirm) starts: 0000000000 [0/16] -> "
                                "1010101010 [16/16]")
    assert all("456 s of 900 s left" in line for line in lines)
    assert re.search(rf"different: {re.escape(METRIC)} 1\.[01]\d\d \[1\.0\d\d, 1\.1\d\d\]; "
                     r"12 pairs in 1 session\(s\)", ends[0]), ends[0]


def test_the_terminal_names_the_culprit_and_tables_the_tested_commits():
    run, out, _ = _bisected()
    lines = report.terminal(run, out, width=120)
    assert lines[0] == "bisect: culprit verified"
    culprit = next(line for line in lines if line.startswith("culprit: "))
    assert culprit == ("culprit: " + "06" * 20 + " [6/16] 'change 6' (Ann Author, "
                       "2026-01-07T10:00:00Z)")
    assert any(re.match(rf"  {re.escape(METRIC)}: 1\.[01]\d\d \[", line) for line in lines)
    rows = [line.split() for line in lines if line.strip().startswith("[")]
    assert ["[0/16]", "0000000000", "GOOD", "1.000", "change", "0"] in rows
    assert ["[6/16]", "0606060606", "culprit"] == rows[[r[0] for r in rows].index("[6/16]")][:3]
    assert lines[-1].startswith(f"bisect: {len(out.steps)} A/B step(s), {out.sessions} session(s), "
                                f"{out.pairs} pairs, 123 s of a 900 s budget")


def test_markdown_has_a_plot_of_each_tested_commit_and_the_table():
    run, out, _ = _bisected()
    text = report.markdown(run, out)
    assert "**culprit** verified" in text
    plot = text.split("```text\n")[1].split("```")[0].splitlines()
    tested = sorted({i for i in out.levels[METRIC]})
    assert len(plot) == 1 + len(tested)
    culprit_row = next(row for row in plot if "<- culprit" in row)
    assert "[6/16]" in culprit_row and len(culprit_row.split("|")[1].split()[0]) > 20
    assert "| [6/16] | 0606060606 | culprit |" in text


def test_the_json_follows_its_schema():
    run, out, _ = _bisected(broken={3: "it cannot collect the tests (x.py)"})
    doc = report.as_json(run, out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["schema"] == "opperf-bisect/1" and doc["status"] == "culprit"
    assert doc["culprits"][0]["position"] == 6 and doc["culprits"][0]["verified"] is True
    assert doc["skipped"] == [] or doc["skipped"][0]["position"] == 3
    assert doc["ab_steps"] == len(doc["steps"]) and doc["pairs"] == sum(
        s["pairs"] for s in doc["steps"])
    assert math.isclose(doc["tested"][0]["change"][METRIC], 1.0)


def test_a_not_reproduced_report_validates_and_says_so():
    run = report.BisectRun(_commits(5), ["t.py"], 60.0, 5.0, 1)
    out = core.bisect(5, FakeOracle({METRIC: [0.0] * 5}, sigma=0.01))
    doc = report.as_json(run, out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["status"] == "not reproduced" and doc["culprits"] == []
    first = report.terminal(run, out)[0]
    assert first.startswith("bisect: not reproduced: ") and first.count("not reproduced") == 1


def test_a_subject_cannot_forge_a_line():
    run, out, _ = _bisected()
    commits = list(run.commits)
    commits[6] = BisectCommit(commits[6].sha, "x\nculprit: forged\x1b[31m", "A", "d")
    run = report.BisectRun(commits, run.selection, 900.0, 1.0, 0)
    assert not any("\n" in line or "\x1b" in line for line in report.terminal(run, out))
    assert "\nculprit: forged" not in report.markdown(run, out)


def test_a_suspected_regression_prints_the_command_that_bisects_its_range():
    import shlex

    from pytest_opperf.history.suspects import Suspect, bisect_command, markdown_lines, text_lines

    s = Suspect("cpu / small", "suites/test_ops.py::test_op[conv2d-N8]", "call_ms:conv2d",
                "1a2b3c4d", "5e6f7a8b", 1.0, 1.2, 3)
    command = bisect_command(s)
    assert command == ("python -m pytest_opperf bisect 1a2b3c4d 5e6f7a8b -- "
                       "'suites/test_ops.py::test_op[conv2d-N8]' --opperf-workload=small "
                       "--opperf-device=cpu")
    assert shlex.split(command)[-3] == "suites/test_ops.py::test_op[conv2d-N8]"
    lines = text_lines([s], 10)
    assert lines[0].startswith("warning: suspected regression: ") and lines[1] == (
        f"  bisect it: {command}")
    assert f"- `{command}`" in markdown_lines([s], 10)
    dirty = Suspect("cpu / small", "r", "m", "1a2b3c4d*", "5e6f7a8b", 1.0, 1.2, 3)
    assert bisect_command(dirty) is None and len(text_lines([dirty], 10)) == 1


def test_a_culprits_metric_carries_its_explanation_in_the_terminal_and_the_json():
    run, out, _ = _bisected()
    culprit = out.culprits[0].commit
    run.explain[(culprit, METRIC)] = Explanation(MORE, "conv2d does more work per step", [
        "conv2d"], [FunctionDelta("reference_framework/ops/conv.py", 88, "_im2col", (10, 1, 0),
                                  (51_109, 1, 0), ())], ["reference_framework/ops/conv.py:90-91"])
    lines = report.terminal(run, out, width=200)
    at = next(i for i, line in enumerate(lines) if line.startswith(f"  {METRIC}: "))
    assert lines[at + 1:at + 4] == [
        "    more work: conv2d does more work per step",
        "      +51,099 bytecodes in _im2col (reference_framework/ops/conv.py:88)",
        "      changed lines: reference_framework/ops/conv.py:90-91"]
    assert "+51,099 bytecodes in _im2col" in report.markdown(run, out)
    doc = report.as_json(run, out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["culprits"][0]["explain"][METRIC]["functions"][0]["name"] == "_im2col"
    # none known: no lines, an empty object
    run.explain.clear()
    assert not any("more work" in line for line in report.terminal(run, out, width=200))
    assert report.as_json(run, out)["culprits"][0]["explain"] == {}
