"""Per-function work counts: the counting pass splits each stat's counts by Python function,
bounded, and the results file keeps them."""

from __future__ import annotations

import base64
import json
import zlib

import pytest

from pytest_opperf.records.checks import results_from_dict
from pytest_opperf.results import ResultsError, ResultSet
from pytest_opperf.workcounts import functions
from pytest_opperf.workcounts.functions import OTHER, FunctionCounts, bounded, relative_file
from pytest_opperf.workcounts.workcount import COUNTERS, OUTSIDE, WorkCounts
from tests.opperf_factories import e2e_run
from tests.test_workcount import Toy, work_of

HERE = "tests/test_workcount.py"


def rows_of(work: WorkCounts, stat: str) -> dict[str, FunctionCounts]:
    assert work.functions is not None
    return {r.name: r for r in work.functions[stat]}


def test_each_stat_is_split_by_function_and_the_rows_add_up_to_the_stat():
    work = work_of(Toy())
    assert work.functions is not None
    assert set(work.functions) == set(work.stats)
    for stat, rows in work.functions.items():
        for counter in COUNTERS:
            assert sum(r.count(counter) for r in rows) == work.stats[stat].get(counter, 0), stat
    add = rows_of(work, "elementwise_add")
    helper = add["Toy.helper"]
    assert (helper.file, helper.py_calls) == (HERE, 22)  # relative to the checkout
    assert helper.line == Toy.helper.__code__.co_firstlineno
    relu = rows_of(work, "relu")
    assert relu["Toy.relu"].callees == {"sum": 1}  # its C calls by callee
    assert relu["Toy.relu.<locals>.<genexpr>"].callees == {"max": 22}
    assert "Toy.helper" in rows_of(work, OUTSIDE)  # the call outside every region


def test_an_extra_call_changes_one_function_at_one_stat():
    base, head = work_of(Toy()), work_of(Toy(extra_call=True))
    assert base.functions is not None and head.functions is not None
    changed = {(stat, r.name) for stat in head.functions for r in head.functions[stat]
               if r not in base.functions[stat]}
    assert changed == {("elementwise_add", "Toy.add"), ("elementwise_add", "Toy.helper")}
    b, h = rows_of(base, "elementwise_add"), rows_of(head, "elementwise_add")
    assert h["Toy.helper"].py_calls == b["Toy.helper"].py_calls + 1


def test_two_passes_give_the_same_functions():
    assert work_of(Toy(), steps=3).functions == work_of(Toy(), steps=2).functions


def test_the_rows_are_bounded_to_99_per_cent_and_the_rest_is_one_row():
    rows = [FunctionCounts("a.py", 1, "big", 9_900, 1_000, 0),
            *(FunctionCounts("b.py", i, f"small{i}", 10, 1, 0) for i in range(2, 12))]
    kept = bounded(rows)
    assert [r.name for r in kept] == ["big", OTHER]  # 9,900 of 10,000 bytecodes is 99 %
    assert kept[1].bytecodes == 100 and kept[1].py_calls == 10 and kept[1].where() == OTHER
    # a function that holds C calls is kept for them, though it runs few bytecodes
    calls = bounded([*rows, FunctionCounts("c.py", 1, "caller", 1, 1, 100, {"len": 99, "x": 1})])
    assert [r.name for r in calls][-2:] == ["caller", OTHER]
    assert calls[-2].callees == {"len": 99, OTHER: 1}
    assert bounded([]) == []


def test_files_are_relative_to_the_checkout_or_the_library_directory(tmp_path):
    root, lib = tmp_path / "co", tmp_path / "venv" / "site-packages"
    assert relative_file(str(root / "pkg" / "m.py"), str(root), [str(lib)]) == "pkg/m.py"
    assert relative_file(str(lib / "numpy" / "x.py"), str(root), [str(lib)]) == "numpy/x.py"
    assert relative_file("<string>", str(root)) == "<string>"
    assert relative_file(str(tmp_path / "elsewhere.py"), str(root)) == str(
        tmp_path / "elsewhere.py")


def test_functions_round_trip_through_a_results_file():
    run = e2e_run()
    run.work = work_of(Toy())
    data = ResultSet(runs=[run]).to_dict()
    assert data["runs"][0]["work"]["functions"]["format"] == functions.FUNCTIONS_FORMAT
    back = results_from_dict(json.loads(json.dumps(data))).runs[0]
    assert back.work == run.work


def _packed(doc: object) -> str:
    return base64.b64encode(zlib.compress(json.dumps(doc).encode())).decode()


@pytest.mark.parametrize("obj, problem", [
    ([], "must be an object"),
    ({"format": "x", "data": ""}, "format must be"),
    ({"format": functions.FUNCTIONS_FORMAT, "data": "%%%"}, "not base64 of deflated JSON"),
    ({"format": functions.FUNCTIONS_FORMAT, "data": _packed({"files": [], "stats": {"a": [[0]]}})},
     r"stats\['a'\]\[0\] must be a list of 7"),
    ({"format": functions.FUNCTIONS_FORMAT,
      "data": _packed({"files": [], "stats": {"a": [[0, 1, "f", 1, 1, 1, []]]}})},
     "file index 0 is past the 0 files"),
    ({"format": functions.FUNCTIONS_FORMAT,
      "data": _packed({"files": ["a.py"], "stats": {"a": [[0, 1, "f", -1, 1, 1, []]]}})},
     "bytecodes must be an int"),
])
def test_a_malformed_functions_object_is_refused_naming_the_field(obj, problem):
    data = ResultSet(runs=[e2e_run()]).to_dict()
    data["runs"][0]["work"] = {"steps": 2, "pass_s": 1.0, "versions": {},
                               "stats": {"a": {"bytecodes": 1}}, "functions": obj}
    with pytest.raises(ResultsError, match=problem):
        results_from_dict(data)
