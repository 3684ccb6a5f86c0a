"""--opperf-shard=K/N: the partition (pytest_opperf.comparison.shard, pure)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from pytest_opperf.comparison import shard

# --- the partition (pure) -------------------------------------------------------------------


@pytest.mark.parametrize("text, shown", [("2/3", "2/3"), (" 1 / 1 ", "1/1"), ("5/5", "5/5")])
def test_parse_reads_k_of_n(text, shown):
    assert str(shard.parse(text)) == shown


@pytest.mark.parametrize("text, fragment", [("0/3", "in [1, 3]"), ("4/3", "in [1, 3]"),
                                            ("1/0", "[1, 1000]"), ("3", "expected K/N"),
                                            ("a/b", "expected K/N"), ("1/1001", "[1, 1000]")])
def test_parse_refuses_what_is_no_shard(text, fragment):
    with pytest.raises(shard.ShardError, match=fragment.replace("[", r"\[")):
        shard.parse(text)


IDS = [f"suites/test_ops.py::test_op[op{i:02d}]" for i in range(23)]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_the_parts_partition_the_ids_whatever_their_order(count):
    expected = {i: float(1 + (n * 7) % 11) for n, i in enumerate(IDS)}
    parts = shard.partition(IDS, count, expected)
    assert len(parts) == count
    assert sorted(i for part in parts for i in part) == sorted(IDS)  # each id exactly once
    for part in parts:  # each part in the order of the ids
        assert part == [i for i in IDS if i in set(part)]
    shuffled = list(IDS)
    random.Random(count).shuffle(shuffled)
    again = shard.partition(shuffled, count, expected)
    assert [set(p) for p in again] == [set(p) for p in parts]


def test_the_parts_are_balanced_by_the_durations_longest_first():
    expected = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 3.0, "e": 2.0, "f": 1.0}
    parts = shard.partition(list(expected), 2, expected)
    loads = sorted(sum(expected[i] for i in p) for p in parts)
    assert loads == [9.0, 9.0]
    # by count (no durations): sizes differ by one at most
    sizes = sorted(len(p) for p in shard.partition(IDS, 4))
    assert sizes == [5, 6, 6, 6]


def test_a_test_without_a_duration_counts_as_the_median():
    expected = {"a": 10.0, "b": 1.0, "c": 1.0, "d": 1.0}  # "new" gets the median, 1.0
    parts = shard.partition(["a", "b", "c", "d", "new"], 2, expected)
    assert ["a"] in parts  # the one long test alone; the four of 1 s together


def test_select_needs_a_test_per_shard():
    assert shard.select(["a", "b"], shard.Shard(2, 2)) in (["a"], ["b"])
    with pytest.raises(shard.ShardError, match="2 test.* for 3 shards"):
        shard.select(["a", "b"], shard.Shard(1, 3))


def test_durations_add_up_the_runs_of_each_test():
    runs = [SimpleNamespace(id="t.py::a", wall_s=2.0), SimpleNamespace(id="t.py::a#second",
                                                                       wall_s=1.5),
            SimpleNamespace(id="t.py::b", wall_s=0.5), SimpleNamespace(id="gone.py::x", wall_s=9)]
    assert shard.durations(runs, ["t.py::a", "t.py::b", "t.py::c"]) == {"t.py::a": 3.5,
                                                                        "t.py::b": 0.5}


def test_the_selection_is_named_by_its_ids_not_their_order():
    assert shard.selection_id(["a", "b"]) == shard.selection_id(["b", "a"])
    assert shard.selection_id(["a", "b"]) != shard.selection_id(["a", "c"])
