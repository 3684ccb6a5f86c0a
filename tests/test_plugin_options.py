"""Options, ini keys, early validation (exit 4, one line), and the off state."""

import pytest

from tests.opperf_suites import assert_one_line_usage_error, e2e, inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

OPTIONS = [
    "--opperf",
    "--opperf-workload",
    "--opperf-device",
    "--opperf-timing",
    "--opperf-thresholds",
    "--opperf-baseline",
    "--opperf-save",
    "--opperf-json",
    "--opperf-markdown",
    "--opperf-trace",
    "--opperf-sort",
]


def test_help_lists_every_option_and_ini_key(pytester):
    result = pytester.runpytest("--help")
    assert result.ret == 0
    text = result.stdout.str()
    assert "operator performance measurement and gate (pytest-opperf):" in text
    for option in OPTIONS:
        assert f"  {option}" in text, option
    for name in ["enabled"] + [o[len("--opperf-"):] for o in OPTIONS[1:]] + ["executor_stat"]:
        assert f"opperf_{name} " in text, name
    assert "--opperf-sort=COLUMN" in text and "--opperf-baseline=PATH" in text
    assert " ".join(text.split()).count("(default: ") >= 11  # every option says its default


@pytest.mark.parametrize("option, value", [
    ("--opperf-workload", "huge"), ("--opperf-device", "tpu"), ("--opperf-timing", "maybe"),
    ("--opperf-sort", "speed"), ("--opperf-json", " "),
])
def test_bad_option_values(pytester, option, value):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(f"{option}={value}")
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*argument {option}*{value!r}*"])
    assert "Traceback" not in result.stderr.str()


def test_bad_ini_value_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\nopperf_sort = speed\n")
    pytester.makepyfile("def test_x(): pass")
    assert_one_line_usage_error(pytester.runpytest(), "ini opperf_sort", "'speed'", "total|avg")


def test_off_by_default_fixture_only_counts(pytester):
    pytester.makepyfile("""
        def test_smoke(opperf, request):
            assert not opperf.enabled
            assert request.config.pluginmanager.get_plugin("opperf-session") is None
            with opperf.measure() as run:
                run.step(examples=4)
                run.step(examples=4)
                run.add_work("x", flops=1)
            assert (run.examples, run.batches, run.result) == (8, 2, None)
            assert opperf.workload == "small" and opperf.device.name == "cpu"
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "= opperf =" not in result.stdout.str()


def test_ini_turns_it_on(pytester):
    pytester.makeini("[pytest]\nopperf_enabled = true\nopperf_sort = name\n")
    pytester.makepyfile(e2e(steps=2))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*= opperf =*", "test_ini_turns_it_on.py::test_train  device=cpu timing=host"]
    )
    names = [line.split()[0] for line in result.stdout.lines if line.split() and line.split()[0] in
             ("conv2d", "relu", "ExecutorRunTimer", "CreateOpTimer")]
    assert names == ["CreateOpTimer", "ExecutorRunTimer", "conv2d", "relu"]  # sorted by name


def test_gpu_without_provider_is_a_usage_error(pytester):
    marker = pytester.path / "ran"
    pytester.makepyfile(f"def test_x(): open({str(marker)!r}, 'w').close()")
    assert_one_line_usage_error(pytester.runpytest("--opperf", "--opperf-device=gpu"),
                                "--opperf-device=gpu", "no plugin provides a GPU device")
    assert not marker.exists()


FAKE_GPU = """
import pytest
from pytest_opperf.device import DeviceInfo

def pytest_opperf_select_device(config, requested):
    if requested == "cpu":
        return DeviceInfo(note="cpu asked for")
    return DeviceInfo(name="cuda:0 (Fake)", is_gpu=True, synchronize=lambda: None,
                      device_class="fake-gpu", gpu_model="Fake", driver="1.0", cuda="13.0",
                      note="fake GPU")
"""


def test_device_hook_and_workload_resolution(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile("""
        def test_x(opperf):
            print("WORKLOAD", opperf.workload, opperf.device.name, opperf.timing)
    """)
    result = pytester.runpytest("-s", "--opperf", "--opperf-timing=sync")
    result.stdout.fnmatch_lines(
        [
            "*WORKLOAD full cuda:0 (Fake) sync",
            "*session: device=cuda:0 (Fake) timing=host workload=full*",
            "note: fake GPU",
        ]
    )
    result = pytester.runpytest("-s", "--opperf-device=cpu", "--opperf-workload=tiny")
    result.stdout.fnmatch_lines(["*WORKLOAD tiny cpu events"])


def test_device_hook_must_return_device_info(pytester):
    pytester.makeconftest("def pytest_opperf_select_device(config, requested): return 'cpu'")
    pytester.makepyfile("def test_x(): pass")
    assert_one_line_usage_error(pytester.runpytest("--opperf"), "returned 'cpu'", "DeviceInfo")


@pytest.mark.parametrize(
    "args, fragments",
    [
        (
            ["--opperf-baseline=absent.json"],
            ["--opperf-baseline absent.json", "no such file or directory"],
        ),
        (["--opperf-thresholds=absent.toml"], ["--opperf-thresholds absent.toml", "no such file"]),
        (["--opperf-json=test_unusable_paths_fail_before_tests_run.py/r.json"],
         ["--opperf-json test_unusable_paths_fail_before_tests_run.py/r.json",
          "test_unusable_paths_fail_before_tests_run.py is not a directory"]),
        (["--opperf-markdown=."], ["--opperf-markdown .", "is a directory"]),
    ],
)
def test_unusable_paths_fail_before_tests_run(pytester, args, fragments):
    marker = pytester.path / "ran"
    pytester.makepyfile(f"def test_x(): open({str(marker)!r}, 'w').close()")
    assert_one_line_usage_error(pytester.runpytest("--opperf", *args), *fragments)
    assert not marker.exists()


def test_ini_paths_are_relative_to_the_ini_file(pytester):
    sub = pytester.mkdir("sub")
    pytester.makeini("[pytest]\nopperf_thresholds = ci/t.toml\n")
    (pytester.path / "ci").mkdir()
    (pytester.path / "ci" / "t.toml").write_text("[regression]\nmax_slowdown = 0.5\n")
    pytester.makepyfile("def test_x(): pass")
    monkeypatch = pytest.MonkeyPatch()
    try:
        monkeypatch.chdir(sub)
        result = pytester.runpytest(str(pytester.path), "--opperf", f"--rootdir={pytester.path}",
                                    f"-c={pytester.path / 'tox.ini'}")
    finally:
        monkeypatch.undo()
    assert result.ret == 0, result.stdout.str()
    assert "thresholds " in result.stdout.str() and "ci/t.toml" in result.stdout.str()
