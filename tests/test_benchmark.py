"""The reference benchmark loop: per-iteration op counts equal to the reference
report's, the result's figures, determinism, learning, and the command line."""

from __future__ import annotations

import pytest

import reference_framework as rf
from pytest_opperf import timers
from reference_framework.benchmark import (
    WORKLOADS,
    BenchmarkConfig,
    main,
    python_share,
    run_benchmark,
)

# The reference report's Stat= counts over its 80 iterations (startup included).
REPORT_COUNTS = {
    "conv2d_grad": 4240,
    "conv2d": 4240,
    "batch_norm_grad": 4240,
    "batch_norm": 4240,
    "sum": 1440,
    "relu_grad": 3920,
    "relu": 3920,
    "elementwise_add_grad": 1360,
    "elementwise_add": 1360,
    "momentum": 12880,
    "pool2d_grad": 160,
    "pool2d": 160,
    "cast": 320,
    "mul": 80,
    "mul_grad": 80,
    "accuracy": 80,
    "top_k": 80,
    "softmax": 80,
    "softmax_grad": 80,
    "cross_entropy": 80,
    "cross_entropy_grad": 80,
    "elementwise_div": 80,
    "mean": 80,
    "mean_grad": 80,
    "feed": 160,
    "fetch": 240,
}
REPORT_ITERATIONS = 80


@pytest.fixture(scope="module")
def tiny_run():
    """The tiny workload, recorded, with the table's counts after every batch."""
    snapshots = []
    with timers.recording() as table:
        result = run_benchmark(
            WORKLOADS["tiny"],
            on_batch=lambda n: snapshots.append((n, {k: s.count for k, s in table.items()})),
        )
    return result, table, snapshots


def test_each_iteration_runs_the_reference_reports_operators(tiny_run):
    _, _, snapshots = tiny_run
    (_, first), (_, last) = snapshots[0], snapshots[-1]
    n = len(snapshots) - 1  # iterations between the first snapshot and the last
    per_iteration = {name: (last[name] - first.get(name, 0)) / n for name in last}
    want = {name: count / REPORT_ITERATIONS for name, count in REPORT_COUNTS.items()}
    assert {name: per_iteration.get(name, 0) for name in want} == want
    assert per_iteration["ExecutorRunTimer"] == 2  # the training run and the accuracy eval
    assert per_iteration["conv2d"] == 53 and per_iteration["momentum"] == 161  # spelled out


def test_startup_initialises_with_53_gaussian_and_1_uniform_random(tiny_run):
    _, table, _ = tiny_run
    assert table["gaussian_random"].count == 53 and table["uniform_random"].count == 1


def test_on_batch_comes_after_the_accuracy_eval_with_the_batch_size(tiny_run):
    _, _, snapshots = tiny_run
    assert [n for n, _ in snapshots] == [4, 4, 4]
    assert [counts["elementwise_div"] for _, counts in snapshots] == [1, 2, 3]


def test_result_figures(tiny_run):
    result, table, _ = tiny_run
    assert result.examples == 12 and result.batches == 3 and len(result.losses) == 3
    assert result.sec_per_batch == pytest.approx(result.wall_s / 3)  # per batch, not per example
    assert result.examples_per_sec == pytest.approx(12 / result.wall_s)
    # the clock started before the model was built: it covers every executor run
    assert table["ExecutorRunTimer"].total_ms / 1e3 < result.wall_s
    share = python_share(result.wall_s, table)
    assert share == pytest.approx(1 - table["ExecutorRunTimer"].total_ms / 1e3 / result.wall_s)
    assert 0 < share < 1
    assert all(0 <= a <= 1 for a in result.accuracies + result.pass_accuracies)


def test_runs_are_deterministic_and_the_overhead_switches_change_no_result(tiny_run):
    result, _, _ = tiny_run
    again = run_benchmark(WORKLOADS["tiny"].no_overheads())
    assert again.losses == result.losses and again.accuracies == result.accuracies


def test_the_loop_learns_the_synthetic_dataset():
    """ResNet-18 at 32x32: the pass accuracy after 15 batches of 16 is far above
    chance (1/102)."""
    config = WORKLOADS["tiny"].replace(depth=18, batch_size=16, iterations=15).no_overheads()
    result = run_benchmark(config)
    assert result.pass_accuracies[-1] > 0.1
    assert sum(result.losses[-5:]) < sum(result.losses[:5])


def test_workloads():
    tiny, small, full = WORKLOADS["tiny"], WORKLOADS["small"], WORKLOADS["full"]
    assert (full.batch_size, full.image_size, full.iterations, full.class_dim, full.depth) == (
        32,
        224,
        80,
        102,
        50,
    )
    assert (small.batch_size, small.image_size, small.iterations) == (8, 64, 10)
    assert (tiny.batch_size, tiny.image_size, tiny.iterations, tiny.depth) == (4, 32, 3, 50)
    for config in WORKLOADS.values():  # the report's executor: every overhead on
        assert not (config.use_program_cache or config.cache_ops or config.reuse_local_scope)
    off = tiny.no_overheads()
    assert off.use_program_cache and off.cache_ops and off.reuse_local_scope


@pytest.mark.parametrize(("change", "message"), [
    ({"order": "NHWC"}, "order 'NHWC' is not supported; .* NCHW only"),
    ({"device": "TPU"}, "device must be 'CPU' or 'GPU', given 'TPU'"),
    ({"batch_size": 0}, "batch_size must be a positive int, given 0"),
    ({"depth": 42}, r"depth must be one of \[18, 34, 50, 101, 152\], given 42"),
    ({"class_dim": 1000}, "class_dim must be at most the dataset's 102 classes, given 1000"),
])
def test_bad_configs_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        BenchmarkConfig(**change)


def test_main_prints_the_reports_summary(capsys):
    assert main(["--workload", "tiny", "--iterations", "2", "--no_overheads"]) == 0
    out = capsys.readouterr().out
    assert "Iter: 0, loss: [" in out and "Iter: 1, loss: [" in out
    assert "Total examples: 8, total time: " in out
    assert " examples/sec, " in out and " sec/batch" in out
    assert "Stat=ExecutorRunTimer" in out and "Stat=conv2d_grad" in out
    assert "Python share: (wall - ExecutorRunTimer) / wall = (" in out
    assert "max RSS: " in out


def test_main_refuses_nhwc_and_a_missing_gpu_with_a_message(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--order", "NHWC"])
    assert exc.value.code == 2
    assert "order 'NHWC' is not supported" in capsys.readouterr().err
    if not rf.gpu_available():
        with pytest.raises(SystemExit):
            main(["--device", "GPU"])
        assert "--device GPU: no usable GPU here" in capsys.readouterr().err
