"""The history store on SQLite and PostgreSQL alike: round trip, all-or-nothing, concurrency,
migrations."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from pytest_opperf.history.errors import HistoryError, MissingExtra
from pytest_opperf.history.records import SAMPLES_KEPT
from pytest_opperf.history.schema import MIGRATIONS, WRITTEN_BY
from pytest_opperf.history.sources import check_target, redact
from pytest_opperf.history.store import Store
from tests.history_helpers import (  # noqa: F401 (fixtures)
    op_run,
    pg_schema_url_fixture,
    session,
    store_source_fixture,
    work,
)


def test_a_session_round_trips_with_per_step_medians_and_counts(store_source):
    results = session(conv_ms=2.0)
    compare = {"summary": "1 regressed", "metrics": [{"run": "x", "ratio": 1.2}]}
    with Store(store_source, create=True) as store:
        sid = store.append(results, compare, commit_time="2026-11-30T10:00:00+01:00")
        history = store.load()
    assert [s.id for s in history.sessions] == [sid]
    s = history.sessions[0]
    assert (s.sha, s.branch, s.dirty, s.device_class, s.workload, s.timing) == (
        "a" * 40,
        "main",
        False,
        "cpu",
        "small",
        "host",
    )
    assert s.commit_time == "2026-11-30T09:00:00+00:00"  # stored in UTC, so that times sort as text
    assert s.gate_passed is True and s.compare == compare and s.runs == 2
    stats = {(st.run, st.name): st for st in history.stats}
    conv = stats[("suite.py::test_train", "conv2d")]
    assert conv.value == 2.0  # per-step median after the warm-up step (10 ms), not the mean (3.33)
    assert conv.step_count == 53 and conv.kernel
    assert stats[("suite.py::test_op[conv2d]", "conv2d")].value == 0.5  # per call
    run = next(r for r in history.runs if r.kind == "e2e")
    assert run.window_examples_per_sec == pytest.approx(results.runs[0].examples_per_sec)


def test_compare_is_optional_and_the_same_results_are_stored_once(store_source):
    results = session()
    with Store(store_source, create=True) as store:
        first = store.append(results)
        assert store.append(results) is None
        second = store.append(session(conv_ms=3.0))
        history = store.load()
    assert first is not None and second is not None and first != second
    assert [s.compare for s in history.sessions] == [None, None]
    assert len(history.runs) == 4


def test_samples_are_kept_bounded(store_source):
    results = session()
    results.runs[1] = op_run("suite.py::test_op[conv2d]", [float(i) for i in range(1, 501)])
    with Store(store_source, create=True) as store:
        sid = store.append(results)
        kept = store.samples(sid, "suite.py::test_op[conv2d]", "conv2d")
    assert len(kept) == SAMPLES_KEPT and kept[0] == 1.0 and kept[-1] == 500.0
    assert kept == sorted(kept)


@pytest.mark.parametrize("interruption", [RuntimeError, KeyboardInterrupt])
def test_an_interrupted_append_writes_nothing(store_source, monkeypatch, interruption):
    with Store(store_source, create=True) as store:
        store.append(session(conv_ms=1.0))
        calls = []
        real = Store._insert_run

        def insert_then_fail(self, session_id, run):
            real(self, session_id, run)  # the first run is written inside the transaction...
            calls.append(run.id)
            raise interruption("interrupted")  # ...then the session stops

        monkeypatch.setattr(Store, "_insert_run", insert_then_fail)
        with pytest.raises(interruption):
            store.append(session(conv_ms=2.0))
        monkeypatch.undo()
        assert calls == ["suite.py::test_train"]
        history = store.load()
        assert (
            len(history.sessions) == 1 and len(history.runs) == 2
        )  # nothing of the second session
        assert store.append(session(conv_ms=2.0)) is not None  # and the store is still usable


def _append_many(source: str, worker: int, count: int) -> list[int] | str:
    try:
        with Store(source, create=True, timeout_s=60) as store:
            return [store.append(session(conv_ms=1.0 + worker + i / 100)) for i in range(count)]
    except HistoryError as exc:  # as text: the message must reach the assertion
        return f"worker {worker}: {exc}"


def test_concurrent_writers_lose_nothing(store_source):
    """Four processes create the store and append at once: every session arrives whole."""
    with ProcessPoolExecutor(4, mp_context=get_context("spawn")) as pool:
        got = list(pool.map(_append_many, [store_source] * 4, range(4), [5] * 4))
    assert [g for g in got if isinstance(g, str)] == []
    ids = [i for g in got for i in g]
    assert None not in ids and len(set(ids)) == 20
    with Store(store_source) as store:
        history = store.load()
        assert store.version == len(MIGRATIONS)
    assert len(history.sessions) == 20 and len(history.runs) == 40 and len(history.stats) == 60


def test_migrations_bring_an_older_store_up_to_date(store_source):
    with Store(store_source, create=True) as store:
        store.append(session())
    extra = (*MIGRATIONS, ("ALTER TABLE opperf_sessions ADD COLUMN note TEXT",))
    with Store(store_source, create=True, migrations=extra) as store:  # a writer migrates
        assert store.version == len(extra)
        assert len(store.load().sessions) == 1
    with pytest.raises(
        HistoryError,
        match=rf"schema version {len(extra)}, written by {WRITTEN_BY}; this is "
        rf"{WRITTEN_BY} \(schema version {len(MIGRATIONS)}\): upgrade",
    ):
        Store(store_source)


def test_work_counts_round_trip_per_stat_and_counter(store_source):
    counted = work(bytecodes=61_234, instructions=9_876_543_210)
    counted.varies = ["bytecodes of relu (19999..20000)"]
    with Store(store_source, create=True) as store:
        sid = store.append(session(work_counts=counted))
        without = store.append(session(conv_ms=3.0, work_counts=work(instructions=None)))
        history = store.load()
    runs = {(r.session_id, r.kind): r for r in history.runs}
    stored = runs[(sid, "e2e")].work
    assert stored is not None
    assert stored.stats == counted.stats  # every stat's counts, a missing counter still missing
    assert stored.total("bytecodes") == 61_234 + 20_000 + 8_000
    assert stored.instructions == 9_876_543_210  # beyond 32 bits
    assert stored.instructions_cpu == "x86_64 test CPU"
    assert (stored.steps, stored.pass_s, stored.versions, stored.varies) == (
        3, 0.25, {"python": "3.11.9", "numpy": "2.1.0"}, ["bytecodes of relu (19999..20000)"])
    assert stored == counted
    other = runs[(without, "e2e")].work
    assert other is not None and other.instructions is None and other.instructions_cpu is None
    assert other.stats["conv2d"]["bytecodes"] == 50_000
    assert runs[(sid, "op")].work is None  # a run without work counts


def test_work_counts_are_part_of_what_identifies_a_session(store_source):
    def counted(bytecodes):
        return session(created="2026-11-01T10:00:00+00:00", work_counts=work(bytecodes=bytecodes))

    with Store(store_source, create=True) as store:
        assert store.append(counted(50_000)) is not None
        assert store.append(counted(50_001)) is not None
        assert store.append(counted(50_001)) is None


def test_a_version_1_store_is_read_as_it_is_and_migrated_by_a_writer(store_source):
    with Store(store_source, create=True, migrations=MIGRATIONS[:1]) as store:
        first = store.append(session(conv_ms=2.0))
        second = store.append(session(conv_ms=2.5, sha="b" * 40))
        assert store.version == 1
    with Store(store_source) as store:  # a reader reads version 1 as it is
        assert store.version == 1
        old = store.load()
        assert store.version == 1
    with Store(store_source, create=True, migrations=MIGRATIONS[:1]) as store:
        assert store.append(session(conv_ms=9.0, sha="d" * 40)) is not None  # the old release
        assert store.version == 1
    with Store(store_source, create=True) as store:  # a writer migrates
        assert store.version == len(MIGRATIONS) == 3
        third = store.append(session(conv_ms=2.5, sha="c" * 40, work_counts=work(instructions=7)))
        history = store.load()
    assert [s.id for s in old.sessions] == [first, second]
    assert len(old.runs) == 4 and all(r.work is None for r in old.runs)
    assert len(old.stats) == 6
    assert [s.id for s in history.sessions][:2] == [first, second] and len(history.sessions) == 4
    assert history.sessions[-1].id == third
    (counted,) = [r for r in history.runs if r.work is not None]
    assert counted.session_id == third and counted.work == work(instructions=7)


def test_a_locked_sqlite_file_is_one_line_and_writes_nothing(tmp_path):
    path = tmp_path / "h.sqlite"
    with Store(str(path), create=True) as store:
        store.append(session())
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(HistoryError) as err:
            with Store(str(path), create=True, timeout_s=0.2) as store:
                store.append(session(conv_ms=5.0))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    message = str(err.value)
    assert message.startswith(f"{path}: database is locked") and "\n" not in message
    with Store(str(path)) as store:
        assert len(store.load().sessions) == 1


def test_readers_do_not_create_and_refuse_what_is_not_a_history(tmp_path):
    with pytest.raises(HistoryError, match="no such file"):
        Store(str(tmp_path / "missing.sqlite"))
    assert not (tmp_path / "missing.sqlite").exists()
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all " * 100)
    with pytest.raises(HistoryError, match="junk.sqlite: file is not a database"):
        Store(str(junk), create=True)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(HistoryError, match="not a pytest-opperf history"):
        Store(str(other))


def test_an_unreachable_server_is_one_line_without_the_password():
    pytest.importorskip("psycopg")
    url = "postgresql://opperf:s3cret@127.0.0.1:1/history?connect_timeout=2"
    with pytest.raises(HistoryError) as err:
        Store(url, create=True)
    message = str(err.value)
    assert message.startswith("postgresql://opperf:***@127.0.0.1:1/history") and "\n" not in message
    assert "s3cret" not in message and "refused" in message


def test_targets_are_checked_before_a_session(tmp_path):
    check_target(str(tmp_path / "new.sqlite"))
    with pytest.raises(HistoryError, match="directory .*nowhere does not exist"):
        check_target(str(tmp_path / "nowhere" / "h.sqlite"))
    with pytest.raises(HistoryError, match="is a directory"):
        check_target(str(tmp_path))
    with pytest.raises(
        HistoryError, match="expected a path .* or a postgresql:// URL, got scheme 'mysql'"
    ):
        check_target("mysql://db/history")
    assert redact("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact("postgresql://h/db") == "postgresql://h/db"


def test_a_missing_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    with pytest.raises(
        MissingExtra,
        match=r"needs psycopg 3 \(pip install 'pytest-opperf\[history\]'\)",
    ):
        check_target("postgresql://h/db")


def test_the_sqlite_store_needs_no_optional_library(tmp_path):
    """With psycopg and plotly unimportable, a SQLite history still appends and is read."""
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None; sys.modules['plotly'] = None\n"
        "from pytest_opperf.cli import main\n"
        "from pytest_opperf.results import write_results\n"
        "from tests.history_helpers import session\n"
        f"write_results({str(tmp_path / 'r.json')!r}, session())\n"
        f"assert main(['history', 'import', {str(tmp_path / 'r.json')!r}, '--into', "
        f"{str(tmp_path / 'h.sqlite')!r}]) == 0\n"
        f"assert main(['history', {str(tmp_path / 'h.sqlite')!r}]) == 0\n"
        f"assert main(['dashboard', {str(tmp_path / 'h.sqlite')!r}, "
        f"'--out', {str(tmp_path / 'd')!r}]) == 4\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "error: the dashboard needs plotly (pip install 'pytest-opperf[history]')" in done.stderr


def test_the_history_modules_do_not_import_pytest():
    code = (
        "import sys\n"
        "import pytest_opperf.history.store, pytest_opperf.history.errors, "
        "pytest_opperf.history.sources, pytest_opperf.history.connect, "
        "pytest_opperf.history.schema, pytest_opperf.history.records, "
        "pytest_opperf.history.changepoints, "
        "pytest_opperf.history.trends, pytest_opperf.history.dashboard, "
        "pytest_opperf.history.commands\n"
        "bad = sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('pytest', '_pytest', 'reference_framework'))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("table", "column"), [("opperf_sessions", "compare"),
                                               ("opperf_runs", "work_versions")])
@pytest.mark.parametrize("command", ["history", "dashboard"])
def test_malformed_json_in_a_stored_row_is_one_line_naming_it(tmp_path, table, column, command):
    from pytest_opperf.cli import main

    path = tmp_path / "h.sqlite"
    with Store(str(path), create=True) as store:
        sid = store.append(session(work_counts=work()), {"summary": "ok"})
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE {table} SET {column} = '{{not json'")
    conn.commit()
    conn.close()
    out, err = __import__("io").StringIO(), __import__("io").StringIO()
    argv = [command, str(path)] + (["--out", str(tmp_path / "d")] if command == "dashboard" else [])
    assert main(argv, out, err) == 4
    line = err.getvalue()
    assert line.count("\n") == 1 and line.startswith(f"error: {path}: session {sid}")
    assert f"column {column} holds malformed JSON" in line
    if column == "work_versions":
        assert "run 'suite.py::test_train'" in line


@pytest.mark.parametrize(("table", "column"), [("opperf_runs", "examples_per_sec"),
                                               ("opperf_stats", "total_ms"),
                                               ("opperf_work", "value")])
@pytest.mark.parametrize("command", ["history", "dashboard"])
def test_text_in_a_stored_number_column_is_one_line(tmp_path, table, column, command):
    from pytest_opperf.cli import main

    path = tmp_path / "h.sqlite"
    with Store(str(path), create=True) as store:
        store.append(session(work_counts=work()), {"summary": "ok"})
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE {table} SET {column} = 'abc'")
    conn.commit()
    conn.close()
    out, err = __import__("io").StringIO(), __import__("io").StringIO()
    argv = [command, str(path)] + (["--out", str(tmp_path / "d")] if command == "dashboard" else [])
    assert main(argv, out, err) == 4
    line = err.getvalue()
    assert line.count("\n") == 1 and line.startswith(f"error: {path}: a stored value is not")
    assert "'abc'" in line


def _digest(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("command", ["history", "dashboard"])
def test_reading_a_version_1_store_writes_nothing(tmp_path, command):
    from pytest_opperf.cli import main

    path = tmp_path / "h.sqlite"
    with Store(str(path), create=True, migrations=MIGRATIONS[:1]) as store:
        store.append(session())
    before = _digest(path)
    argv = [command, str(path)] + (["--out", str(tmp_path / "d")] if command == "dashboard" else [])
    code = main(argv, __import__("io").StringIO(), __import__("io").StringIO())
    assert code in (0, 4) if command == "dashboard" else code == 0  # 4: no plotly
    assert _digest(path) == before and sorted(p.name for p in tmp_path.glob("h.sqlite*")) == [
        "h.sqlite"]  # no -wal, no -shm
    with Store(str(path), create=True, migrations=MIGRATIONS[:1]) as store:  # the old release
        assert store.version == 1 and store.append(session(conv_ms=4.0)) is not None


def test_a_read_only_store_in_a_read_only_directory_is_read(tmp_path):
    """As a user who cannot write the file nor its directory (root ignores permission bits: the
    reader runs as nobody)."""
    import os
    import shutil
    import tempfile

    from pytest_opperf.results import write_results

    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root without setpriv: cannot read as another user")
    top = tempfile.mkdtemp(prefix="opperf-ro-")
    try:
        os.chmod(top, 0o755)
        store_dir = os.path.join(top, "store")
        os.mkdir(store_dir)
        path = os.path.join(store_dir, "h.sqlite")
        write_results(tmp_path / "r.json", session())
        with Store(path, create=True, migrations=MIGRATIONS[:1]) as store:
            store.append(session())
        os.chmod(path, 0o444)
        os.chmod(store_dir, 0o555)
        before = _digest(__import__("pathlib").Path(path))
        prefix = (["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
                  if os.geteuid() == 0 else [])
        probe = subprocess.run([*prefix, sys.executable, "-c", "import pytest_opperf.cli"],
                               capture_output=True, text=True, cwd=top)
        if probe.returncode != 0:  # e.g. a checkout below a directory of mode 0700
            pytest.skip(f"nobody cannot run this checkout's pytest_opperf: "
                        f"{probe.stderr.strip().splitlines()[-1:]}")
        done = subprocess.run([*prefix, sys.executable, "-m", "pytest_opperf", "history", path],
                              capture_output=True, text=True, cwd=top)
        assert done.returncode == 0, done.stderr
        assert "suite.py::test_train" in done.stdout
        assert _digest(__import__("pathlib").Path(path)) == before
    finally:
        os.chmod(os.path.join(top, "store"), 0o755)
        shutil.rmtree(top)


def test_a_reader_cannot_write_the_store(store_source):
    with Store(store_source, create=True) as store:
        store.append(session())
    with Store(store_source) as store:
        with pytest.raises(HistoryError, match="opened for reading, cannot append"):
            store.append(session(conv_ms=3.0))
        with pytest.raises(Exception, match="read-only|readonly"):  # the connection itself
            store._execute("CREATE TABLE opperf_x (y INTEGER)")


def test_a_newer_store_names_the_release_that_wrote_it(tmp_path):
    path = tmp_path / "h.sqlite"
    with Store(str(path), create=True) as store:
        store.append(session())
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM opperf_meta WHERE key = 'written_by'").fetchone() == (
        WRITTEN_BY,)
    conn.execute("UPDATE opperf_meta SET value = 'pytest-opperf 9.9.0'")
    conn.execute("UPDATE opperf_schema SET version = 7")
    conn.commit()
    conn.close()
    with pytest.raises(HistoryError, match=r"h.sqlite: history schema version 7, written by "
                       r"pytest-opperf 9.9.0; this is pytest-opperf .* \(schema version 3\)"):
        Store(str(path))
