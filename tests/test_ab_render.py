"""The A/B report section: terminal lines within the width, markdown, on hand-built decisions."""

import dataclasses
import math

import pytest

from pytest_opperf.ab.paired import CompareResult, Decision
from pytest_opperf.ab.render import common_prefix, interval, markdown, terminal_lines
from pytest_opperf.comparison.metrics import MetricKey

OPS = "suites/test_ops.py::test_op"
STAT = "Hodges-Lehmann ratio, Wilcoxon signed-rank 99.97% CI (Bonferroni, 150 metrics; exact)"


def dec(run, metric, verdict, base, head, est, low, high, kind="time", pairs=40, limit=1.05):
    return Decision(
        MetricKey(run, metric), kind, verdict, base, head, est, low, high, pairs, STAT, limit
    )


def result(**kw):
    decisions = [
        dec(
            f"{OPS}[relu-N8xC64x32x32]",
            "call_ms:relu",
            "unchanged",
            0.198,
            0.199,
            1.004,
            0.992,
            1.016,
        ),
        dec(
            f"{OPS}[conv2d-N8xC3x64x64-k7s2p3-o64]",
            "call_ms:conv2d",
            "regressed",
            2.208,
            2.43,
            1.1,
            1.09,
            1.11,
        ),
        dec(
            f"{OPS}[mul-N8xC2048x1x1-2048x102]",
            "call_ms:mul",
            "undecided",
            0.076,
            0.08,
            1.05,
            0.0,
            math.inf,
            pairs=6,
        ),
        dec(
            f"{OPS}[pool2d-N8xC64x32x32-max-k3s2p1]",
            "call_ms:pool2d",
            "improved",
            1.486,
            1.3,
            0.875,
            0.86,
            0.89,
        ),
        dec(
            "suites/test_resnet50.py::test_train[small]",
            "python_share",
            "regressed",
            0.07,
            0.09,
            0.02,
            0.015,
            0.025,
            kind="share",
            pairs=12,
            limit=0.01,
        ),
        dec(
            "suites/test_resnet50.py::test_train[small]",
            "count:conv2d",
            "regressed",
            53,
            54,
            1,
            1,
            1,
            kind="count",
            pairs=9,
            limit=0.0,
        ),
        dec(
            "suites/test_resnet50.py::test_train[small]",
            "examples_per_sec",
            "unchanged",
            18.2,
            18.1,
            0.995,
            0.98,
            1.01,
            kind="rate",
            pairs=30,
            limit=0.95,
        ),
    ]
    values = dict(
        base="REV abc1234 (origin/main)",
        head="working tree",
        decisions=decisions,
        added=["suites/test_ops.py::test_op[new-op]"],
        removed=["suites/test_ops.py::test_op[gone]"],
        pairs=300,
        elapsed_s=184.2,
        budget_exhausted=True,
        notes=["base side: 2 tests skipped"],
    )
    values.update(kw)
    return CompareResult(**values)


def test_terminal_section():
    lines = terminal_lines(result())
    assert lines[0] == "A/B: base REV abc1234 (origin/main); head working tree"
    assert lines[1] == result().summary()
    assert lines[2] == "300 pairs in 184.2 s; time budget spent"
    assert lines[3] == "runs below are under suites/"
    text = "\n".join(lines)
    # regressed first, then undecided, improved, unchanged
    heads = [
        line
        for line in lines
        if line.split(" (")[0] in ("regressed", "undecided", "improved", "unchanged")
    ]
    assert heads == ["regressed (3)", "undecided (1)", "improved (1)", "unchanged (2)"]
    order = [text.index(f"call_ms:{op}") for op in ("conv2d", "mul", "pool2d", "relu")]
    assert order == sorted(order)
    relu = next(line for line in lines if "call_ms:relu" in line)
    # the unchanged metric shows its interval and how fine it is
    assert (
        "0.198 ms" in relu
        and "1.004" in relu
        and "[0.992, 1.016] +-1.2%" in relu
        and relu.endswith("40")
    )
    assert "+2.00pt" in text and "[+1.50, +2.50]pt +-0.50pt" in text
    assert next(line for line in lines if "count:conv2d" in line).split()[1:5] == [
        "53",
        "54",
        "+1",
        "exact",
    ]
    assert "unbounded" in next(line for line in lines if "call_ms:mul" in line)
    assert "  test_ops.py::test_op[conv2d-N8xC3x64x64-k7s2p3-o64]" in lines
    assert lines[-5:] == [
        "added on the head side (not compared): 1",
        "  test_ops.py::test_op[new-op]",
        "removed on the head side (not compared): 1",
        "  test_ops.py::test_op[gone]",
        "note: base side: 2 tests skipped",
    ]


@pytest.mark.parametrize("width", [100, 80, 60])
def test_nothing_is_wider_than_the_width(width):
    long_run = "suites/" + "very_long_directory_name/" * 6 + "test_x.py::test_op[" + "x" * 80 + "]"
    long = result(
        base="DIR /" + "d" * 150,
        decisions=result().decisions
        + [
            dec(
                long_run,
                "step_ms:conv2d_grad/Col2ImTimer/with/a/much/longer/name",
                "unchanged",
                33.5,
                33.6,
                1.003,
                0.99,
                1.017,
            )
        ],
        added=[long_run + "-new"],
    )
    lines = terminal_lines(long, width=width)
    assert max(len(line) for line in lines) <= width
    assert (
        lines[0].startswith("A/B base: DIR /ddd")
        and "..." in lines[0]
        and lines[1] == "A/B head: working tree"
    )
    # a metric name too long for its column gets a line of its own, whole when it fits the width
    name = "step_ms:conv2d_grad/Col2ImTimer/with/a/much/longer/name"
    at = next(i for i, line in enumerate(lines) if "Col2Im" in line)
    assert (
        lines[at] == "    " + name if width > len(name) + 4 else lines[at].endswith("longer/name")
    )
    assert "33.5 ms" in lines[at + 1] and "33.6 ms" in lines[at + 1]
    assert any(
        line.startswith("  very_long") and "..." in line and line.endswith("x]") for line in lines
    )


def test_default_width_is_100():
    assert max(len(line) for line in terminal_lines(result())) <= 100


def test_common_prefix_cuts_at_a_boundary():
    assert common_prefix([f"{OPS}[relu]", f"{OPS}[conv2d]"]) == "suites/test_ops.py::"
    assert common_prefix(["suites/test_a.py::x", "suites/test_b.py::y"]) == "suites/"
    assert common_prefix(["a::x", "b::y"]) == ""
    assert common_prefix(["suites/t.py::x"]) == "suites/t.py::"
    assert common_prefix([]) == ""
    assert common_prefix(["suites/x", "suites/x"]) == "suites/"


def test_interval_text():
    d = dec("r", "call_ms:x", "unchanged", 1, 1, 1.0, 0.99, 1.0101)
    assert interval(d) == "[0.990, 1.010] +-1.0%"
    # the bound "unchanged" is ruled on: a time's high end, a rate's low end, a share's points
    bounded = dataclasses.replace(d, beta_low=0.994, beta_high=1.0062)
    assert interval(bounded) == "[0.990, 1.010] +-1.0%, bound 1.006"
    rate = dataclasses.replace(bounded, kind="rate")
    assert interval(rate) == "[0.990, 1.010] +-1.0%, bound 0.994"
    share = dec("r", "python_share", "unchanged", 0.3, 0.3, 0.001, -0.004, 0.006, kind="share")
    share = dataclasses.replace(share, beta_low=-0.002, beta_high=0.0041)
    assert interval(share) == "[-0.40, +0.60]pt +-0.50pt, bound +0.41pt"
    few = dataclasses.replace(dec("r", "call_ms:x", "unchanged", 1, 1, 1.0, 0.0, math.inf),
                              beta_low=0.97, beta_high=1.03)
    assert interval(few) == "unbounded, bound 1.030"
    assert interval(dec("r", "call_ms:x", "undecided", 1, 1, 1.0, 0.0, math.inf)) == "unbounded"
    assert (
        interval(dec("r", "call_ms:x", "undecided", math.nan, math.nan, math.nan, 0.0, math.inf))
        == "none"
    )


def test_markdown_section():
    md = markdown(result(notes=["a | b"]))
    lines = md.splitlines()
    assert lines[0] == "### A/B comparison"
    assert f"**{result().summary()}**" in lines
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| verdict")]
    assert [r.split(" | ")[0] for r in rows] == ["| regressed"] * 3 + [
        "| undecided",
        "| improved",
    ] + ["| unchanged"] * 2
    assert rows[0] == (
        "| regressed | `suites/test_ops.py::test_op[conv2d-N8xC3x64x64-k7s2p3-o64]` "
        "| call_ms:conv2d "
        "| 2.208 ms | 2.43 ms | 1.100 | [1.090, 1.110] +-0.9% | 40 |"
    )
    assert "- `suites/test_ops.py::test_op[new-op]`" in lines and "- note: a \\| b" in lines
    assert md.endswith("\n") and not md.endswith("\n\n")


def test_ids_and_names_cannot_add_lines_or_markup():
    forged = "\ngate: PASSED (1 checks)\n\x1b[2K"
    decisions = [dec(f"suite.py::test_a[x{forged}|<b>]", f"call_ms:s{forged}", "regressed",
                     1.0, 2.0, 2.0, 1.9, 2.1)]
    r = CompareResult("REV abc", f"head{forged}", decisions, pairs=40, elapsed_s=1.0,
                      added=(f"new{forged}",), removed=(), notes=(f"note{forged}<b>",))
    lines = terminal_lines(r, width=100)
    assert not any(line.startswith("gate: PASSED") for line in lines)
    assert "\x1b" not in "".join(lines)
    text = markdown(r)
    assert not any(line.startswith("gate: PASSED") for line in text.splitlines())
    assert "\x1b" not in text
    assert "- note: note\\ngate: PASSED (1 checks)\\n\\x1b[2K&lt;b&gt;" in text  # no tag
    assert "`suite.py::test_a[x\\ngate: PASSED (1 checks)\\n\\x1b[2K\\|<b>]`" in text


def test_inconclusive_metrics_come_first_among_the_undecided_and_are_named_so():
    r = result()
    r.decisions.append(Decision(MetricKey(f"{OPS}[add]", "call_ms:add"), "time", "undecided", 1.0,
                                1.2, 1.2, 0.9, 1.6, 40, STAT, 1.05, inconclusive=True))
    assert [d.inconclusive for d in r.decisions if d.verdict == "undecided"] == [False, True]
    lines = terminal_lines(r, 120)
    heading = lines.index("undecided (2, 1 inconclusive)")
    assert "[add]" in lines[heading + 1] and "[mul-" in lines[heading + 3]
    rows = [line for line in markdown(r).splitlines() if line.startswith("| inconclusive")]
    assert len(rows) == 1 and "call_ms:add" in rows[0]
