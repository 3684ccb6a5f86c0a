"""The published results format: every file the plugin writes validates against
``pytest_opperf/schema/opperf-1.schema.json``, what the reader refuses the schema
refuses, and the schema, the writers and the readers know the same keys."""

from __future__ import annotations

import copy
import io
import json
import math
import re
import subprocess
import sys
from dataclasses import fields, replace
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

from pytest_opperf.ab import render as render_ab
from pytest_opperf.ab.cost import Cost
from pytest_opperf.ab.paired import CompareResult
from pytest_opperf.cli import main
from pytest_opperf.comparison.gate import add_compare, evaluate
from pytest_opperf.comparison.verdict import Drift, DriftRow, Verdict, Violation
from pytest_opperf.core.machine import machine_info
from pytest_opperf.explain.diff import Explanation
from pytest_opperf.records.checks import results_from_dict
from pytest_opperf.reports import report
from pytest_opperf.results import ResultsError, ResultSet, RunResult, StatResult, dumps_results
from pytest_opperf.workcounts.functions import FunctionCounts
from pytest_opperf.workcounts.workcount import WorkCounts
from tests.opperf_factories import e2e_run, results
from tests.opperf_suites import e2e, inner_run_env  # noqa: F401
from tests.results_schema import SCHEMA, VALIDATOR, assert_valid, problems
from tests.test_ab_paired import result as compare_result
from tests.test_plugin_benchmark import OPS
from tests.test_plugin_gpu import FAKE_GPU, OP

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
DEFS = SCHEMA["$defs"]


def load(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert_valid(doc)
    return doc


def test_the_schema_is_a_valid_draft_2020_12_schema_shipped_in_the_package():
    VALIDATOR.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["properties"]["schema"]["const"] == "opperf/1"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["pytest_opperf"]
    assert any(fnmatch("schema/opperf-1.schema.json", glob) for glob in globs)


def test_python_m_pytest_opperf_schema_prints_its_path_for_check_jsonschema(tmp_path):
    out = io.StringIO()
    assert main(["schema"], out=out) == 0
    path = Path(out.getvalue().strip())
    assert json.loads(path.read_text()) == SCHEMA
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(rich_document()))
    bad.write_text(json.dumps({**rich_document(), "runs": [{"id": "x"}]}))
    check = [sys.executable, "-m", "check_jsonschema", "--schemafile", str(path)]
    assert subprocess.run([*check, str(good)], capture_output=True).returncode == 0
    failed = subprocess.run([*check, str(bad)], capture_output=True, text=True)
    assert failed.returncode == 1 and "'kind' is a required property" in failed.stdout


# --- every file the plugin writes ---------------------------------------------------------


def test_e2e_and_op_runs_with_a_failing_gate_and_the_saved_baseline(pytester):
    pytester.makepyfile(test_suite=e2e(steps=3), test_ops=OPS.replace("{ms}", "0.5"))
    pytester.makefile(".toml", t='[[limit]]\nstat = "relu"\nmax_avg_ms = 0.1\n')
    result = pytester.runpytest("--opperf", "--opperf-json=r.json", "--opperf-save=base.json",
                                "--opperf-thresholds=t.toml")
    assert result.ret == 1, result.stdout.str()
    doc = load(pytester.path / "r.json")
    assert {r["kind"] for r in doc["runs"]} == {"e2e", "op", "overhead"}
    e2e_run = next(r for r in doc["runs"] if r["kind"] == "e2e")
    assert len(e2e_run["step_ms"]) == 3 and e2e_run["stats"][0]["samples_ms"]
    assert any("flops" in s for s in e2e_run["stats"])
    assert doc["gate"]["passed"] is False
    assert doc["gate"]["violations"][0]["metric"] == "avg_ms:relu"
    assert load(pytester.path / "base.json")["runs"] == doc["runs"]


def test_a_session_against_a_baseline_with_a_regression(pytester):
    pytester.makepyfile(test_suite=e2e(relu_ms=1.0))
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    load(pytester.path / "base.json")
    pytester.makepyfile(test_suite=e2e(relu_ms=3.0, relu_calls=2))
    result = pytester.runpytest("--opperf", "--opperf-baseline=base.json", "--opperf-json=new.json")
    assert result.ret == 1
    gate = load(pytester.path / "new.json")["gate"]
    assert {v["metric"] for v in gate["violations"]} == {"count:relu"}  # time is drift
    assert {r["metric"] for r in gate["drift"]["rows"] if r["beyond"]} >= {"step_ms:relu"}
    assert gate["baseline"].endswith("base.json")
    assert all(v["baseline"] is not None for v in gate["violations"])


def test_a_partial_session_its_incomplete_verdict_and_the_merged_baseline(pytester):
    suite = e2e(name="test_a", steps=2) + """
def test_b():
    assert 0

def test_c(opperf):
    with opperf.measure(name="second") as run:
        train_step()
        run.step(examples=4)
"""
    pytester.makepyfile(test_suite=suite)
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 1  # test_b fails
    result = pytester.runpytest("--opperf", "--opperf-save=base.json", "--opperf-json=r.json", "-x")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["note: partial session (*): saved 1 measured run(s) and kept 1 *"])
    gate = load(pytester.path / "r.json")["gate"]
    assert gate["passed"] is False and gate["incomplete"].startswith("session interrupted")
    saved = load(pytester.path / "base.json")
    assert [r["id"] for r in saved["runs"]] == ["test_suite.py::test_a",
                                                "test_suite.py::test_c#second"]


def test_a_gpu_session_device_clock_stats_nvml_facts_and_a_flushed_cache(pytester):
    pytester.makeconftest(FAKE_GPU.format(other="A"))
    pytester.makepyfile(test_op=OP.format(), test_suite=e2e(steps=2))
    result = pytester.runpytest("--opperf", "--opperf-l2-flush", "--opperf-json=r.json",
                                "--benchmark-max-time=0")
    assert result.ret == 0, result.stdout.str()
    doc = load(pytester.path / "r.json")
    assert doc["session"]["l2_flush"] is True and doc["machine"]["gpu"]["model"] == "Fake GPU A"
    assert "start" in doc["machine"]["gpu_env"]
    stats = [s for r in doc["runs"] for s in r["stats"]]
    assert {s["clock"] for s in stats} == {"host", "device"} and any("host_ms" in s for s in stats)


def test_an_a_b_result_in_a_results_file():
    compare = compare_result()
    compare.cost = [Cost("suites/test_ops.py::test_conv2d[k7]", 1, 24, 2, 3.25),
                    Cost("suites/test_ops.py::test_relu", 2, 12, 1, 0.5)]
    rs = results(e2e_run())
    verdict = evaluate(rs)
    add_compare(verdict, compare)
    assert verdict.undecided == compare.counts()["undecided"]
    rs.gate, rs.compare = verdict.to_dict(), compare.to_dict()
    doc = json.loads(dumps_results(rs))
    assert_valid(doc)
    assert doc["compare"]["decisions"][3]["high"] is None  # an unbounded interval
    assert CompareResult.from_dict(doc["compare"]) == compare


@pytest.mark.parametrize("path", sorted((ROOT / "ci" / "baselines").glob("*.json")),
                         ids=lambda p: p.name)
def test_the_committed_baselines(path):
    load(path)


# --- what the reader refuses, the schema refuses ------------------------------------------


def rich_document() -> dict[str, Any]:
    """A small document with every object of the format: e2e and op runs, a gate, a compare."""
    run = e2e_run(stats={"ExecutorRunTimer": [3.0, 2.0], "conv2d": [2.0, 1.5]})
    executor, conv = run.stats
    run.stats = [executor, replace(conv, parent="ExecutorRunTimer", flops=1e6, host_ms=0.5)]
    run.executor_stat, run.notes = "ExecutorRunTimer", ["a note"]
    run.work = WorkCounts({"conv2d": {"bytecodes": 50, "py_calls": 4}}, 3, 0.5,
                          {"python": "3.11.7"}, ["x"], 1000, "cpu",
                          {"conv2d": [FunctionCounts("ops/conv.py", 3, "conv2d", 50, 4, 1,
                                                     {"len": 1})]})
    relu = StatResult("relu", None, 2, 2.0, 1.0, 0.9, 1.1, [0.9, 1.1])
    op = RunResult("ops.py::test_relu", "op", {"benchmark": {"rounds": 2, "iterations": 1}}, "cpu",
                   "host", 0.002, 2, 2, 1000.0, 0.001, 0.0, [relu], {})
    rs = results(run, op, machine=machine_info())
    rs.commit = {"sha": "abc", "dirty": False, "branch": None}
    rs.session = {"device": "cpu", "timing": "host"}
    compare = compare_result()
    compare.decisions = compare.decisions[3:5]  # an undecided one (unbounded) and a regressed share
    compare.cost = [Cost(compare.decisions[0].key.run, 2, 20, 3, 4.5)]
    compare.interpreters = {"base": {"executable": "/opt/py310/bin/python", "python": "3.10.12",
                                     "numpy": "1.26.4"},
                            "head": {"executable": "/venv/bin/python", "python": "3.11.2",
                                     "numpy": None}}
    verdict = evaluate(rs, baseline=results(run, op))  # a drift table
    assert verdict.drift is not None
    add_compare(verdict, compare)
    rs.gate, rs.compare = verdict.to_dict(), compare.to_dict()
    doc = json.loads(dumps_results(rs))
    assert_valid(doc)
    return doc


def read_back(doc: Any, render: bool = False) -> str | None:
    """What every reader of a results file says: None when all accept it, else the first refusal.
    ``render``: also print the report as ``python -m pytest_opperf show`` does."""
    try:
        rs = results_from_dict(doc, "r.json")
        verdict = Verdict.from_dict(rs.gate) if rs.gate is not None else None
        compare = CompareResult.from_dict(rs.compare, "r.json") if rs.compare is not None else None
    except ResultsError as exc:
        return str(exc)
    if render:
        report.terminal_lines(rs, verdict)
        report.gate_lines(verdict or Verdict())
        if compare is not None:
            render_ab.terminal_lines(compare)
    return None


BAD_VALUES: list[Any] = [None, True, -1, 0.5, 1.5, "x", [], {}, [1], math.inf, 10 ** 400]


def mutations(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every key of every object (the first item of each list) removed, and set to each bad
    value."""
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if isinstance(node, list) and node:
            walk(node[0], (*path, 0))
        if not isinstance(node, dict):
            return
        for key in list(node):
            for value in ["<removed>", *BAD_VALUES]:
                mutated = copy.deepcopy(doc)
                target = mutated
                for step in path:
                    target = target[step]
                if value == "<removed>":
                    del target[key]
                else:
                    target[key] = value
                found.append((f"{'.'.join(map(str, (*path, key)))} = {value!r:.20}", mutated))
            walk(node[key], (*path, key))

    walk(doc, ())
    return found


def _across_fields(refusal: str) -> bool:
    """A refusal of what JSON Schema cannot say: a relation between two fields (a parent that is
    no stat of the run, an interval whose low is above its high)."""
    return (refusal.endswith("which is not a stat of the run")
            or re.search(r"\.(beta_)?low must not be above \S+\.(beta_)?high, got ", refusal)
            is not None)


def test_every_document_the_schema_accepts_the_readers_read():
    """The schema is never looser than the readers: over every key of every object removed or
    set to a wrong value, a document that validates is one every reader accepts and `show`
    renders. And no reader fails otherwise than with a one-line ResultsError."""
    doc = rich_document()
    too_loose, crashes, rejected = [], [], 0
    for label, mutated in mutations(doc):
        valid = VALIDATOR.is_valid(mutated)
        try:
            refusal = read_back(mutated, render=valid)
        except Exception as exc:  # a traceback instead of a one-line error
            crashes.append(f"{label}: {type(exc).__name__}: {exc}")
            continue
        rejected += not valid
        if valid and refusal is not None and not _across_fields(refusal):
            too_loose.append(f"{label}: {refusal}")
    assert not crashes, "\n".join(crashes)
    assert not too_loose, "\n".join(too_loose)
    assert rejected > 1000  # the walk reached every object (a broken walk would check nothing)


@pytest.mark.parametrize(("change", "reader", "schema"), [
    (lambda d: d.update(schema="opperf/2"), "unknown results schema 'opperf/2'", "$.schema"),
    (lambda d: d.pop("runs"), "runs is missing or not a list", "'runs' is a required property"),
    (lambda d: d["runs"][0].update(kind="bench"), "kind must be one of e2e|op|overhead",
     "$.runs[0].kind"),
    (lambda d: d["runs"][0].update(python_share=1.5), "python_share is a share and must be in",
     "$.runs[0].python_share"),
    (lambda d: d["runs"][0].update(examples=-3), "examples must be a whole number >= 0",
     "$.runs[0].examples"),
    (lambda d: d["runs"][0]["stats"][0].update(min_ms=-0.1), "min_ms must not be negative",
     "$.runs[0].stats[0].min_ms"),
    (lambda d: d["runs"][0]["stats"][0].update(count=2.5), "count is missing or not an integer",
     "$.runs[0].stats[0].count"),
    (lambda d: d["runs"][0]["counts"].update(conv2d="1"), "counts is not an object of integers",
     "$.runs[0].counts.conv2d"),
    (lambda d: d["runs"][0].update(step_ms=[1.0, 1e999]), "step_ms is not a list of finite numbers",
     "$.runs[0].step_ms[1]"),
    (lambda d: d["gate"].update(passed="no"), "gate.passed is not a boolean", "$.gate.passed"),
    (lambda d: d["gate"]["violations"][0].update(limit="5"), "violations[0].limit is not a number",
     "$.gate.violations[0].limit"),
    (lambda d: d["compare"]["decisions"][0].update(verdict="worse"),
     "compare.decisions[0].verdict must be one", "$.compare.decisions[0].verdict"),
])
def test_what_the_reader_refuses_the_schema_refuses(change, reader, schema):
    doc = rich_document()
    change(doc)
    assert reader in (read_back(doc) or "")
    assert any(schema in p for p in problems(doc)), problems(doc)


def test_what_json_schema_cannot_say_is_checked_by_the_reader_and_said_in_the_schema():
    """Unique run ids, unique stat names, parents that are stats of the run, parent links
    without a cycle: the schema's description names the four, and the reader refuses each."""
    doc = rich_document()
    twice = copy.deepcopy(doc)
    twice["runs"].append(twice["runs"][0])
    same_stat = copy.deepcopy(doc)
    same_stat["runs"][1]["stats"].append(same_stat["runs"][1]["stats"][0])
    cycle = copy.deepcopy(doc)
    cycle["runs"][0]["stats"][0]["parent"] = "conv2d"
    orphan = copy.deepcopy(doc)
    orphan["runs"][0]["stats"][1]["parent"] = "no-such-stat"
    for bad, message in ((twice, "appears twice (run ids must be unique)"),
                         (same_stat, "stat 'relu' appears twice"),
                         (orphan, "has the parent 'no-such-stat', which is not a stat of the run"),
                         (cycle, "stat parents form a cycle")):
        assert not problems(bad)
        assert message in (read_back(bad) or "")
    for words in ("run ids unique", "stat names unique", "parents that are stats of the same run",
                  "without a cycle"):
        assert words in SCHEMA["description"]


# --- one set of keys: the schema, the writers, the readers --------------------------------


def props(name: str) -> set[str]:
    return set(DEFS[name]["properties"]) if name in DEFS else set(SCHEMA["properties"])


def test_the_schema_has_the_keys_the_writers_write():
    bare_stat = StatResult("s", None, 1, 1.0, 1.0, 1.0, 1.0)
    assert props("stat") == {f.name for f in fields(StatResult)}
    assert set(DEFS["stat"]["required"]) == set(bare_stat.to_dict())
    run = e2e_run()
    # runs without a counting pass; files of writers before warmup_steps have none
    assert set(DEFS["run"]["required"]) | {"warmup_steps"} == set(run.to_dict())
    assert "warmup_steps" not in DEFS["run"]["required"]
    run.trace = {}
    run.work = WorkCounts({"conv2d": {"bytecodes": 5}}, 3, 0.5, {"python": "3.11.7"}, ["x"], 10,
                          "cpu", {"conv2d": [FunctionCounts("ops/conv.py", 3, "conv2d", 5)]})
    assert props("run") == {f.name for f in fields(RunResult)} == set(run.to_dict(with_trace=True))
    assert props("work") == set(run.work.to_dict())
    assert set(DEFS["work"]["required"]) == set(WorkCounts({}, 1, 0.0).to_dict())
    assert props("top") == set(ResultSet(gate={}, compare={}).to_dict())
    assert set(SCHEMA["required"]) == set(ResultSet().to_dict())
    assert props("gate") == set(Verdict(incomplete="x", drift=Drift(None)).to_dict())
    assert props("drift") == set(DEFS["drift"]["required"]) == set(Drift(None).to_dict())
    row = DriftRow("r", "m", "time", 1.0, 1.0, 1.0, 1.0, None, False, "s")
    assert props("drift_row") == set(DEFS["drift_row"]["required"]) == set(row.to_dict())
    # files of writers before A/B have no undecided
    assert set(DEFS["gate"]["required"]) == set(Verdict().to_dict()) - {
        "undecided", "inconclusive", "undecided_metrics"}
    violation = {f.name for f in fields(Violation)}
    assert props("violation") == violation
    # a violation has an explanation only where its metric got one (pytest_opperf.explain)
    assert set(DEFS["violation"]["required"]) == violation - {"explain"}
    compare = compare_result()
    # files of writers before the interpreters were recorded have none
    assert props("compare") == set(compare.to_dict())
    assert set(DEFS["compare"]["required"]) == set(compare.to_dict()) - {
        "interpreters", "generations", "cost"}
    compare.cost = [Cost("t", 1, 1, 1, 1.0)]
    cost = DEFS["compare"]["properties"]["cost"]["items"]
    assert set(cost["required"]) == set(cost["properties"]) == set(compare.to_dict()["cost"][0])
    assert set(DEFS["compare"]["properties"]["verdicts"]["required"]) == set(compare.counts())
    first = compare.decisions[0]
    compare.explain[first.key] = Explanation("same work, slower", "x")
    decision = set(compare.to_dict()["decisions"][0])
    # optional: inconclusive (older writers), the bounds of unchanged (not for counts), the
    # explanation (only of a regressed or inconclusive metric)
    assert props("decision") == set(DEFS["decision"]["required"]) | {
        "inconclusive", "beta_low", "beta_high", "explain"} == decision
    assert set(machine_info()) <= props("machine")


class Recording(dict):  # type: ignore[type-arg]
    """A JSON object that notes which keys a reader looks up, under the schema definition it is."""

    def __init__(self, data: dict[str, Any], kind: str, seen: dict[str, set[str]]) -> None:
        super().__init__(data)
        self.kind, self.seen = kind, seen

    def _note(self, key: Any) -> None:
        self.seen.setdefault(self.kind, set()).add(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return super().__contains__(key)


def recording(doc: dict[str, Any], seen: dict[str, set[str]]) -> Recording:
    def wrap(node: dict[str, Any], kind: str) -> Recording:
        return Recording(node, kind, seen)

    top = dict(doc)
    top["runs"] = [wrap({**r, "stats": [wrap(s, "stat") for s in r["stats"]]}, "run")
                   for r in doc["runs"]]
    gate, compare = doc["gate"], doc["compare"]
    drift = gate["drift"]
    top["gate"] = wrap({**gate, "violations": [wrap(v, "violation") for v in gate["violations"]],
                        "drift": wrap({**drift, "rows": [wrap(r, "drift_row")
                                                         for r in drift["rows"]]}, "drift")},
                       "gate")
    top["compare"] = wrap({**compare, "decisions": [wrap(d, "decision")
                                                    for d in compare["decisions"]]}, "compare")
    for name in ("machine", "commit", "session"):
        top[name] = wrap(doc[name], name)
    return wrap(top, "top")


def test_the_readers_read_no_key_the_schema_does_not_know():
    seen: dict[str, set[str]] = {}
    assert read_back(recording(rich_document(), seen)) is None
    assert {"top", "run", "stat", "gate", "violation", "compare", "decision", "drift",
            "drift_row"} <= set(seen)
    for kind, keys in seen.items():
        assert keys <= props(kind), (kind, keys - props(kind))
