"""The history store: sessions appended to a SQLite file or a PostgreSQL database, and read back.

A source is a path (a SQLite file, created on first append; stdlib ``sqlite3``) or a
``postgresql://`` URL (psycopg 3, the ``history`` extra); :mod:`.sources` names and checks it,
:mod:`.connect` opens it. Both hold the same tables (prefixed ``opperf_`` so that a shared database
keeps them apart) under a schema version; :data:`~.schema.MIGRATIONS` brings an older store up to
date when a writer opens it, under a lock, so several writers opening a new store at once create it
once. Readers never write (see :mod:`.connect`): they read an older version as it is.

A run's work counts (:class:`~pytest_opperf.workcounts.workcount.WorkCounts`, when the results have
them) are kept with it: each stat's self count per step of each counter, one row each, and the
counting pass's steps, versions and CPU instructions on the run's row. A run's row keeps the whole
window's examples/sec and Python share (``examples_per_sec``, ``python_share``, as in the results
file) and, from version 3, the steady state's apart (``steady_examples_per_sec``,
``steady_python_share``; NULL where the run has none). What is kept, and read back, is
:mod:`.records`.

One session is one transaction: its session row, every run, stat and work count are committed
together or not at all (an exception, Ctrl-C, a killed process or a lost connection leaves nothing
of it). Concurrent writers lose nothing: SQLite runs in WAL mode and waits up to ``timeout_s`` for
the write lock; PostgreSQL serialises nothing but the schema migration. Every database problem is
a :class:`~.errors.HistoryError` with one line naming the store (a URL's password is never shown).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from ..records.atomic import utf8_text
from ..results import ResultSet, RunResult
from ..workcounts.workcount import WorkCounts
from .connect import connect_postgresql, connect_sqlite
from .errors import HistoryError, one_line
from .records import (
    History,
    StoredRun,
    StoredSession,
    StoredStat,
    bounded_samples,
    commit_time,
    dumps,
    fingerprint,
    steady_run_values,
    step_value,
    utc,
)
from .schema import DIALECT, LOCK_KEY, MIGRATIONS, WRITTEN_BY
from .sources import check_url, import_psycopg, is_url, redact, scrub

__all__ = ["Store", "append_session"]


def _storable(params: Sequence[Any]) -> tuple[Any, ...]:
    """Parameters both databases take: text as UTF-8 can encode it (run ids of test files with
    non-ASCII names under a non-UTF-8 locale hold surrogate escapes; see ``utf8_text``)."""
    return tuple(utf8_text(p) if isinstance(p, str) else p for p in params)


class Store:
    """An open history store (use as a context manager, or :meth:`close`).

    ``create``: a missing SQLite file is created (writers); readers get a :class:`HistoryError`
    instead. ``timeout_s``: how long to wait for the SQLite write lock or a PostgreSQL connection.
    """

    def __init__(self, source: str, create: bool = False, timeout_s: float = 30.0,
                 migrations: Sequence[Sequence[str]] = MIGRATIONS) -> None:
        self.source = source
        self.label = redact(source)
        self.dialect = "postgresql" if is_url(source) else "sqlite"
        self._driver_errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
        self._migrations = migrations
        self._conn: Any = None
        self._writer = create
        self._schema = 0
        try:
            with self._errors():
                self._conn = self._connect(create, timeout_s)
                self._migrate(create)
        except BaseException:
            self.close()
            raise

    # connection and transactions

    def _connect(self, create: bool, timeout_s: float) -> Any:
        if self.dialect == "postgresql":
            check_url(self.source)
            psycopg = import_psycopg(self.label)
            self._driver_errors = (psycopg.Error,)
            return connect_postgresql(psycopg, self.source, create, timeout_s)
        return connect_sqlite(self.source, self.label, create, timeout_s)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except HistoryError:
            raise
        except Exception as exc:
            # by module too: a driver re-imported in one process (pytester, reloads) keeps
            # raising the classes of its first import
            if not (isinstance(exc, self._driver_errors)
                    or type(exc).__module__.split(".")[0] == "psycopg"):
                raise
            message = scrub(one_line(exc), self.source)
            if "locked" in message or "busy" in message:
                message += " (another writer held the store too long)"
            raise HistoryError(f"{self.label}: {message}") from None

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(self._sql(sql), _storable(params))

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        rows = [_storable(row) for row in rows]
        if self.dialect == "postgresql":
            with self._conn.cursor() as cur:
                cur.executemany(self._sql(sql), rows)
        else:
            self._conn.executemany(sql, rows)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """All or nothing; SQLite takes the write lock at the start (so two writers never
        both read and then collide), waiting up to the busy timeout for it."""
        if self.dialect == "postgresql":
            with self._conn.transaction():
                yield
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # schema

    def _has_schema_table(self) -> bool:
        if self.dialect == "postgresql":
            # a catalog query under the statement's snapshot: to_regclass's cache may not yet see
            # a table that another writer created while this one waited for the advisory lock
            return self._execute(
                "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = current_schema() "
                "AND tablename = 'opperf_schema'").fetchone() is not None
        return self._execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = "
                             "'opperf_schema'").fetchone() is not None

    def _version(self) -> int:
        if not self._has_schema_table():
            return 0
        row = self._execute("SELECT version FROM opperf_schema").fetchone()
        if row is None:
            return 0
        version = row[0]
        if isinstance(version, str) and version.strip().isdigit():
            version = int(version)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise HistoryError(f"{self.label}: history schema version {version!r:.40} is not a "
                               "number (a damaged store, or not a pytest-opperf history)")
        return version

    def _has_table(self, name: str) -> bool:
        if self.dialect == "postgresql":
            return self._execute(
                "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = current_schema() "
                "AND tablename = ?", (name,)).fetchone() is not None
        return self._execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?",
                             (name,)).fetchone() is not None

    def _written_by(self) -> str | None:
        """The release that wrote the store last (``opperf_meta``), or None (not recorded)."""
        if not self._has_table("opperf_meta"):
            return None
        row = self._execute("SELECT value FROM opperf_meta WHERE key = 'written_by'").fetchone()
        return None if row is None else str(row[0])

    def _record_writer(self) -> None:
        """``opperf_meta``: a table no schema version names (older releases ignore it), so that
        recording the writer never stops the release before from appending."""
        self._execute("CREATE TABLE IF NOT EXISTS opperf_meta (key TEXT PRIMARY KEY, "
                      "value TEXT NOT NULL)")
        self._execute("INSERT INTO opperf_meta (key, value) VALUES ('written_by', ?) ON CONFLICT "
                      "(key) DO UPDATE SET value = excluded.value", (WRITTEN_BY,))

    def _migrate(self, create: bool) -> None:
        target = len(self._migrations)
        version = self._version()
        if version > target:
            by = self._written_by() or "a release that did not record itself"
            raise HistoryError(f"{self.label}: history schema version {version}, written by {by}; "
                               f"this is {WRITTEN_BY} (schema version {target}): upgrade "
                               "pytest-opperf")
        self._schema = version
        if version == target and not (create and not self._has_table("opperf_meta")):
            return
        if version == 0 and not create and not self._has_schema_table():
            raise HistoryError(f"{self.label}: not a pytest-opperf history (no opperf_schema)")
        if not create:  # only a writer migrates: a reader reads the older schema as it is
            return
        self._schema = target
        with self._transaction():
            if self.dialect == "postgresql":
                self._execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))
            version = self._version()  # again, under the lock: another writer may have migrated
            if version == 0 and not self._has_schema_table():
                self._execute("CREATE TABLE opperf_schema (version INTEGER NOT NULL)")
                self._execute("INSERT INTO opperf_schema (version) VALUES (0)")
            for statements in self._migrations[version:]:
                for statement in statements:
                    self._execute(statement.format(**DIALECT[self.dialect]))
            self._execute("UPDATE opperf_schema SET version = ?", (target,))
            self._record_writer()

    @property
    def version(self) -> int:
        with self._errors():
            return self._version()

    # writing

    def append(self, results: ResultSet, compare: Any = None, source: str = "session",
               commit_time: str | None = None) -> int | None:
        """Store one session in one transaction; its id, or ``None`` when these exact
        results are stored already."""
        commit = results.commit or {}
        gate = results.gate
        session = results.session or {}
        machine = results.machine or {}
        dirty = commit.get("dirty")
        row = (
            fingerprint(results, compare), utc(results.created) or "",
            datetime.now(timezone.utc).isoformat(timespec="seconds"), source, commit.get("sha"),
            commit.get("branch"), None if dirty is None else int(bool(dirty)), utc(commit_time),
            session.get("device") or machine.get("device"),
            session.get("device_class") or machine.get("device_class") or "unknown",
            session.get("workload") or "unknown", session.get("timing"), dumps(machine),
            None if gate is None else int(bool(gate.get("passed"))),
            None if gate is None else dumps(gate), None if compare is None else dumps(compare),
        )
        if not self._writer:
            raise HistoryError(f"{self.label}: opened for reading, cannot append")
        with self._errors(), self._transaction():
            got = self._execute(
                "INSERT INTO opperf_sessions (fingerprint, created, stored, source, commit_sha, "
                "branch, dirty, commit_time, device, device_class, workload, timing, machine, "
                "gate_passed, gate, compare) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "?) ON CONFLICT (fingerprint) DO NOTHING RETURNING id", row).fetchone()
            if got is None:
                return None
            session_id = int(got[0])
            self._record_writer()
            for run in results.runs:
                self._insert_run(session_id, run)
        return session_id

    def _insert_run(self, session_id: int, run: RunResult) -> None:
        columns = ["session_id", "run", "kind", "device", "timing", "wall_s", "examples",
                   "batches", "examples_per_sec", "sec_per_batch", "python_share",
                   "framework_share", "kernel_share", "executor_ms", "kernel_ms"]
        values: list[Any] = [
            session_id, run.id, run.kind, run.device, run.timing, run.wall_s, run.examples,
            run.batches, run.examples_per_sec, run.sec_per_batch, run.python_share,
            run.framework_share, run.kernel_share, run.executor_ms, run.kernel_ms]
        if self._schema >= 3:  # the steady state apart from the whole window's values above
            columns += ["steady_examples_per_sec", "steady_python_share"]
            values += list(steady_run_values(run))
        work = run.work
        if work is not None:  # named only then: a run without work counts is stored as before
            columns += ["work_steps", "work_pass_s", "work_versions", "work_varies",
                        "instructions", "instructions_cpu"]
            values += [work.steps, work.pass_s, dumps(work.versions), dumps(work.varies),
                       work.instructions, work.instructions_cpu]
        run_id = self._execute(
            f"INSERT INTO opperf_runs ({', '.join(columns)}) VALUES "
            f"({', '.join('?' * len(columns))}) RETURNING id", values).fetchone()[0]
        if work is not None:
            counts = [(run_id, stat, counter, n) for stat, by_counter in work.stats.items()
                      for counter, n in by_counter.items()]
            if counts:
                self._executemany("INSERT INTO opperf_work (run_id, stat, counter, value) "
                                  "VALUES (?, ?, ?, ?)", counts)
        rows = [(run_id, s.name, s.parent, int(s.kernel), s.clock, s.count, s.total_ms, s.avg_ms,
                 s.min_ms, s.max_ms, step_value(run, s), run.counts.get(s.name),
                 bounded_samples(s.samples_ms)) for s in run.stats]
        if rows:
            self._executemany(
                "INSERT INTO opperf_stats (run_id, name, parent, kernel, clock, count, total_ms, "
                "avg_ms, min_ms, max_ms, median_ms, step_count, samples) VALUES (?, ?, ?, ?, ?, ?, "
                "?, ?, ?, ?, ?, ?, ?)", rows)

    # reading

    def load(self, keep_run: Callable[[str], bool] | None = None) -> History:
        """Every stored session, run (with its work counts) and stat (runs filtered by
        ``keep_run``), in time order. A stored value of the wrong type (text in a number column)
        is a HistoryError naming the store and the problem."""
        try:
            return self._load(keep_run)
        except (TypeError, ValueError) as exc:  # HistoryError is neither
            raise HistoryError(f"{self.label}: a stored value is not of its column's type "
                               f"({one_line(exc)}): the store was written by something else "
                               "than pytest-opperf, or damaged") from None

    def _load(self, keep_run: Callable[[str], bool] | None) -> History:
        with self._errors():
            sessions = [StoredSession(
                id=int(r[0]), created=r[1], source=r[2], sha=r[3], branch=r[4],
                dirty=None if r[5] is None else bool(r[5]), commit_time=r[6], device=r[7],
                device_class=r[8], workload=r[9], timing=r[10],
                gate_passed=None if r[11] is None else bool(r[11]),
                compare=self._loads(r[12], f"session {r[0]}", "compare") if r[12] else None,
                runs=int(r[13]))
                for r in self._execute(
                    "SELECT s.id, s.created, s.source, s.commit_sha, s.branch, s.dirty, "
                    "s.commit_time, s.device, s.device_class, s.workload, s.timing, s.gate_passed, "
                    "s.compare, (SELECT COUNT(*) FROM opperf_runs r WHERE r.session_id = s.id) "
                    "FROM opperf_sessions s").fetchall()]
            counts: dict[int, dict[str, dict[str, int]]] = {}
            has_work = self._schema >= 2  # version 1 had no work counts
            work_rows = [] if not has_work else self._execute(
                "SELECT run_id, stat, counter, value FROM opperf_work "
                "ORDER BY run_id, stat, counter").fetchall()
            for r in work_rows:
                counts.setdefault(int(r[0]), {}).setdefault(r[1], {})[r[2]] = int(r[3])
            work_columns = ("work_steps, work_pass_s, work_versions, work_varies, instructions, "
                            "instructions_cpu" if has_work else ", ".join(["NULL"] * 6))
            steady_columns = ("steady_examples_per_sec, steady_python_share" if self._schema >= 3
                              else "NULL, NULL")  # before version 3: not kept
            runs = [StoredRun(int(r[1]), r[2], r[3], float(r[4]), float(r[5]), float(r[6]),
                              float(r[7]), float(r[8]), None if r[9] is None else WorkCounts(
                                  counts.get(int(r[0]), {}), int(r[9]), float(r[10]),
                                  self._loads(r[11], f"session {r[1]} run {r[2]!r}",
                                              "work_versions"),
                                  self._loads(r[12], f"session {r[1]} run {r[2]!r}",
                                              "work_varies"),
                                  None if r[13] is None else int(r[13]), r[14]),
                              None if r[15] is None else float(r[15]),
                              None if r[16] is None else float(r[16]))
                    for r in self._execute(
                        "SELECT id, session_id, run, kind, examples_per_sec, python_share, "
                        f"framework_share, kernel_share, wall_s, {work_columns}, {steady_columns} "
                        "FROM opperf_runs ORDER BY id").fetchall()
                    if keep_run is None or keep_run(r[2])]
            stats = [StoredStat(int(r[0]), r[1], r[2], r[3], bool(r[4]),
                                None if r[5] is None else float(r[5]),
                                None if r[6] is None else int(r[6]), float(r[7]))
                     for r in self._execute(
                         "SELECT r.session_id, r.run, s.name, s.parent, s.kernel, s.median_ms, "
                         "s.step_count, s.total_ms FROM opperf_stats s JOIN opperf_runs r ON "
                         "s.run_id = r.id ORDER BY r.id, s.total_ms DESC").fetchall()
                     if keep_run is None or keep_run(r[1])]
        sessions.sort(key=lambda s: (s.when, s.id))
        return History(sessions, runs, stats)

    def samples(self, session_id: int, run: str, stat: str) -> list[float] | None:
        """The bounded samples kept of one stat, or ``None``."""
        with self._errors():
            row = self._execute(
                "SELECT s.samples FROM opperf_stats s JOIN opperf_runs r ON s.run_id = r.id WHERE "
                "r.session_id = ? AND r.run = ? AND s.name = ?", (session_id, run, stat)).fetchone()
        where = f"session {session_id} run {run!r} stat {stat!r}"
        return self._loads(row[0], where, "samples") if row and row[0] else None

    def _loads(self, text: Any, where: str, column: str) -> Any:
        """A JSON column's value; malformed JSON is a HistoryError naming the row and column."""
        try:
            return json.loads(text)
        except (TypeError, ValueError) as exc:
            raise HistoryError(f"{self.label}: {where}: column {column} holds malformed JSON "
                               f"({one_line(exc)}): {str(text)!r:.60}") from None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except self._driver_errors:
                pass
            self._conn = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_session(source: str, results: ResultSet, compare: Any = None,
                   cwd: str | os.PathLike[str] = ".", timeout_s: float = 30.0) -> int | None:
    """Open (creating) the store, append one session with its commit's time, close.
    ``compare`` is the results' A/B object: a dict, or a record with ``to_dict()``."""
    if compare is not None and hasattr(compare, "to_dict"):
        compare = compare.to_dict()
    when = commit_time((results.commit or {}).get("sha"), cwd)
    with Store(source, create=True, timeout_s=timeout_s) as store:
        return store.append(results, compare, commit_time=when)
