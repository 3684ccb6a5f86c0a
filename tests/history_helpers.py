"""Histories for the history tests: a store source per backend, and hand-built sessions.

``store_source`` is parametrised over SQLite (a file in tmp_path) and
PostgreSQL (a fresh schema on the server named by ``OPPERF_TEST_POSTGRES``,
which ``.ci/run`` starts). Without that variable the PostgreSQL cases skip,
except under ``CI=true``, where a missing server is a failure.
"""

from __future__ import annotations

import os
import secrets
from urllib.parse import quote

import pytest

from pytest_opperf.results import ResultSet, RunResult, StatResult
from pytest_opperf.workcounts.workcount import OUTSIDE, WorkCounts
from tests.opperf_factories import e2e_run

PG_ENV = "OPPERF_TEST_POSTGRES"


def postgres_url() -> str:
    url = os.environ.get(PG_ENV)
    if url:
        return url
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"{PG_ENV} is not set under CI=true: .ci/run starts the PostgreSQL server the history "
            "tests need (ci/postgres.sh)"
        )
    pytest.skip(
        f"no PostgreSQL server: set {PG_ENV}=postgresql://... "
        "(.ci/run starts one with ci/postgres.sh)"
    )


@pytest.fixture(name="pg_schema_url")
def pg_schema_url_fixture():
    """A URL whose connections use a schema of their own, dropped afterwards."""
    psycopg = pytest.importorskip("psycopg")
    url = postgres_url()
    schema = f"opperf_test_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in url else "?"
    yield f"{url}{sep}options={quote(f'-csearch_path={schema}')}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(name="store_source", params=["sqlite", "postgresql"])
def store_source_fixture(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    return request.getfixturevalue("pg_schema_url")


def op_run(run_id: str, call_ms: list[float], stat: str = "conv2d") -> RunResult:
    rounds = len(call_ms)
    total = sum(call_ms)
    s = StatResult(
        name=stat,
        parent=None,
        count=rounds,
        total_ms=total,
        avg_ms=total / rounds,
        min_ms=min(call_ms),
        max_ms=max(call_ms),
        samples_ms=list(call_ms),
        kernel=True,
    )
    return RunResult(
        id=run_id,
        kind="op",
        config={},
        device="cpu",
        timing="host",
        wall_s=total / 1e3,
        examples=rounds,
        batches=rounds,
        examples_per_sec=rounds / (total / 1e3),
        sec_per_batch=total / rounds / 1e3,
        python_share=0.0,
        stats=[s],
        counts={},
    )


def work(bytecodes: int = 50_000, instructions: int | None = None) -> WorkCounts:
    """Work counts per step of the e2e run of :func:`session`: ``bytecodes`` in conv2d, 20,000 in
    relu and 8,000 outside (Python calls and C calls fixed), instructions if given."""
    return WorkCounts(
        stats={
            "conv2d": {"bytecodes": bytecodes, "py_calls": 1_200, "c_calls": 900},
            "relu": {"bytecodes": 20_000, "py_calls": 400},
            OUTSIDE: {"bytecodes": 8_000, "py_calls": 150, "c_calls": 60},
        },
        steps=3,
        pass_s=0.25,
        versions={"python": "3.11.9", "numpy": "2.1.0"},
        instructions=instructions,
        instructions_cpu=None if instructions is None else "x86_64 test CPU",
    )


def session(
    conv_ms: float = 2.0,
    sha: str | None = "a" * 40,
    dirty: bool = False,
    created: str | None = None,
    device_class: str = "cpu",
    workload: str = "small",
    passed: bool = True,
    steps: int = 6,
    op_ms: float = 0.5,
    work_counts: WorkCounts | None = None,
) -> ResultSet:
    """A session of one e2e run (conv2d at ``conv_ms`` per step after a slow warm-up step,
    relu at 1 ms; ``work_counts`` its work counts) and one per-op benchmark at ``op_ms`` per
    call."""
    e2e = e2e_run(stats={"conv2d": [conv_ms * 5] + [conv_ms] * (steps - 1), "relu": [1.0] * steps},
                  step_ms=[10.0 * conv_ms] * steps, counts={"conv2d": 53, "relu": 49})
    e2e.work = work_counts
    results = ResultSet(
        runs=[e2e, op_run("suite.py::test_op[conv2d]", [op_ms] * 5)],
        machine={"cpu": "x", "device_class": device_class},
        commit={"sha": sha, "dirty": dirty, "branch": "main"} if sha else None,
        session={
            "device": "cpu",
            "device_class": device_class,
            "workload": workload,
            "timing": "host",
        },
    )
    if created is not None:
        results.created = created
    results.gate = {"passed": passed, "violations": []}
    return results
