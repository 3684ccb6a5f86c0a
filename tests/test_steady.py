"""The steady state as data: one warm-up rule, recorded in the run, read by every reader through
:mod:`pytest_opperf.comparison.metrics`; files of the release before ``warmup_steps`` read as they
did."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_opperf.comparison.gate import evaluate
from pytest_opperf.comparison.metrics import (
    EXAMPLES_PER_SEC,
    PYTHON_SHARE,
    metric,
    steady,
    steady_examples_per_sec,
    steady_python_shares,
    steady_steps,
    view,
)
from pytest_opperf.comparison.thresholds import parse_thresholds
from pytest_opperf.history.records import steady_run_values, step_value
from pytest_opperf.records.reader import read_results
from pytest_opperf.reports.gpu_report import steady_lines
from pytest_opperf.reports.report import markdown, terminal_lines
from pytest_opperf.results import ResultsError, RunResult, warmup_rule, write_results
from tests.opperf_factories import e2e_run, results

DATA = Path(__file__).parent / "data"
# Written by the release before warmup_steps (ci/baselines/cpu-small.json at f1617be, three of its
# runs: an e2e, an op and an overhead run), and what that release read from it (READINGS, made by
# running readings() below on that release's code).
OLD_FILE = DATA / "results-without-warmup-steps.json"
READINGS = DATA / "results-without-warmup-steps.readings.json"
PACKAGE = Path(__file__).parent.parent / "pytest_opperf"


def readings(path: str | Path) -> dict[str, Any]:
    """What a release reads from a results file: the report and the gate (absolute limits and
    the file as its own baseline: every drift row), each run's metrics view and stored values."""
    res = read_results(path)
    thresholds = parse_thresholds({"limit": [{"run": "*", "min_examples_per_sec": 1e9,
                                              "max_python_share": 0.01}]})
    verdict = evaluate(res, thresholds, read_results(path), "itself")
    return {"terminal": terminal_lines(res, verdict), "markdown": markdown(res, verdict),
            "gate": verdict.to_dict(),
            "view": {r.id: {k: [s.kind, list(s.samples), s.sampled] for k, s in view(r).items()}
                     for r in res.runs},
            "history": {r.id: {s.name: step_value(r, s) for s in r.stats} for r in res.runs}}


def test_a_file_of_the_release_before_reads_as_it_did():
    assert "warmup_steps" not in OLD_FILE.read_text()
    expected = json.loads(READINGS.read_text())
    # fields the gate's verdict gained since, at their values for a session without A/B
    expected["gate"] |= {"inconclusive": 0, "undecided_metrics": []}
    assert json.loads(json.dumps(readings(OLD_FILE))) == expected


def test_the_rule_fills_in_an_old_file_and_a_file_written_now_keeps_it(tmp_path):
    old = read_results(OLD_FILE)
    assert [(r.kind, len(r.step_ms), r.warmup_steps) for r in old.runs] == [
        ("e2e", 10, 1), ("op", 0, 0), ("overhead", 0, 0)]
    e2e = old.runs[0]
    conv = next(s for s in e2e.stats if s.samples_ms and s.name == "conv2d")
    assert view(e2e)[metric("step_ms", "conv2d")].samples == tuple(conv.samples_ms[1:])
    written = tmp_path / "new.json"
    write_results(written, old)
    lines = written.read_text().splitlines()[1:-1]
    assert [json.loads(line.rstrip(","))["warmup_steps"] for line in lines] == [1, 0, 0]
    assert readings(written) == readings(OLD_FILE)


def test_the_warm_up_rule():
    assert [warmup_rule(n) for n in (0, 1, 2, 10)] == [0, 0, 1, 1]
    assert e2e_run(step_ms=[5.0], stats={"a": [1.0]}).warmup_steps == 0
    assert e2e_run().warmup_steps == 1
    with pytest.raises(ValueError, match="warmup_steps must be >= 0, got -2"):
        dataclasses.replace(e2e_run(), warmup_steps=-2)


def _run(warmup_steps: int | None = None) -> RunResult:
    # steps of 2000, 500, 1000, 500 ms with 32, 32, 32, 16 examples; an executor (conv2d) of 250,
    # 100, 500, 400 ms: whole window 112 examples / 4 s = 28/s; steady (warm-up: the first step)
    # 80 examples / 2 s = 40/s, where the median of the per-step rates would be 32/s
    run = e2e_run(stats={"conv2d": [250.0, 100.0, 500.0, 400.0]},
                  step_ms=[2000.0, 500.0, 1000.0, 500.0])
    run.step_examples = [32, 32, 32, 16]
    run.examples = 112
    run.examples_per_sec = 28.0
    return run if warmup_steps is None else dataclasses.replace(run, warmup_steps=warmup_steps)


def test_steady_examples_per_sec_is_the_steady_steps_examples_over_their_time():
    run = _run()
    assert run.warmup_steps == 1 and steady_steps(run) == [500.0, 1000.0, 500.0]
    assert steady_examples_per_sec(run) == pytest.approx(40.0)
    assert steady_lines(run) == ["steady state: 40.00000 examples/sec over the 3 steps after "
                                 "warm-up"]
    (v,) = evaluate(results(run), parse_thresholds({"limit": [{"min_examples_per_sec": 41}]}),
                    ).violations
    assert v.value == pytest.approx(40.0)
    assert view(run)[EXAMPLES_PER_SEC].samples == pytest.approx((64.0, 32.0, 32.0))
    assert steady_python_shares(run) == pytest.approx([0.8, 0.5, 0.2])
    assert steady_run_values(run) == pytest.approx((40.0, 0.5))


def test_the_warmup_steps_a_run_records_decide_everywhere():
    run = _run(warmup_steps=2)
    assert steady_steps(run) == [1000.0, 500.0]
    assert steady(run, run.stat("conv2d").samples_ms) == [500.0, 400.0]
    assert view(run)[metric("step_ms", "conv2d")].samples == (500.0, 400.0)
    assert steady_examples_per_sec(run) == pytest.approx(48 / 1.5)
    assert view(run)[PYTHON_SHARE].samples == pytest.approx((0.5, 0.2))
    assert step_value(run, run.stat("conv2d")) == 450.0
    none = _run(warmup_steps=0)  # no warm-up step: no steady state apart from the whole window
    assert steady_steps(none) == none.step_ms and steady_examples_per_sec(none) is None
    assert steady_lines(none) == []
    every = _run(warmup_steps=9)  # more than the steps: all of them are warm-up
    assert steady_steps(every) == [] and steady_examples_per_sec(every) is None
    assert metric("step_ms", "conv2d") not in view(every)
    assert view(every)[EXAMPLES_PER_SEC].samples == (28.0,) and steady_lines(every) == []


def test_warmup_steps_read_from_a_file(tmp_path):
    doc = json.loads(OLD_FILE.read_text())
    doc["runs"][0]["warmup_steps"] = 3
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    run = read_results(path).runs[0]
    assert run.warmup_steps == 3
    conv = run.stat("conv2d")
    assert view(run)[metric("step_ms", "conv2d")].samples == tuple(conv.samples_ms[3:])
    for bad, shown in ((-1, "-1"), (1.5, "1.5"), ("2", "'2'"), (True, "True")):
        doc["runs"][0]["warmup_steps"] = bad
        path.write_text(json.dumps(doc))
        with pytest.raises(ResultsError, match="warmup_steps must be a whole number >= 0, got "
                           + re.escape(shown)):
            read_results(path)


# --- one warm-up rule: no reader applies another ------------------------------------------------

# Each pattern is a way to leave out warm-up steps that is not the one rule's: slicing a per-step
# list from 1, a rule on a count of steps or samples, the removed stats.after_warmup; and the
# places allowed to apply the rule or to slice by a run's warmup_steps.
OTHER_RULES = {
    "a per-step list sliced from 1": re.compile(
        r"\b\w*(step|sample|share|rate|example|_ms)\w*\s*\[\s*1\s*:"),
    "a warm-up rule on a count of steps": re.compile(
        r"len\([^()]*(step|sample)[^()]*\)\s*(>=\s*2|>\s*1)\b"),
    "after_warmup": re.compile(r"\bafter_warmup\b"),
}
ALLOWED = {  # the pattern, and the modules where it is the rule itself
    "the warm-up rule applied": (re.compile(r"\bwarmup_rule\("), {"results.py", "measure.py"}),
    "a slice by warmup_steps": (re.compile(r"\[[^\]\n]*warmup_steps\s*:"),
                                {"comparison/metrics.py"}),
}


def other_warmup_rules(name: str, text: str) -> list[str]:
    found = [f"{name}:{i}: {what}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1)
             for what, pattern in OTHER_RULES.items() if pattern.search(line)]
    found += [f"{name}:{i}: {what} outside {sorted(where)}: {line.strip()}"
              for i, line in enumerate(text.splitlines(), 1)
              for what, (pattern, where) in ALLOWED.items()
              if pattern.search(line) and name not in where
              and not line.lstrip().startswith(("def ", "#", "from ", "import "))]
    return found


def test_the_patterns_find_the_warm_up_rules_there_were():
    before = ["return list(samples[1:]) if len(samples) >= 2 else list(samples)",
              "ms = sum(steps[1:])", "return sum(examples[1:]) / (ms / 1e3)",
              "first = 1 if len(self._step_ms) >= 2 else 0",
              "python, steps = run.steady_python_shares(), after_warmup(run.step_ms)"]
    assert all(other_warmup_rules("gpu_report.py", line) for line in before)
    assert other_warmup_rules("report.py", "first = warmup_rule(len(run.step_ms))")
    assert other_warmup_rules("gate.py", "x = run.step_ms[run.warmup_steps:]")
    assert not other_warmup_rules("comparison/metrics.py",
                                  "return list(per_step[run.warmup_steps:])")
    assert not other_warmup_rules("report.py", "lines += table_lines[1:]")


def test_no_module_has_another_warm_up_rule():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += other_warmup_rules(path.name if path.parent == PACKAGE
                                    else str(path.relative_to(PACKAGE)), path.read_text())
    assert not found, "\n".join(found)
