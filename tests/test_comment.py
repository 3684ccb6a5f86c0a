"""The pull request comment (pytest_opperf.reports.comment): under the limit, every failed check
kept."""

from __future__ import annotations

import math
import re

from pytest_opperf.ab.paired import CompareResult, Decision, MetricKey
from pytest_opperf.comparison.gate import add_compare, evaluate
from pytest_opperf.comparison.verdict import Verdict
from pytest_opperf.explain.diff import MORE, Explanation, FunctionDelta
from pytest_opperf.reports.comment import LIMIT, MARKER, render_comment
from pytest_opperf.results import ResultSet
from tests.opperf_factories import e2e_run

REGRESSED = range(0, 1000, 7)  # 143 of 1,000 runs regressed
OP = "suites/test_ops.py::test_op[{}-conv2d-N8xC64x16x16-k3s1p1-o64-float32-contiguous]"


def _decision(run: str, metric: str, verdict: str, estimate: float, half: float) -> Decision:
    return Decision(MetricKey(run, metric), "time", verdict, 1.0, estimate, estimate,
                    estimate * (1 - half), estimate * (1 + half), 24,
                    "Walsh interval of the paired log ratios, Holm-corrected", 1.05)


OPS = ("conv2d", "batch_norm", "relu", "matmul", "softmax_with_cross_entropy", "pool2d", "add")


def _varied(i: int) -> str:
    """An id as the suites name them: the op, its shapes and attributes."""
    op = OPS[i % len(OPS)]
    return f"suites/test_ops.py::test_op[{op}-N{8 << i % 3}xC{16 * (1 + i % 13)}x{i % 29}-k{i}]"


def _session(runs: int = 1000, regressed=REGRESSED, name=OP.format):
    ids = [name(i) for i in range(runs)]
    decisions = []
    for i, run in enumerate(ids):
        decisions.append(_decision(run, "call_ms:conv2d",
                                   "regressed" if i in regressed else "undecided" if i % 3 else
                                   "unchanged", 1.3 if i in regressed else 1 + (i % 17) / 1000,
                                   0.02 + (i % 5) / 100))
        decisions.append(_decision(run, "step_ms:conv2d", "undecided", 1.01, 0.4))
    compare = CompareResult("REV 1a2b3c4d5e (origin/main)", "working tree", decisions)
    results = ResultSet(runs=[e2e_run(i) for i in ids], commit={"sha": "ab" * 20},
                        session={"device_class": "cpu", "workload": "small"},
                        compare=compare.to_dict())
    verdict = evaluate(results)
    add_compare(verdict, compare)
    verdict.warnings += [f"warning number {i} about {ids[i]}" for i in range(min(runs, 300))]
    return results, verdict, compare


def test_a_thousand_run_comment_fits_and_keeps_every_regressed_metric():
    results, verdict, compare = _session()
    text = render_comment(results, verdict, compare, "https://ci/run/1", "https://ci/dash")
    assert len(text) < LIMIT
    assert text.startswith(MARKER + "\n") and "## opperf gate: FAILED" in text
    for i in REGRESSED:
        assert f"`{OP.format(i)}`" in text or f"`{OP.format(i)[len(OP.split('{')[0]):]}`" in text
    assert text.count("call_ms:conv2d") >= len(REGRESSED)
    assert "more row(s) cut to stay under GitHub's 65,536-character limit" in text
    assert "[full report](https://ci/run/1)" in text and "[dashboard](https://ci/dash)" in text
    assert "### Failed checks (143)" in text
    assert "1.300 [1.2" in text  # a regressed metric's estimate and interval


def test_the_longest_table_is_cut_first():
    results, verdict, compare = _session(runs=60, regressed=range(3))
    full = render_comment(results, verdict, compare)
    assert "cut to stay under" not in full
    limit = len(full) - 2000
    text = render_comment(results, verdict, compare, limit=limit)
    assert len(text) <= limit
    undecided = text.split("### Undecided A/B metrics")[1].split("###")[0]
    assert "cut to stay under" in undecided  # the longest table: the undecided metrics
    assert "### Largest changes in the op table" in text
    assert "cut to stay under" not in text.split("### Largest changes")[1].split("###")[0]
    assert "### Failed checks (3)" in text


def test_when_only_the_failed_checks_are_left_they_are_shortened_never_dropped():
    results, verdict, compare = _session(regressed=range(1000), name=_varied)
    text = render_comment(results, verdict, compare)
    assert len(text) < LIMIT
    assert "### Failed checks (1000): runs `suites/test_ops.py::`..." in text  # said once
    failed = text.split("### Failed checks")[1].split("###")[0]
    for i in range(1000):
        assert f"`{_varied(i).split('::')[1]}` 1.300" in failed
    # fewer regressions keep their table
    results, verdict, compare = _session(regressed=range(0, 1000, 4), name=_varied)
    text = render_comment(results, verdict, compare)
    failed = text.split("### Failed checks")[1].split("###")[0]
    assert len(text) < LIMIT and failed.count("| `call_ms:conv2d` |") == 250


def test_a_passing_session_without_ab_shows_the_largest_drift():
    results = ResultSet(runs=[e2e_run("t.py::a", {"relu": [1.0] * 8})],
                        session={"device_class": "cpu"})
    baseline = ResultSet(runs=[e2e_run("t.py::a", {"relu": [2.0] * 8})],
                         session={"device_class": "cpu"})
    verdict = evaluate(results, None, baseline, "base.json")
    text = render_comment(results, verdict)
    assert "## opperf gate: PASSED" in text and "Failed checks" not in text
    assert "### Largest drift against the baseline (advisory)" in text
    assert math.isfinite(len(text)) and text.endswith("\n")


def test_markup_in_ids_is_escaped():
    results, verdict, compare = _session(runs=3, regressed=[0])
    verdict.violations[0].run = "x.py::t[a|b`c]\n<img src=x>"
    verdict.warnings.append("<script>|")
    text = render_comment(results, verdict, compare)
    row = next(line for line in text.splitlines() if "a\\|b" in line)
    assert row.replace("\\|", "").count("|") == 6  # five cells: no column break from the id
    assert "``x.py::t[a\\|b`c]\\n<img src=x>``" in row  # in a code span: shown, not rendered
    assert "- &lt;script&gt;\\|" in text


def _explained(runs: int, regressed) -> tuple[ResultSet, Verdict, CompareResult]:
    """A session whose regressed metrics each have an explanation naming 20 functions."""
    results, _, compare = _session(runs, regressed, _varied)
    for d in compare.decisions:
        if d.verdict == "regressed":
            compare.explain[d.key] = Explanation(MORE, "x" * 300, ["conv2d"], [FunctionDelta(
                f"reference_framework/ops/helpers_{i}/a_long_module_name.py", 10 + i,
                f"_helper_{i}", (100, 2, 3), (100 + 1000 * (20 - i), 2, 3), ())
                for i in range(20)])
    verdict = evaluate(results)
    add_compare(verdict, compare)
    return results, verdict, compare


def test_explanations_name_at_most_three_functions_and_the_comment_stays_under_the_limit():
    results, verdict, compare = _explained(1000, range(0, 1000, 7))
    text = render_comment(results, verdict, compare)
    assert len(text) < LIMIT and "why it got slower" in text
    failed = text.split("### Failed checks")[1].split("###")[0]
    rows = [x for x in failed.splitlines() if "call_ms:conv2d" in x]
    assert len(rows) == len(REGRESSED)
    for row in rows:  # the first three functions, the largest first, and no fourth
        assert "more work;<br> +20,000 bytecodes in \\_helper\\_0 (" in row  # inert: no emphasis
        assert "\\_helper\\_2 (" in row and "\\_helper\\_3 (" not in row
    # a thousand explained regressions: the failed checks shorten and still fit
    results, verdict, compare = _explained(1000, range(1000))
    text = render_comment(results, verdict, compare)
    assert len(text) < LIMIT and "### Failed checks (1000)" in text


def _outside_code_spans(text: str) -> str:
    return re.sub(r"(`+)(?:(?!\1).)*?\1", "", text)


def test_nothing_from_ids_or_messages_is_live_markdown():
    results, verdict, compare = _session(runs=3, regressed=[0])
    run = "t.py::test_x[@octocat-#123]"
    verdict.violations[0].run = run
    verdict.violations[0].message = (
        f"{run} by @octocat (@org/team, fixes #123, GH-45): *bold* _it_ ~~gone~~ `code` "
        "[link](https://evil.example) ![img](x.png) <b>tag</b> &lt; www.evil.example | a@b.io")
    verdict.warnings.append("# heading @octocat")
    verdict.warnings.append("1. a list")
    verdict.warnings.append("[ref]: https://evil.example")
    text = render_comment(results, verdict, compare)
    live = _outside_code_spans(text)
    for found in ("@octocat", "@org", "#123", "GH-45", "@b.io", "https://", "www.", "*bold*",
                  "_it_", "~~gone~~", "`code`", "<b>", "&lt; "):
        assert found not in live, found
    assert not re.search(r"(?<!\\)\]\(", live)  # no link, no image
    assert "`t.py::test_x[@octocat-#123]`" in text  # the run itself: a code span, as it is
    row = next(line for line in text.splitlines() if "*bold" in line)
    assert row.replace("\\|", "").count("|") == 6  # five cells: the message's | breaks none
    assert "\\*bold\\*" in row and "@\u200doctocat" in row and "#\u200d123" in row
    assert "- \\# heading @\u200doctocat" in text and "- 1\\. a list" in text
    assert "- \\[ref\\]" not in text and "- \\[ref]: https\u200d://" in text
