"""``python -m pytest_opperf merge`` and ``gate``: the shards joined give the unsharded session's
verdict (exit status and violations), and parts that do not make one session are refused."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pytest_opperf.ab.cost import costs
from pytest_opperf.ab.paired import CompareResult, Decision, MetricKey
from pytest_opperf.cli import main
from pytest_opperf.comparison import shard
from pytest_opperf.comparison.gate import add_compare, evaluate
from pytest_opperf.comparison.gate_cli import verdict_of
from pytest_opperf.comparison.merge import MergeError, Part, merge
from pytest_opperf.comparison.verdict import Violation
from pytest_opperf.records.reader import read_results
from pytest_opperf.results import ResultSet, write_results
from tests.opperf_factories import e2e_run
from tests.opperf_suites import e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

SUITES = {"a": {}, "b": {"relu_ms": 3.0}, "c": {"relu_calls": 2}, "d": {}, "e": {}, "f": {}}
THRESHOLDS = '''[regression]
time = "gate"

[[limit]]
run = "test_d.py::*"
stat = "relu"
max_avg_ms = 0.5
'''


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def _key(v: Violation | dict) -> tuple:
    d = v if isinstance(v, dict) else v.to_dict()
    return d["run"], d["metric"], d["message"], d["statistic"]


def test_merged_shards_gate_as_the_unsharded_session(pytester):
    """A slower stat (time gated), a count that changed and a broken limit: the unsharded session
    and the gate of its three shards merged fail with the same exit status and violations."""
    for name in SUITES:
        pytester.makepyfile(**{f"test_{name}": e2e()})
    assert pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    for name, changes in SUITES.items():
        pytester.makepyfile(**{f"test_{name}": e2e(**changes)})
    pytester.makefile(".toml", t=THRESHOLDS)
    gate = ["--opperf", "--opperf-baseline=base.json", "--opperf-thresholds=t.toml"]
    whole = pytester.runpytest(*gate, "--opperf-json=whole.json")
    assert whole.ret == 1, whole.stdout.str()
    expected = read_results(pytester.path / "whole.json").gate
    assert expected is not None
    metrics = {(v["run"].split(".py")[0], v["metric"]) for v in expected["violations"]}
    assert {("test_b", "step_ms:relu"), ("test_c", "count:relu"),
            ("test_d", "avg_ms:relu")} <= metrics
    base_args = ["--baseline", str(pytester.path / "base.json"), "--thresholds",
                 str(pytester.path / "t.toml")]
    # the session's own stored results, gated again: the same checks fail (a file keeps 5
    # significant digits of each sample: a rank test's p-value in a message may differ)
    code, out, err = _cli("gate", str(pytester.path / "whole.json"), *base_args, "--json",
                          str(pytester.path / "again.json"))
    assert (code, err) == (1, ""), out
    again = read_results(pytester.path / "again.json").gate
    assert again is not None and again["checks"] == expected["checks"]
    assert sorted(_key(v)[:2] for v in again["violations"]) == sorted(
        _key(v)[:2] for v in expected["violations"])
    # its stored runs as the files of three shards, merged: the very same verdict, message by
    # message
    stored = read_results(pytester.path / "whole.json")
    tests = [r.id for r in stored.runs]
    files = []
    for k, ids in enumerate(shard.partition(tests, 3), 1):
        part = ResultSet(runs=[r for r in stored.runs if r.id in ids], machine=stored.machine,
                         commit=stored.commit, session={**stored.session, "shard": shard.record(
                             shard.Shard(k, 3), len(ids), len(tests), "s", "count")})
        write_results(pytester.path / f"s{k}.json", part)
        files.append(str(pytester.path / f"s{k}.json"))
    merged = str(pytester.path / "merged.json")
    assert _cli("merge", merged, *files)[0] == 0
    code, out, _ = _cli("gate", merged, *base_args, "--json", str(pytester.path / "gated.json"))
    got = read_results(pytester.path / "gated.json").gate
    assert code == 1 and got is not None and got["checks"] == expected["checks"]
    assert sorted(map(_key, got["violations"])) == sorted(map(_key, again["violations"]))
    # the three shards measured by the plugin, merged: the same exit status, the same checks
    # failed (their measurements are their own: the statistics' p-values may differ)
    parts = []
    for k in (1, 2, 3):
        pytester.runpytest(*gate, f"--opperf-shard={k}/3", f"--opperf-json=p{k}.json")
        parts.append(str(pytester.path / f"p{k}.json"))
    assert _cli("merge", merged, *parts)[0] == 0
    code, out, err = _cli("gate", merged, *base_args, "--json", str(pytester.path / "gated.json"))
    assert (code, err) == (1, ""), out
    got = read_results(pytester.path / "gated.json").gate
    assert got is not None and got["checks"] == expected["checks"] and got["passed"] is False
    assert sorted(_key(v)[:2] for v in got["violations"]) == sorted(
        _key(v)[:2] for v in expected["violations"])
    assert "gate: FAILED" in out
    # the same baseline through its directory, as in CI; and the A/A without changes passes
    for name in SUITES:
        pytester.makepyfile(**{f"test_{name}": e2e()})
    pytester.runpytest("--opperf", "--opperf-shard=1/2", "--opperf-json=q1.json")
    pytester.runpytest("--opperf", "--opperf-shard=2/2", "--opperf-json=q2.json")
    assert _cli("merge", merged, str(pytester.path / "q1.json"),
                str(pytester.path / "q2.json"))[0] == 0
    code, out, _ = _cli("gate", merged, "--baseline", str(pytester.path / "base.json"))
    assert code == 0 and "gate: PASSED" in out, out


def _decision(run: str, verdict: str, estimate: float = 1.0, inconclusive: bool = False
              ) -> Decision:
    return Decision(MetricKey(run, "call_ms:relu"), "time", verdict, 1.0, estimate, estimate,
                    estimate * 0.98, estimate * 1.02, 24, "Walsh interval", 1.05, inconclusive)


def _ab_results() -> ResultSet:
    runs = [e2e_run(f"t.py::test_{i}") for i in range(6)]
    compare = CompareResult("REV abc (main)", "working tree", [
        _decision("t.py::test_0", "regressed", 1.3),
        _decision("t.py::test_1", "undecided", 1.1, inconclusive=True),
        _decision("t.py::test_2", "unchanged"), _decision("t.py::test_3", "improved", 0.7),
        _decision("t.py::test_4", "undecided", 1.02), _decision("t.py::test_5", "regressed", 1.2)])
    compare.cost = costs(compare.decisions, {f"t.py::test_{i}": 1.5 * i for i in range(6)},
                         {f"t.py::test_{i}": 1 + i % 2 for i in range(6)})
    results = ResultSet(runs=runs, session={"device_class": "cpu", "workload": "small",
                                            "timing": "host"}, compare=compare.to_dict())
    verdict = evaluate(results)
    add_compare(verdict, compare, [("t.py::test_2", "ab:base", "the base side's test failed")])
    results.gate = verdict.to_dict()
    return results


def _split(results: ResultSet, shards: list[list[int]]) -> list[Part]:
    """``results`` as the files of shards holding the runs (and A/B decisions) of ``shards``."""
    compare = CompareResult.from_dict(results.compare)
    gate = results.gate or {}
    parts = []
    for k, indices in enumerate(shards, 1):
        ids = {results.runs[i].id for i in indices}
        mine = CompareResult(compare.base, compare.head,
                             [d for d in compare.decisions if d.key.run in ids],
                             cost=[c for c in compare.cost if c.test in ids])
        part = ResultSet(runs=[r for r in results.runs if r.id in ids],
                         session={**results.session, "shard": {
                             "index": k, "count": len(shards), "tests": len(ids), "of": 6,
                             "selection": "abc", "balanced_by": "count"}},
                         compare=mine.to_dict())
        ev = evaluate(part)
        problems = [(v["run"], v["metric"], v["message"]) for v in gate["violations"]
                    if v["metric"] == "ab:base" and v["run"] in ids]
        add_compare(ev, mine, problems)
        part.gate = ev.to_dict()
        parts.append(Part(f"p{k}.json", part))
    return parts


@pytest.mark.parametrize(("mode", "undecided_violations"),
                         [("inconclusive", 1), ("warn", 0), ("fail", 2)])
def test_the_ab_decisions_stored_in_the_shards_gate_as_in_the_session(mode, undecided_violations):
    whole = _ab_results()
    compare = CompareResult.from_dict(whole.compare)
    session = evaluate(whole)
    add_compare(session, compare, [("t.py::test_2", "ab:base", "the base side's test failed")],
                undecided=mode)
    merged = merge(_split(whole, [[0, 3], [1, 4], [2, 5]]))
    got = verdict_of(merged, undecided=mode)
    assert sorted(map(_key, got.violations)) == sorted(map(_key, session.violations))
    assert (got.checks, got.undecided, got.inconclusive, got.passed) == (session.checks, 2, 1,
                                                                         False)
    assert got.undecided_metrics == ["t.py::test_1::call_ms:relu", "t.py::test_4::call_ms:relu"]
    assert sum("A/B inconclusive" in v.message or "A/B undecided" in v.message
               for v in got.violations) == undecided_violations
    assert CompareResult.from_dict(merged.compare).counts() == compare.counts()
    # every test's cost, the most expensive first, as the session's
    assert CompareResult.from_dict(merged.compare).cost == compare.cost


def test_an_incomplete_shard_makes_the_whole_incomplete():
    parts = _split(_ab_results(), [[0, 1, 2], [3, 4, 5]])
    assert parts[1].results.gate is not None
    parts[1].results.gate["incomplete"] = "session interrupted (KeyboardInterrupt)"
    verdict = verdict_of(merge(parts))
    assert verdict.incomplete == "shard 2/2: session interrupted (KeyboardInterrupt)"
    assert not verdict.passed


def _write(tmp_path: Path, parts: list[Part]) -> list[str]:
    names = []
    for part in parts:
        write_results(tmp_path / part.name, part.results)
        names.append(str(tmp_path / part.name))
    return names


@pytest.mark.parametrize("case, fragment", [
    ("overlap", "run 't.py::test_2' is in both "),
    ("missing", "shard 3/3 (selection abc) is missing: given 1/3, 2/3"),
    ("twice", "shard 2/3 (selection abc) is given twice: "),
])
def test_merge_refuses_with_one_line_and_exit_4(tmp_path, case, fragment):
    shards = {"overlap": [[0, 1, 2], [2, 3], [4, 5]], "missing": [[0, 1], [2, 3], [4, 5]],
              "twice": [[0, 1], [2, 3], [4, 5]]}[case]
    names = _write(tmp_path, _split(_ab_results(), shards))
    names = {"overlap": names, "missing": names[:2], "twice": [*names, names[1]]}[case]
    code, out, err = _cli("merge", str(tmp_path / "out.json"), *names)
    assert code == 4 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and fragment in err, err
    assert not (tmp_path / "out.json").exists()


def test_merge_refuses_parts_of_other_sessions():
    a, b = _split(_ab_results(), [[0, 1, 2], [3, 4, 5]])
    b.results.session["workload"] = "full"
    with pytest.raises(MergeError, match="has workload 'full', p1.json 'small'"):
        merge([a, b])
    b.results.session["workload"] = "small"
    b.results.compare = None
    with pytest.raises(MergeError, match="p1.json has an A/B comparison and p2.json has none"):
        merge([a, b])


def test_shards_from_different_machines_are_said_per_run(tmp_path):
    a, b = _split(_ab_results(), [[0, 1, 2], [3, 4, 5]])
    a.results.machine = {"cpu": "EPYC", "cores": 2, "python": "3.11.7"}
    b.results.machine = {"cpu": "Xeon", "cores": 4, "python": "3.11.7"}
    names = _write(tmp_path, [a, b])
    code, out, _ = _cli("merge", str(tmp_path / "m.json"), *names)
    assert code == 0 and "different machines" in out
    merged = read_results(tmp_path / "m.json")
    notes = {r.id: r.notes for r in merged.runs}
    assert any("measured on Xeon, 4 cores" in n for n in notes["t.py::test_4"])
    assert any("measured on EPYC, 2 cores" in n for n in notes["t.py::test_0"])
    assert [m["machine"]["cpu"] for m in merged.session["merged"]] == ["EPYC", "Xeon"]
    # the same machine: nothing said
    b.results.machine = dict(a.results.machine)
    same = merge([a, b])
    assert not any("measured on" in n for r in same.runs for n in r.notes)
    assert [m["machine"] for m in same.session["merged"]] == [None, None]


def test_gate_usage_errors_exit_4(tmp_path):
    names = _write(tmp_path, _split(_ab_results(), [[0, 1, 2, 3, 4, 5]]))
    code, _, err = _cli("gate", names[0], "--baseline", str(tmp_path / "nothing"))
    assert code == 4 and err.count("\n") == 1 and "no such file" in err
    (tmp_path / "bad.json").write_text(json.dumps({"schema": "other"}))
    code, _, err = _cli("gate", str(tmp_path / "bad.json"))
    assert code == 4 and "unknown results schema" in err
    code, out, _ = _cli("gate", names[0], "--baseline", str(tmp_path))  # a directory without it
    assert code == 1 and "warning: no baseline" in out


@pytest.mark.parametrize(("low", "high"), [("low", "high"), ("beta_low", "beta_high")])
def test_an_impossible_interval_is_refused_naming_the_file_and_the_field(tmp_path, low, high):
    """A decision whose low is above its high was read and gated (exit 0)."""
    (name,) = _write(tmp_path, _split(_ab_results(), [[0, 1, 2, 3, 4, 5]]))
    assert _cli("gate", name)[0] in (0, 1)
    data = json.loads(Path(name).read_text())
    decision = data["compare"]["decisions"][0]
    decision[low], decision[high] = 1.5, 1.2
    Path(name).write_text(json.dumps(data))
    code, out, err = _cli("gate", name)
    assert code == 4 and err == (
        f"error: {name}: malformed compare object: compare.decisions[0].{low} must not be above "
        f"compare.decisions[0].{high}, got 1.5 > 1.2\n"), out + err
