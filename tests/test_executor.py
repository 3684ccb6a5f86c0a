"""Tests of the executor: feed/fetch, timer counts, overhead switches, safety."""

from __future__ import annotations

import numpy as np
import pytest

import reference_framework as rf
from pytest_opperf import timers
from reference_framework.registry import OpError
from tests.op_test import requires_gpu

SWITCHES = {
    "faithful": ({}, False),
    "program_cache": ({}, True),
    "cache_ops": ({"cache_ops": True}, False),
    "reuse_local_scope": ({"reuse_local_scope": True}, False),
    "none": ({"cache_ops": True, "reuse_local_scope": True}, True),
}


def chain_program(k: int) -> tuple[rf.Program, rf.Program]:
    """x + b, then + b again... (k-1 adds) then a mean: k ops; b is a parameter set to 1."""
    main, startup = rf.Program(), rf.Program()
    with rf.program_guard(main, startup), rf.unique_name_guard():
        b = main.global_block()
        b.create_var(name="x", shape=[-1, 3], dtype="float32")
        b.create_parameter(name="b", shape=[3])
        prev = "x"
        for i in range(k - 1):
            out = b.create_var(name=f"h{i}")
            b.append_op(
                type="elementwise_add", inputs={"X": [prev], "Y": ["b"]}, outputs={"Out": [out]}
            )
            prev = out.name
        b.create_var(name="loss")
        b.append_op(type="mean", inputs={"X": [prev]}, outputs={"Out": ["loss"]})
        s = startup.global_block()
        s.create_parameter(name="b", shape=[3])
        s.append_op(
            type="fill_constant", outputs={"Out": ["b"]}, attrs={"shape": [3], "value": 1.0}
        )
    return main, startup


@pytest.fixture
def scope():
    with rf.scope_guard(rf.Scope()) as s:
        yield s


def x_batch(n: int = 2) -> np.ndarray:
    return np.arange(3 * n, dtype="float32").reshape(n, 3)


def test_feed_fetch_round_trip(scope):
    main, startup = chain_program(4)
    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    x = x_batch()
    h, loss = exe.run(main, feed={"x": x}, fetch_list=[main.global_block().var("h2"), "loss"])
    np.testing.assert_array_equal(h, x + 3)
    assert loss.shape == (1,) and loss[0] == pytest.approx((x + 3).mean())
    assert isinstance(h, np.ndarray) and h.dtype == np.float32


def test_fetched_values_are_copies(scope):
    main, startup = chain_program(2)
    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    b, = exe.run(main, feed={"x": x_batch()}, fetch_list=["b"])
    b[:] = 100
    np.testing.assert_array_equal(scope.find_var("b").value, np.ones(3, "float32"))


@pytest.mark.parametrize("n_runs, k", [(1, 1), (3, 5), (4, 12)])
def test_timer_counts_for_n_runs_of_a_k_op_program(scope, n_runs, k):
    main, startup = chain_program(k)
    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    with timers.recording() as table:
        for _ in range(n_runs):
            exe.run(main, feed={"x": x_batch()}, fetch_list=["loss", "b"])
    feeds, fetches = 1, 2
    counts = {name: s.count for name, s in table.items()}
    expected = {
        "ProgramCloneTimer": n_runs,
        "ExecutorRunTimer": n_runs,
        "CreateLocalScopeTimer": n_runs,
        "DeleteLocalScopeTimer": n_runs,
        "CreateOpTimer": n_runs * (k + feeds + fetches),
        "feed": n_runs * feeds,
        "fetch": n_runs * fetches,
        "mean": n_runs,
    }
    if k > 1:
        expected["elementwise_add"] = n_runs * (k - 1)
    assert counts == expected
    assert table["elementwise_add" if k > 1 else "mean"].parent == "ExecutorRunTimer"
    assert table["CreateOpTimer"].parent == "ExecutorRunTimer"
    assert table["ProgramCloneTimer"].parent is None


@pytest.mark.parametrize("name", list(SWITCHES))
def test_switches_remove_their_overhead_and_keep_results(scope, name):
    exe_kwargs, use_cache = SWITCHES[name]
    main, startup = chain_program(6)
    reference = rf.Executor(rf.CPUPlace())
    reference.run(startup)
    want = [
        reference.run(main, feed={"x": x_batch(n)}, fetch_list=["loss", "h4"]) for n in (2, 3, 2)
    ]

    exe = rf.Executor(rf.CPUPlace(), **exe_kwargs)
    with timers.recording() as table:
        got = [
            exe.run(
                main, feed={"x": x_batch(n)}, fetch_list=["loss", "h4"], use_program_cache=use_cache
            )
            for n in (2, 3, 2)
        ]
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            np.testing.assert_array_equal(a, b)
    counts = {name: s.count for name, s in table.items()}
    ops_per_run = 6 + 1 + 2
    assert counts["ProgramCloneTimer"] == (1 if use_cache else 3)  # the cache clones once to fill
    assert counts.get("CreateOpTimer", 0) == (
        ops_per_run if exe_kwargs.get("cache_ops") else 3 * ops_per_run
    )
    reuse = exe_kwargs.get("reuse_local_scope", False)
    assert counts["CreateLocalScopeTimer"] == (1 if reuse else 3)
    assert counts.get("DeleteLocalScopeTimer", 0) == (0 if reuse else 3)
    assert counts["ExecutorRunTimer"] == 3 and counts["elementwise_add"] == 15
    assert len(scope.kids()) == (1 if reuse else 0)


def test_caches_follow_program_changes(scope):
    main, startup = chain_program(3)
    exe = rf.Executor(rf.CPUPlace(), cache_ops=True, reuse_local_scope=True)
    exe.run(startup)
    first, = exe.run(main, feed={"x": x_batch()}, fetch_list=["loss"], use_program_cache=True)
    b = main.global_block()
    b.create_var(name="loss2")
    b.append_op(
        type="elementwise_add", inputs={"X": ["loss"], "Y": ["loss"]}, outputs={"Out": ["loss2"]}
    )
    second, = exe.run(main, feed={"x": x_batch()}, fetch_list=["loss2"], use_program_cache=True)
    assert second[0] == pytest.approx(2 * first[0])


def test_the_callers_program_is_never_modified(scope):
    main, startup = chain_program(3)
    before = main.to_string()
    version = main.version
    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    for use_cache in (False, True, True):
        exe.run(main, feed={"x": x_batch()}, fetch_list=["loss"], use_program_cache=use_cache)
    assert main.to_string() == before and main.version == version
    assert not main.global_block().has_var("feed") and not main.global_block().has_var("fetch")


def test_persistables_outlive_runs_and_temporaries_do_not(scope):
    main, startup = chain_program(3)
    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    exe.run(main, feed={"x": x_batch()}, fetch_list=["loss"])
    assert scope.find_var("b") is not None and scope.find_var("b").value is not None
    assert scope.find_var("h0") is None and scope.find_var("loss") is None
    assert scope.kids() == []


@pytest.mark.parametrize(
    "feed, fetch, error, message",
    [
        (
            {"y": x_batch()},
            ["loss"],
            rf.FeedError,
            r"feed: variable 'y' is not in the program; its inputs are \['x'\]",
        ),
        (
            {"x": x_batch().astype("float64")},
            ["loss"],
            rf.FeedError,
            r"feed 'x': expected dtype float32, given float64",
        ),
        (
            {"x": np.zeros((2, 3, 1), "float32")},
            ["loss"],
            rf.FeedError,
            r"feed 'x': expected shape \[-1, 3\] \(-1: any size\), given \[2, 3, 1\]",
        ),
        (
            {"x": np.zeros((2, 4), "float32")},
            ["loss"],
            rf.FeedError,
            r"expected shape \[-1, 3\] \(-1: any size\), given \[2, 4\]",
        ),
        (
            {"x": x_batch()},
            ["nope"],
            rf.FetchError,
            r"fetch: variable 'nope' is not in the program",
        ),
        ({"x": x_batch()}, [3], rf.FetchError, r"fetch_list takes variables or names, given 3"),
    ],
)
def test_bad_feeds_and_fetches(scope, feed, fetch, error, message):
    main, startup = chain_program(3)
    exe = rf.Executor(rf.CPUPlace())
    exe.run(startup)
    with pytest.raises(error, match=message):
        exe.run(main, feed=feed, fetch_list=fetch)
    assert scope.kids() == []


@pytest.mark.parametrize("reuse", [False, True])
def test_a_failing_op_leaves_no_local_scope_behind(scope, reuse):
    main, startup = chain_program(3)
    exe = rf.Executor(rf.CPUPlace(), reuse_local_scope=reuse)
    # Not running startup leaves parameter b without a value: the first add fails.
    with pytest.raises(OpError, match="input Y variable 'b' has no value") as info:
        exe.run(main, feed={"x": x_batch()}, fetch_list=["loss"])
    assert scope.kids() == []
    if hasattr(info.value, "__notes__"):
        assert "while running op #1 elementwise_add of block 0" in info.value.__notes__[0]
    exe.run(startup)
    loss, = exe.run(main, feed={"x": x_batch()}, fetch_list=["loss"])
    assert loss[0] == pytest.approx((x_batch() + 2).mean())
    # A reused local scope is kept per program run: startup's and main's.
    assert len(scope.kids()) == (2 if reuse else 0)


def test_program_type_is_checked():
    with pytest.raises(TypeError, match="program must be a Program, given str"):
        rf.Executor(rf.CPUPlace()).run("main")


def test_gpu_availability_never_raises_and_gpu_place_says_why():
    assert rf.gpu_available() in (True, False)
    if not rf.gpu_available():
        with pytest.raises(RuntimeError, match=r"cuda:0 was asked for, but "):
            rf.Executor(rf.CUDAPlace(0))


@requires_gpu
def test_feed_fetch_on_gpu(scope):
    from reference_framework.backend import is_gpu_array

    main, startup = chain_program(4)
    exe = rf.Executor(rf.CUDAPlace(0))
    exe.run(startup)
    assert is_gpu_array(scope.find_var("b").value)
    h, = exe.run(main, feed={"x": x_batch()}, fetch_list=["h2"])
    np.testing.assert_array_equal(h, x_batch() + 3)
    dev, = exe.run(main, feed={"x": x_batch()}, fetch_list=["h2"], return_numpy=False)
    assert is_gpu_array(dev)
