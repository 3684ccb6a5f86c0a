"""Per-op benchmarks: pytest-benchmark's machinery, a device-aware timer, runs of kind op."""

import json

import pytest

from tests.opperf_suites import inner_run_env  # noqa: F401

pytest_plugins = ["pytester"]

# pytest-benchmark times the rounds with the marker's timer: a fake clock that
# nap() advances by exactly its time (and each reading by 1 us), so the round
# times are known in advance whatever the machine's load.
OPS = """
import pytest

NOW_S = [0.0]

def clock():
    NOW_S[0] += 1e-6
    return NOW_S[0]

pytestmark = pytest.mark.benchmark(timer=clock)

def nap(ms):
    NOW_S[0] += ms / 1000

def test_relu(opperf_benchmark):
    opperf_benchmark.describe(stat="relu", config={"shape": [32, 64]}, flops=2048, bytes=16384)
    assert opperf_benchmark.pedantic(nap, args=({ms},), rounds=12, warmup_rounds=1) is None

def test_clone(opperf_benchmark):
    opperf_benchmark.describe(kind="overhead", stat="ProgramCloneTimer")
    opperf_benchmark.pedantic(nap, args=(0.2,), rounds=6, iterations=2)
"""


def results_of(pytester, *args, ms=0.5):
    pytester.makepyfile(test_ops=OPS.replace("{ms}", str(ms)))
    result = pytester.runpytest("--opperf", "--opperf-json=r.json", *args)
    path = pytester.path / "r.json"
    return result, json.loads(path.read_text()) if path.exists() else None


def test_benchmarks_become_op_runs(pytester):
    result, data = results_of(pytester)
    result.assert_outcomes(passed=2)
    relu, clone = data["runs"]
    assert (relu["id"], relu["kind"], clone["kind"]) == ("test_ops.py::test_relu", "op", "overhead")
    assert relu["config"] == {"shape": [32, 64], "benchmark": {"rounds": 12, "iterations": 1}}
    (s,) = relu["stats"]
    assert (s["name"], s["count"], len(s["samples_ms"])) == ("relu", 12, 12)
    assert all(0.5 <= x < 5.0 for x in s["samples_ms"])
    assert s["total_ms"] == pytest.approx(
        sum(s["samples_ms"]), rel=1e-4
    )  # samples stored to 5 digits
    assert s["flops"] == 12 * 2048 and s["bytes"] == 12 * 16384
    assert (relu["batches"], relu["examples"], relu["counts"]) == (12, 12, {})
    (c,) = clone["stats"]
    assert (c["name"], c["count"], len(c["samples_ms"])) == ("ProgramCloneTimer", 12, 6)
    assert clone["config"]["benchmark"] == {"rounds": 6, "iterations": 2}
    result.stdout.fnmatch_lines(
        [
            "per-op benchmarks (device=cpu timing=host), unit: ms per call",
            "run * rounds * median * mean * min * max * GFLOP/s * GB/s",
            "test_ops.py::* (op)",
            "  test_relu * 12 *",
            "test_ops.py::* (overhead)",
            "  test_clone * 6 *",
        ]
    )
    assert "benchmark: 2 tests" not in result.stdout.str()  # one table of the runs: opperf's


@pytest.mark.parametrize(("args", "table"), [
    ((), False),
    (("--benchmark-columns=min,max",), True),
    (("--benchmark-verbose",), True),
])
def test_a_projects_own_benchmarks_print_pytest_benchmarks_table_only_when_asked(
        pytester, args, table):
    """In a project of one's own (no conftest quieting anything) ``--opperf`` prints one table of
    the per-op runs, the opperf report's; the options of pytest-benchmark's bring its back."""
    result, _ = results_of(pytester, *args)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert ("benchmark: 2 tests" in out) is table and "per-op benchmarks (device=cpu" in out
    if table:
        assert out.index("benchmark: 2 tests") < out.index("= opperf =")  # the verdict last
    plain = pytester.runpytest("-p", "no:cacheprovider")  # without --opperf: untouched
    assert plain.ret == 0


def test_a_slower_op_is_drift_and_fails_with_time_gated(pytester):
    result, _ = results_of(pytester, "--opperf-save=base.json", ms=0.5)
    assert result.ret == 0
    result, data = results_of(pytester, "--opperf-baseline=base.json", ms=1.5)
    assert result.ret == 0, result.stdout.str()  # time against a stored baseline is drift
    beyond = [r for r in data["gate"]["drift"]["rows"] if r["beyond"]]
    assert [(r["run"], r["metric"]) for r in beyond] == [("test_ops.py::test_relu", "call_ms:relu")]
    pytester.makefile(".toml", t='[regression]\ntime = "gate"\n')
    result, data = results_of(pytester, "--opperf-baseline=base.json", "--opperf-thresholds=t.toml",
                              ms=1.5)
    assert result.ret == 1
    (v,) = data["gate"]["violations"]
    assert (v["run"], v["metric"]) == ("test_ops.py::test_relu", "call_ms:relu")
    assert v["value"] / v["baseline"] > 2


def test_calibrated_benchmark_and_benchmark_options(pytester):
    pytester.makepyfile("""
        def test_sum(opperf_benchmark):
            assert opperf_benchmark(sum, range(100)) == 4950
    """)
    result = pytester.runpytest("--opperf", "--opperf-json=r.json", "--benchmark-max-time=0.02",
                                "--benchmark-min-rounds=7")
    result.assert_outcomes(passed=1)
    (run,) = json.loads((pytester.path / "r.json").read_text())["runs"]
    assert run["stats"][0]["name"] == "test_sum"  # the test's name without describe()
    assert run["batches"] >= 7
    assert run["config"]["benchmark"]["iterations"] >= 1


def test_without_opperf_the_target_runs_once(pytester):
    pytester.makepyfile("""
        calls = []
        def test_x(opperf_benchmark):
            assert opperf_benchmark(calls.append, 1) is None
            pedantic = opperf_benchmark.pedantic
            assert pedantic(lambda a, b: a + b, setup=lambda: ((1, 2), {}), rounds=50) == 3
            assert calls == [1]
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "benchmark" not in result.stdout.str().split("passed")[-1]
    assert "= opperf =" not in result.stdout.str()


def test_disabled_benchmarks_are_untimed_and_said_so(pytester):
    result, data = results_of(pytester, "--benchmark-disable")
    result.assert_outcomes(passed=2, warnings=2)
    assert data["runs"] == []
    result.stdout.fnmatch_lines(["*OpPerfBenchmarkWarning: test_ops.py::test_relu: not timed*",
                                 "note: 2 per-op benchmark(s) ran untimed *"])


GPU = """
from pytest_opperf.device import DeviceInfo

class Clock:
    def __init__(self):
        self.t = 0
        self.calls = []
    def mark(self):
        self.t += 1_000  # 1 us of device time between markers
        self.calls.append("mark")
        return self.t
    def elapsed_ns(self, a, b):
        return b - a
    def synchronize(self):
        self.calls.append("sync")
    def recycle(self):
        self.calls.append("recycle")

CLOCK = Clock()
SYNCS = []

def pytest_opperf_select_device(config, requested):
    return DeviceInfo(name="cuda:0 (Fake)", is_gpu=True, clock=CLOCK,
                      synchronize=lambda: SYNCS.append(1), device_class="fake")
"""


@pytest.mark.parametrize("timing", ["events", "sync"])
def test_gpu_timer_goes_through_pytest_benchmark(pytester, timing):
    pytester.makeconftest(GPU)
    pytester.makepyfile("""
        import pytest, conftest
        @pytest.mark.benchmark(min_rounds=3)
        def test_op(opperf_benchmark, request):
            before = (len(conftest.SYNCS), len(conftest.CLOCK.calls))
            opperf_benchmark.pedantic(lambda: None, rounds=4)
            print("TIMER", request.node.get_closest_marker("benchmark").kwargs["timer"].__name__)
            print("CALLS", len(conftest.SYNCS) - before[0], len(conftest.CLOCK.calls) - before[1])
    """)
    result = pytester.runpytest(
        "-s", "--opperf", f"--opperf-timing={timing}", "--opperf-json=r.json"
    )
    result.assert_outcomes(passed=1)
    (run,) = json.loads((pytester.path / "r.json").read_text())["runs"]
    samples = run["stats"][0]["samples_ms"]
    if timing == "events":
        # each round is read between two timer calls: 1 us between the opening and the closing
        # marker
        result.stdout.fnmatch_lines(["*TIMER opperf_event_timer", "CALLS 0 *"])
        assert samples == [pytest.approx(0.001)] * 4
        assert (run["timing"], run["stats"][0]["clock"]) == ("events", "device")
    else:
        result.stdout.fnmatch_lines(
            ["*TIMER opperf_sync_timer", "CALLS 8 0"]
        )  # a sync before and after each round
        assert len(samples) == 4 and run["timing"] == "sync"
