"""The memory both A/B sides share (pytest_opperf.ab.arena) and a side's blocks placed in it."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import numpy as np
import pytest

from pytest_opperf.ab import arena as arena_mod
from pytest_opperf.ab.arena import (
    MIN_ALLOCATION,
    MIN_INPUT_BYTES,
    FirstFit,
    SharedArena,
    eligible,
    input_bytes,
    shared_fd,
)

# --- the allocator over offsets -----------------------------------------------------------------


def test_first_fit_starts_at_the_cursor_on_cache_lines_and_fills_the_first_gap():
    fit = FirstFit(1024, align=64)
    fit.cursor = 128
    a = fit.allocate(10)
    b = fit.allocate(100)
    c = fit.allocate(64)
    assert (a, b, c) == (128, 192, 320)
    fit.free(b)
    assert fit.allocate(64) == 192  # the first gap from the cursor that fits
    assert fit.allocate(100) == 384  # the rest of the old gap is too small
    assert fit.live == {128: 64, 192: 64, 320: 64, 384: 128}


def test_first_fit_wraps_to_the_start_and_says_when_nothing_fits():
    fit = FirstFit(1024, align=64)
    fit.cursor = 768
    assert fit.allocate(256) == 768
    assert fit.allocate(256) == 0  # past the end: from the start
    assert fit.allocate(512) == 256
    assert fit.allocate(1) is None
    with pytest.raises(ValueError, match="not allocated"):
        fit.free(64)
    fit.free(0)
    assert fit.allocate(0) == 0  # at least one byte, one line


# --- which calls are placed ---------------------------------------------------------------------


def test_input_bytes_counts_distinct_contiguous_arrays_at_any_depth():
    x = np.zeros(MIN_INPUT_BYTES // 8, np.float64)
    y = np.zeros((64, 64), np.float32, order="F")
    strided = np.zeros(1000)[::2]
    tree = ({"X": x, "Y": [y, x], "S": strided, "O": np.array([None])}, {"k": 1})
    assert input_bytes(tree) == x.nbytes + y.nbytes
    assert eligible(tree) and not eligible(({"X": y}, {}))
    assert not eligible(np.zeros(arena_mod.MAX_INPUT_BYTES // 4 + 1, np.float32))


# --- one side's mapping -------------------------------------------------------------------------


def _mapped(count: int = 1) -> Any:
    """``count`` mappings of one new shared file, as that many sides have (kept for the
    process's life); one alone when ``count`` is 1."""
    fd = shared_fd()
    try:
        arenas = tuple(SharedArena(fd) for _ in range(count))
    finally:
        os.close(fd)
    return arenas[0] if count == 1 else arenas


@pytest.fixture(scope="module")
def sides() -> tuple[SharedArena, SharedArena]:
    """Two mappings of one shared file, as two sides have."""
    return _mapped(2)


def _at(arena: SharedArena, array: np.ndarray) -> int | None:
    ptr = array.__array_interface__["data"][0]
    return ptr - arena.base if arena._inside(ptr) else None


def test_a_placed_call_has_its_inputs_and_output_in_the_shared_memory_from_the_seeds_page(sides):
    one, two = sides
    x = np.arange(MIN_INPUT_BYTES // 4, dtype=np.float32)
    y = np.full(MIN_INPUT_BYTES // 4, 2.0, np.float32)
    offsets = []
    for arena in (one, two):  # two sides, one seed: the same places in the same memory
        with arena.place(({"X": x, "Y": y, "Again": x}, {"k": 1}), seed=5) as (ins, attrs):
            assert attrs == {"k": 1} and ins["Again"] is ins["X"]  # one copy of one array
            assert np.array_equal(ins["X"], x) and ins["X"] is not x
            out = ins["X"] + ins["Y"]
            small = np.ones(MIN_ALLOCATION // 8 - 1)  # below MIN_ALLOCATION: malloc's
            offsets.append([_at(arena, a) for a in (ins["X"], ins["Y"], out, small)])
            assert arena.fit.cursor % arena_mod.PAGE == 0
            assert offsets[-1][0] == arena.fit.cursor
            del ins, attrs, out, small
        assert arena.kept() == 0 and arena.broken is None
    assert offsets[0] == offsets[1]
    start = offsets[0][0]
    assert offsets[0] == [start, start + x.nbytes, start + 2 * x.nbytes, None]
    with one.place((x,), seed=6) as (copy,):
        assert _at(one, copy) != start  # another seed, another page
        del copy


def test_what_one_side_writes_the_other_reads(sides):
    one, two = sides
    x = np.zeros(MIN_INPUT_BYTES // 4, np.float32)
    with one.place((x,), seed=9) as (copy,):
        copy[:] = 7.0
        at = _at(one, copy)
        assert at is not None
        seen = np.frombuffer(two.region, np.float32, 4, at)
        assert seen.tolist() == [7.0] * 4
        del copy, seen


def test_outside_a_block_and_in_other_threads_numpy_keeps_its_own_memory(sides):
    one, _ = sides
    x = np.zeros(MIN_INPUT_BYTES // 4, np.float32)
    made: list[np.ndarray] = []
    with one.place((x,), seed=1) as (copy,):
        thread = threading.Thread(target=lambda: made.append(np.ones(1 << 16)))
        thread.start()
        thread.join()
        assert _at(one, copy) is not None and _at(one, made[0]) is None
        del copy
    assert _at(one, np.ones(1 << 16)) is None and one.kept() == 0


def test_zeroed_and_grown_arrays_in_the_shared_memory_are_right(sides):
    one, _ = sides
    x = np.zeros(MIN_INPUT_BYTES // 4, np.float32)
    with one.place((x,), seed=3) as (copy,):
        dirty = np.full(MIN_INPUT_BYTES // 4, 5.0, np.float32)  # the memory zeros get next
        at = _at(one, dirty)
        del copy, dirty
        zeros = np.zeros(MIN_INPUT_BYTES // 4, np.float32)  # calloc: zeroed in the file too
        assert _at(one, zeros) == at and not zeros.any()
        grown = np.arange(2048, dtype=np.float64)
        grown.resize(4096, refcheck=False)  # realloc: moved within the file, data kept
        assert _at(one, grown) is not None and grown[:2048].tolist() == list(range(2048))
        del zeros, grown
    assert one.kept() == 0


def test_the_result_is_copied_out_of_the_shared_memory_views_too(sides):
    one, _ = sides
    x = np.arange(MIN_INPUT_BYTES // 4, dtype=np.float32)
    mine = np.ones(3)
    with one.place((x,), seed=4) as (copy,):
        out = {"Out": copy * 2, "View": copy[1:], "Mine": mine, "List": [copy]}
        private = one.private(out)  # within the block too: numpy's own memory
        del copy, out
    assert all(_at(one, a) is None for a in (private["Out"], private["View"], private["List"][0]))
    assert private["Mine"] is mine and private["View"][0] == 1.0
    assert private["Out"][3] == 6.0
    assert one.kept() == 0


def test_an_array_kept_past_its_block_stops_the_placing_for_good():
    arena = _mapped()
    x = np.zeros(MIN_INPUT_BYTES // 4, np.float32)
    kept = []
    with arena.place((x,), seed=2) as (copy,):
        kept.append(copy + 1)
        del copy
    assert arena.kept() == 1 and "outlived" in (arena.broken or "")
    kept.clear()
    assert arena.kept() == 0 and arena.broken is not None  # broken stays


def test_the_shared_file_is_a_descriptor_of_the_size_asked():
    fd = shared_fd(1 << 20)
    try:
        assert os.fstat(fd).st_size == 1 << 20
    finally:
        os.close(fd)


def test_from_env_maps_the_named_descriptor_and_says_none_without_one():
    assert SharedArena.from_env({}) is None
    with pytest.raises(OSError):
        SharedArena.from_env({arena_mod.ARENA_FD_ENV: "987654"})  # not open


# --- a side's blocks ----------------------------------------------------------------------------


class FakeSide:
    def __init__(self, orders, arena):
        self.orders, self.sent, self.arena = list(orders), [], arena

    def receive(self):
        return self.orders.pop(0)

    def send(self, message):
        self.sent.append(message)

    def on_cpu(self, cpu, nodeid):
        return contextlib.nullcontext()


class Bench:
    stat = "op"
    request = type("R", (), {"node": type("N", (), {"nodeid": "t::a"})()})()

    def __init__(self):
        self.recorded = []

    def record(self, per_call, iterations, **extra):
        self.recorded.append((per_call, extra))


ORDERS = [{"cmd": "calibrate", "min_round_s": 0.0},
          {"cmd": "block", "rounds": 2, "iterations": 1, "place": 11},
          {"cmd": "block", "rounds": 2, "iterations": 1},
          {"cmd": "block", "rounds": 2, "iterations": 1, "place": 11},
          {"cmd": "go"}]


def test_a_side_runs_blocks_with_a_seed_on_copies_in_the_shared_memory(sides):
    from pytest_opperf.ab.side import ControllerRounds

    one, _ = sides
    x = np.arange(MIN_INPUT_BYTES // 4, dtype=np.float32)
    seen: list[tuple[bool, int | None]] = []

    def kernel(ins, attrs):
        seen.append((ins["X"] is x, _at(one, ins["X"])))
        assert np.array_equal(ins["X"], x) and attrs == {"k": 1}
        return {"Out": ins["X"] * 2}

    side, bench = FakeSide(ORDERS, one), Bench()
    result = ControllerRounds(side, None)._rounds(bench, kernel, ({"X": x}, {"k": 1}), {})
    assert [m.get("ev") for m in side.sent] == ["bench", "calibrated", "block", "block", "block"]
    calibrated, first, given, second = seen[0], seen[1:4], seen[4:7], seen[7:]
    assert calibrated == (True, None) and set(given) == {(True, None)}
    # each placed block (its warm-up call and its rounds) on one copy, where the seed says
    assert len(set(first)) == 1 and first[0][0] is False and first[0][1] is not None
    assert set(second) == set(first)
    assert _at(one, result["Out"]) is None and result["Out"][1] == 2.0  # the result: private
    assert one.kept() == 0
    (per_call, extra), = bench.recorded
    assert len(per_call) == 6 and extra["placement"] == "mixed"


def test_a_side_leaves_small_calls_and_pedantic_setups_in_its_own_memory(sides):
    from pytest_opperf.ab.side import ControllerRounds

    one, _ = sides
    x = np.arange(16, dtype=np.float32)
    where = []

    def kernel(v):
        where.append(_at(one, v))

    bench = Bench()
    ControllerRounds(FakeSide(ORDERS, one), None)._rounds(bench, kernel, (x,), {})
    assert set(where) == {None} and bench.recorded[0][1]["placement"] == "private"


def test_a_kernel_that_keeps_an_array_fails_its_benchmark_and_ends_the_placing():
    from pytest_opperf.ab.side import ControllerRounds

    arena = _mapped()
    x = np.arange(MIN_INPUT_BYTES // 4, dtype=np.float32)
    cache = []

    def kernel(v):
        cache.append(v + 1)

    orders = [o for o in ORDERS if o.get("place") or o["cmd"] != "block"]
    side = FakeSide(orders, arena)
    with pytest.raises(RuntimeError, match="outlived it"):
        ControllerRounds(side, None)._rounds(Bench(), kernel, (x,), {})
    # each block's answer says so: the controller places no more pairs, on either side
    assert ["outlived" in m.get("arena", "") for m in side.sent[2:]] == [True, True]
    placed = sum(_at(arena, a) is not None for a in cache)
    assert placed == 3  # the first block's calls only: the second ran in the process's memory
    cache.clear()


def test_a_side_says_why_it_cannot_place_arrays(monkeypatch):
    from pytest_opperf.ab.side import SidePlugin

    monkeypatch.delenv(arena_mod.ARENA_FD_ENV, raising=False)
    assert "gave no shared memory" in SidePlugin(None, None).arena_why
    monkeypatch.setenv(arena_mod.ARENA_FD_ENV, "987654")  # not open
    side = SidePlugin(None, None)
    assert side.arena is None and side.arena_why.startswith("the shared memory cannot be mapped")
    fd = shared_fd(arena_mod.ARENA_BYTES)
    try:
        monkeypatch.setenv(arena_mod.ARENA_FD_ENV, str(fd))
        side = SidePlugin(None, None)
        assert side.arena is not None and side.arena_why == ""
    finally:
        os.close(fd)
