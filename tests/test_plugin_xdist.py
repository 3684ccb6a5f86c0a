"""pytest-xdist: workers hand their runs over; the controller merges, reports once, gates once."""

import json

from tests.opperf_suites import e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]


def suite(pytester, relu_calls=1):
    pytester.makepyfile(**{f"test_m{i}": e2e(name=f"test_t{i}", steps=3, relu_calls=relu_calls)
                           for i in range(4)})


def test_xdist_gives_one_merged_report_and_one_gate(pytester):
    suite(pytester)
    assert (
        pytester.runpytest("--opperf", "--opperf-save=base.json").ret == 0
    )  # baseline without xdist
    suite(pytester, relu_calls=2)  # a structural change in every run
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "-p",
        "no:hypothesispytest",
        "--opperf",
        "--opperf-baseline=base.json",
        "--opperf-json=merged.json",
    )
    out = result.stdout.str()
    assert result.ret == 1, out
    result.assert_outcomes(passed=4)
    assert out.count("= opperf =") == 1 and out.count("= opperf gate =") == 1
    assert out.count("gate: FAILED (") == 1
    ids = [f"test_m{i}.py::test_t{i}" for i in range(4)]
    for run_id in ids:
        assert out.count(f"{run_id}  device=cpu timing=host") == 1
        assert out.count(f"FAIL {run_id} count:relu\n") == 1
    data = json.loads((pytester.path / "merged.json").read_text())
    assert [r["id"] for r in data["runs"]] == ids  # merged in id order
    assert all(r["counts"]["relu"] == 2 for r in data["runs"])
    counts = [v["run"] for v in data["gate"]["violations"] if v["metric"] == "count:relu"]
    assert (
        counts == ids
    )  # each run gated once (timings may differ too: two sleeps overshoot more than one)
