"""The history keeps a run's steady state apart from its whole window (schema version 3), on
SQLite and PostgreSQL alike; a store of version 2 reads as it is, and its first append migrates."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_opperf.history.schema import MIGRATIONS
from pytest_opperf.history.store import Store
from pytest_opperf.history.trends import build
from pytest_opperf.results import ResultSet
from tests.history_helpers import pg_schema_url_fixture, store_source_fixture  # noqa: F401
from tests.opperf_factories import e2e_run

RUN = "suite.py::test_train"


def _session(sha: str) -> ResultSet:
    # steps of 2000, 500, 1000, 500 ms with 32, 32, 32, 16 examples and conv2d (the executor:
    # no executor stat, the top-level stats' sum) 250, 100, 500, 400 ms: whole window 112
    # examples / 4 s = 28/s, Python share 0.2 as given; steady state 80 / 2 s = 40/s, per-step
    # shares 0.8, 0.5, 0.2 (median 0.5)
    run = e2e_run(RUN, stats={"conv2d": [250.0, 100.0, 500.0, 400.0]},
                  step_ms=[2000.0, 500.0, 1000.0, 500.0])
    run = dataclasses.replace(run, step_examples=[32, 32, 32, 16], examples=112,
                              examples_per_sec=28.0)
    return ResultSet(runs=[run], machine={"cpu": "x", "device_class": "cpu"},
                     commit={"sha": sha, "dirty": False, "branch": "main"},
                     session={"device": "cpu", "device_class": "cpu", "workload": "small",
                              "timing": "host"})


def _run_values(store: Store) -> list[tuple[float | None, float | None, float, float]]:
    return [(r.examples_per_sec, r.python_share, r.window_examples_per_sec,
             r.window_python_share) for r in store.load().runs]


def test_the_steady_state_is_stored_apart_and_a_version_2_store_reads_as_it_is(store_source):
    with Store(store_source, create=True, migrations=MIGRATIONS[:2]) as store:  # the release before
        assert store.append(_session("a" * 40)) is not None and store.version == 2
    with Store(store_source) as store:  # a reader reads version 2 as it is
        assert _run_values(store) == [(None, None, 28.0, 0.2)]
        (group,) = build(store.load())
        assert store.version == 2
    assert {s.metric for s in group.series if s.run == RUN} == {
        "window_examples_per_sec", "window_python_share", "step_ms:conv2d"}
    with Store(store_source, create=True) as store:  # a writer migrates
        assert store.version == len(MIGRATIONS) == 3
        store.append(_session("b" * 40))
        values = _run_values(store)
        (group,) = build(store.load())
    assert values[0] == (None, None, 28.0, 0.2)
    assert values[1] == (pytest.approx(40.0), pytest.approx(0.5), 28.0, 0.2)
    series = {s.metric: s for s in group.series if s.run == RUN}
    assert series["examples_per_sec"].values == [pytest.approx(40.0)]
    assert series["examples_per_sec"].points == [1]  # the session before kept no steady state
    assert series["window_examples_per_sec"].values == [28.0, 28.0]
    assert series["python_share"].values == [pytest.approx(0.5)]
    assert series["step_ms:conv2d"].values == [400.0, 400.0]  # median after warm-up, both
