"""Suite-facing additions: report sections from a hook, the session's settings at collection
time."""

from tests.opperf_suites import e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

CONFTEST = """
from pytest_opperf.plugin import session_info

def pytest_generate_tests(metafunc):
    if "workload" in metafunc.fixturenames:
        info = session_info(metafunc.config)
        ids = [f"{info.workload}-{info.device.name}"]
        metafunc.parametrize("workload", [info.workload], ids=ids)

def pytest_opperf_report_sections(config, results):
    return [("ablation", [f"{run.id}: {run.batches} steps" for run in results.runs])]
"""

TEST = '''
def test_train(opperf, workload):
    with opperf.measure() as run:
        for _ in range(3):
            run.step(examples=2)
    assert workload == opperf.workload
'''


def test_sections_reach_the_terminal_and_the_markdown(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TEST)
    result = pytester.runpytest("--opperf", "--opperf-workload=tiny", "--opperf-markdown=report.md")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "--- ablation ---",
            "test_suite.py::test_train[[]tiny-cpu[]]: 3 steps",
            "",
            "gate: PASSED *",
        ]
    )  # the verdict closes the report
    text = (pytester.path / "report.md").read_text()
    assert "### ablation\n\n```\ntest_suite.py::test_train[tiny-cpu]: 3 steps\n```" in text


def test_session_info_resolves_auto_without_opperf(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TEST)
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_train[[]small-cpu[]] PASSED*"])
    assert "ablation" not in result.stdout.str()
