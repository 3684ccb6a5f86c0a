"""--opperf-shard=K/N through pytest: the shards' run ids partition the session's, in one process
and in another; the baseline's durations balance them; what cannot be taken is a usage error."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_opperf.comparison import shard
from pytest_opperf.records.reader import read_results
from tests.ab_suites import make_repo
from tests.opperf_suites import assert_one_line_usage_error, e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]
ROOT = Path(__file__).parent.parent

TESTS = ["test_a", "test_b", "test_c", "test_d", "test_e", "test_f"]
TWO_WINDOWS = '''

def test_two(opperf):
    for name in ("first", "second"):
        with opperf.measure(name=name) as run:
            for _ in range(3):
                train_step()
                run.step(examples=4)
'''


def _suite_simple(pytester) -> None:
    """Six one-window tests and one with two windows (run ids ``#first``, ``#second``)."""
    first = e2e(name=TESTS[0], steps=3)
    more = "".join(f"\n\n{first[first.index('def test_a'):].replace('test_a', name)}"
                   for name in TESTS[1:])
    pytester.makepyfile(test_suite=first + more + TWO_WINDOWS)


def _run_ids(pytester, *args: str, out: str = "r.json") -> list[str]:
    result = pytester.runpytest("--opperf", f"--opperf-json={out}", "-p", "no:cacheprovider",
                                *args)
    assert result.ret == 0, result.stdout.str()
    return [r.id for r in read_results(pytester.path / out).runs]


def test_the_shards_run_ids_partition_the_sessions_for_one_to_five_shards(pytester):
    _suite_simple(pytester)
    whole = _run_ids(pytester)
    assert len(whole) == 8 and "test_suite.py::test_two#second" in whole
    for count in range(1, 6):
        parts = [_run_ids(pytester, f"--opperf-shard={k}/{count}") for k in range(1, count + 1)]
        assert sorted(i for p in parts for i in p) == sorted(whole), count  # no run twice
        assert all(parts), count  # each shard ran something
        # a test's windows stay together
        assert sum("test_two#first" in i for p in parts for i in p) == 1
        owner = {i: n for n, p in enumerate(parts) for i in p}
        assert owner["test_suite.py::test_two#first"] == owner["test_suite.py::test_two#second"]
    # a second process computes the same shard, and records it in the results
    ids = _run_ids(pytester, "--opperf-shard=2/3", out="in.json")
    result = pytester.runpytest_subprocess("--opperf", "--opperf-shard=2/3",
                                           "--opperf-json=sub.json", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    sub = read_results(pytester.path / "sub.json")
    assert [r.id for r in sub.runs] == ids
    recorded = sub.session["shard"]
    assert {k: recorded[k] for k in ("index", "count", "tests", "of", "balanced_by")} == {
        "index": 2, "count": 3, "tests": len({i.split("#")[0] for i in ids}), "of": 7,
        "balanced_by": "count"}
    assert recorded["selection"] == read_results(pytester.path / "in.json").session[
        "shard"]["selection"]


def test_the_baselines_durations_balance_the_shards(pytester):
    _suite_simple(pytester)
    _run_ids(pytester, "--opperf-save=base.json")
    data = json.loads((pytester.path / "base.json").read_text())
    for run in data["runs"]:  # test_a takes as long as all the others together
        run["wall_s"] = 10.0 if run["id"].endswith("test_a") else 10.0 / 7
    (pytester.path / "base.json").write_text(json.dumps(data))
    ids = _run_ids(pytester, "--opperf-shard=1/2", "--opperf-baseline=base.json")
    assert ids == ["test_suite.py::test_a"]
    recorded = read_results(pytester.path / "r.json").session["shard"]
    assert recorded["balanced_by"].startswith("durations in ") and recorded["tests"] == 1


@pytest.mark.parametrize("args, fragment", [
    (["--opperf-shard=2/9"], "7 test(s) selected for 9 shards"),
    (["--opperf-shard=1/2", "--opperf-save=b.json"], "does not combine with --opperf-save"),
    (["--opperf-shard=1/2", "--opperf-history=h.sqlite"], "does not combine with"),
])
def test_a_shard_that_cannot_be_taken_is_a_usage_error(pytester, args, fragment):
    _suite_simple(pytester)
    result = pytester.runpytest("--opperf", "-p", "no:cacheprovider", *args)
    assert result.ret == 4, result.stdout.str()
    text = result.stdout.str() + "\n" + result.stderr.str()  # found at collection: both written
    assert "Traceback" not in text and "INTERNALERROR" not in text
    errors = [line for line in text.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "--opperf-shard" in errors[0] and fragment in errors[0], text


def test_a_shard_needs_opperf(pytester):
    _suite_simple(pytester)
    result = pytester.runpytest("--opperf-shard=1/2", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, "--opperf-shard", "needs --opperf")


def test_the_suites_shards_partition_them_in_another_process():
    """``pytest suites/test_ops.py --opperf --opperf-shard=K/3``, balanced by ci/baselines, in
    processes of their own: the same parts as this process computes, and together the whole."""
    def collected(*args: str) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "suites/test_ops.py", "--opperf", "--collect-only",
             "-q", "-p", "no:cacheprovider", "--opperf-device=cpu", "--opperf-workload=small",
             "--opperf-baseline=ci/baselines", *args],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        return [line for line in out.stdout.splitlines() if "::" in line]

    whole = collected()
    parts = [collected(f"--opperf-shard={k}/3") for k in (1, 2, 3)]
    assert sorted(i for p in parts for i in p) == sorted(whole)
    baseline = read_results(ROOT / "ci" / "baselines" / "cpu-small.json")
    expected = shard.durations(baseline.runs, whole)
    assert len(expected) > len(whole) // 2  # the baseline balances them
    assert parts == shard.partition(whole, 3, expected)


def test_both_ab_sides_run_the_same_shard_of_what_they_collected(pytester):
    """In A/B the controller takes the shard of both sides' tests (the head's, and those on the
    base only): over the shards each test is compared once, added or removed once."""
    same = "".join(f"def test_same{i}():\n    pass\n\n" for i in range(5))
    make_repo(pytester.path, {"test_a.py": same + "def test_old():\n    pass\n"},
              {"test_a.py": same + "def test_new():\n    pass\n"})
    both, added, removed, passed, selections = 0, [], [], 0, set()
    for k in (1, 2):
        result = pytester.runpytest_subprocess(
            "--opperf", "--opperf-compare=HEAD", "--opperf-compare-timeout=60",
            f"--opperf-shard={k}/2", f"--opperf-json=s{k}.json", "-p", "no:cacheprovider")
        out = result.stdout.str()
        assert result.ret == 0, out
        match = re.search(r"(\d+) test\(s\) on both sides, (\d+) on the head only", out)
        assert match is not None, out
        both += int(match.group(1))
        passed += result.parseoutcomes().get("passed", 0)
        data = json.loads((pytester.path / f"s{k}.json").read_text())
        added += data["compare"]["added"]
        removed += data["compare"]["removed"]
        selections.add(data["session"]["shard"]["selection"])
    assert (both, passed) == (5, 6)
    assert added == ["test_a.py::test_new"] and removed == ["test_a.py::test_old"]
    assert len(selections) == 1  # the same selection (head and base-only tests) on each


def test_xdist_workers_take_the_same_shard_and_the_results_say_which(pytester):
    pytest.importorskip("xdist")
    _suite_simple(pytester)
    alone = _run_ids(pytester, "--opperf-shard=2/3", out="alone.json")
    result = pytester.runpytest_subprocess("--opperf", "--opperf-shard=2/3", "-n", "2",
                                           "--opperf-json=x.json", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    merged = read_results(pytester.path / "x.json")
    assert sorted(r.id for r in merged.runs) == sorted(alone)
    assert merged.session["shard"] == read_results(pytester.path / "alone.json").session["shard"]
