"""The Paddle suite's report sections, pure (no paddle needed): the counts against the reference
report, and the peer table with a Paddle column and the threads of each framework."""

from __future__ import annotations

from pytest_opperf.device import CPU_HOST
from pytest_opperf.measure import op_run
from suites.paddle.against_report import REPORT_COUNTS, compare_counts
from suites.torch.peer import peer_lines


def test_counts_per_iteration_are_the_reports_over_80_and_each_row_says_what_changed() -> None:
    assert REPORT_COUNTS["conv2d"] / 80 == 53 and REPORT_COUNTS["momentum"] / 80 == 161
    counts = {"conv2d": 53, "relu": 48, "add": 17, "cross_entropy_with_softmax": 1,
              "full_int_array": 3}
    rows = {(r[0] or r[2]): r for r in compare_counts(counts, ran={"gaussian"})}
    assert rows["conv2d"] == ("conv2d", "53", "conv2d", "53", "match")
    assert rows["relu"] == ("relu", "49", "relu", "48", "count differs")
    assert rows["elementwise_add"] == ("elementwise_add", "17", "add", "17", "renamed")
    assert rows["cross_entropy"][2:] == ("cross_entropy_with_softmax", "1", "fused")
    assert rows["gaussian_random"] == ("gaussian_random", "0.66", "gaussian", "0", "startup")
    assert rows["conv2d_grad"][4] == "not run" and rows["fill_constant"][1] == "7.74"
    assert rows["full_int_array"] == ("", "", "full_int_array", "3", "new")


def _op(run_id: str, stat: str, ms: float, config: dict | None = None) -> object:
    return op_run(run_id, stat, [ms / 1e3] * 5, 1, CPU_HOST, "host", config=config)


def test_the_peer_table_gets_a_paddle_column_over_the_shapes_every_framework_ran() -> None:
    ref = "suites/test_ops.py::test_op"
    tor, pad = "suites/torch/test_torch.py::test_op", "suites/paddle/test_paddle.py::test_op"
    runs = [_op(f"{ref}[conv2d-a]", "conv2d", 4.0), _op(f"{tor}[conv2d-a]", "conv2d", 1.0,
                                                          {"torch_threads": 2}),
            _op(f"{pad}[conv2d-a]", "conv2d", 2.0, {"paddle_threads": 2}),
            _op(f"{ref}[relu-a]", "relu", 0.3), _op(f"{tor}[relu-a]", "relu", 0.1,
                                                      {"torch_threads": 2})]  # no Paddle relu
    lines = peer_lines(runs)
    assert lines[0].split() == ["op", "type", "shapes", "reference", "ms", "torch", "ms", "paddle",
                                "ms", "reference/torch", "reference/paddle"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:] if line.split()}
    assert rows["conv2d"] == ["1", "4.000", "1.000", "2.000", "4.000", "2.000"]
    assert "relu" not in rows  # Paddle did not run it: not a shape every framework ran
    assert lines[-1].startswith("threads: reference ") and lines[-1].endswith(
        "torch 2, paddle 2")
