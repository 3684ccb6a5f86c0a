"""The history store: sessions appended to a SQLite file or a PostgreSQL database, and read back.

A source is a path (a SQLite file, created on first append; stdlib ``sqlite3``) or a
``postgresql://`` URL (psycopg 3, the ``history`` extra). Both hold the same tables (prefixed
``opperf_`` so that a shared database keeps them apart) under a schema version; :data:`MIGRATIONS`
brings an older store up to date when a writer opens it, under a lock, so several writers opening a
new store at once create it once. Readers never write (see ``Store._connect``): they read an older
version as it is.

A run's work counts (:class:`~pytest_opperf.workcount.WorkCounts`, when the results have them) are
kept with it: each stat's self count per step of each counter, one row each, and the counting
pass's steps, versions and CPU instructions on the run's row.

One session is one transaction: its session row, every run, stat and work count are committed
together or not at all (an exception, Ctrl-C, a killed process or a lost connection leaves nothing
of it). Concurrent writers lose nothing: SQLite runs in WAL mode and waits up to ``timeout_s`` for
the write lock; PostgreSQL serialises nothing but the schema migration. Every database problem is
a :class:`HistoryError` with one line naming the store (a URL's password is never shown).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from .. import __version__
from ..results import ResultSet, RunResult, StatResult, is_sha, utf8_text
from ..stats import after_warmup, median
from ..workcount import WorkCounts

__all__ = ["EXTRA_HINT", "MIGRATIONS", "SAMPLES_KEPT", "History", "HistoryError", "MissingExtra",
           "Store", "StoredRun", "StoredSession", "StoredStat", "check_target", "commit_time",
           "check_url", "is_url", "redact", "scrub", "secrets_of", "step_value"]

SAMPLES_KEPT = 16  # per stat: enough to see a distribution, small for 1,000 sessions of 170 runs
EXTRA_HINT = "pip install 'pytest-opperf[history]'"
URL_SCHEMES = ("postgresql://", "postgres://")
WRITTEN_BY = f"pytest-opperf {__version__}"
_LOCK_KEY = 0x6F70706572660001  # pg_advisory_xact_lock key of the schema migration ("opperf" + 1)

# Each migration takes the store from version i to i + 1. {id}, {float} are the
# dialect's identity key and double type; everything else is the SQL both speak.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE opperf_sessions (
            id {id}, fingerprint TEXT NOT NULL UNIQUE,
            created TEXT NOT NULL, stored TEXT NOT NULL, source TEXT NOT NULL,
            commit_sha TEXT, branch TEXT, dirty INTEGER, commit_time TEXT,
            device TEXT, device_class TEXT NOT NULL, workload TEXT NOT NULL, timing TEXT,
            machine TEXT NOT NULL, gate_passed INTEGER, gate TEXT, compare TEXT)""",
        """CREATE TABLE opperf_runs (
            id {id},
            session_id BIGINT NOT NULL REFERENCES opperf_sessions (id) ON DELETE CASCADE,
            run TEXT NOT NULL, kind TEXT NOT NULL, device TEXT, timing TEXT,
            wall_s {float} NOT NULL, examples BIGINT NOT NULL, batches BIGINT NOT NULL,
            examples_per_sec {float} NOT NULL, sec_per_batch {float} NOT NULL,
            python_share {float} NOT NULL, framework_share {float} NOT NULL,
            kernel_share {float} NOT NULL, executor_ms {float} NOT NULL, kernel_ms {float} NOT NULL,
            UNIQUE (session_id, run))""",
        """CREATE TABLE opperf_stats (
            run_id BIGINT NOT NULL REFERENCES opperf_runs (id) ON DELETE CASCADE,
            name TEXT NOT NULL, parent TEXT, kernel INTEGER NOT NULL, clock TEXT NOT NULL,
            count BIGINT NOT NULL, total_ms {float} NOT NULL, avg_ms {float} NOT NULL,
            min_ms {float} NOT NULL, max_ms {float} NOT NULL, median_ms {float}, step_count BIGINT,
            samples TEXT, PRIMARY KEY (run_id, name))""",
        "CREATE INDEX opperf_sessions_group ON opperf_sessions (device_class, workload)",
        "CREATE INDEX opperf_runs_session ON opperf_runs (session_id)",
    ),
    (  # work counts: work_steps is NULL for a run without them
        "ALTER TABLE opperf_runs ADD COLUMN work_steps BIGINT",
        "ALTER TABLE opperf_runs ADD COLUMN work_pass_s {float}",
        "ALTER TABLE opperf_runs ADD COLUMN work_versions TEXT",
        "ALTER TABLE opperf_runs ADD COLUMN work_varies TEXT",
        "ALTER TABLE opperf_runs ADD COLUMN instructions BIGINT",
        "ALTER TABLE opperf_runs ADD COLUMN instructions_cpu TEXT",
        """CREATE TABLE opperf_work (
            run_id BIGINT NOT NULL REFERENCES opperf_runs (id) ON DELETE CASCADE,
            stat TEXT NOT NULL, counter TEXT NOT NULL, value BIGINT NOT NULL,
            PRIMARY KEY (run_id, stat, counter))""",
    ),
)

_DIALECT = {
    "sqlite": {"id": "INTEGER PRIMARY KEY", "float": "REAL"},
    "postgresql": {"id": "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
                   "float": "DOUBLE PRECISION"},
}


class HistoryError(Exception):
    """A history store that cannot be used; the message is one line naming the store."""


class MissingExtra(HistoryError):
    """An optional library of the ``history`` extra is not installed."""


# --- sources ----------------------------------------------------------------------------


def is_url(source: str) -> bool:
    return source.startswith(URL_SCHEMES)


# libpq's connection parameters that hold a secret or name a file of secrets; any other key
# with one of these words in it is taken for one too (a URL's query is printed without them)
_SECRET_KEYS = ("password", "sslpassword", "passfile", "sslkey", "sslcert", "sslkeylogfile")
_SECRET_WORDS = ("pass", "secret", "token", "key")


def _secret_key(key: str) -> bool:
    key = unquote(key).strip().lower()
    return key in _SECRET_KEYS or any(word in key for word in _SECRET_WORDS)


def _split_url(source: str) -> tuple[str, str, str, str, str, str]:
    """``scheme://userinfo@hosts/path?query#fragment`` as its six parts, without decoding
    or checking anything (so that a malformed URL can still be shown redacted)."""
    scheme, _, rest = source.partition("://")
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    return scheme, userinfo, hosts, slash + path, query, fragment


def secrets_of(source: str) -> list[str]:
    """The secrets a URL holds: its password and the values of secret query parameters
    (as written and percent-decoded)."""
    if not is_url(source):
        return []
    _, userinfo, _, _, query, _ = _split_url(source)
    found = [userinfo.partition(":")[2]] if ":" in userinfo else []
    found += [value for key, _, value in (p.partition("=") for p in query.split("&"))
              if _secret_key(key)]
    return sorted({v for raw in found if raw for v in (raw, unquote(raw))}, key=len, reverse=True)


def redact(source: str) -> str:
    """The source as it may be printed or stored: a URL's password and the values of its
    secret query parameters (``password=``, ``sslpassword=``, ``passfile=``...) as ``***``.
    Never raises, also for a malformed URL."""
    if not is_url(source):
        return source
    scheme, userinfo, hosts, path, query, fragment = _split_url(source)
    if ":" in userinfo:
        userinfo = userinfo.partition(":")[0] + ":***"
    params = [(key, eq, "***" if eq and _secret_key(key) else value)
              for key, eq, value in (p.partition("=") for p in query.split("&"))] if query else []
    text = f"{scheme}://{userinfo + '@' if userinfo else ''}{hosts}{path}"
    text += "?" + "&".join(k + eq + v for k, eq, v in params) if query else ""
    return text + (f"#{fragment}" if fragment else "")


def scrub(text: str, source: str) -> str:
    """``text`` (a driver's message) without any secret of ``source`` in it."""
    for secret in secrets_of(source):
        if len(secret) >= 4:
            text = text.replace(secret, "***")
        else:  # a short secret only as a word of its own: "e" must not mangle the message
            text = re.sub(rf"(?<![\w]){re.escape(secret)}(?![\w])", "***", text)
    return text


def check_url(source: str) -> None:
    """A ``postgresql://`` URL's hosts and ports, checked before a session runs (libpq's own
    error would come only at its end): every port a number in 1-65535, an IPv6 address in
    brackets and well formed. Several ``host:port`` may be given, comma-separated."""
    label = redact(source)
    hosts = _split_url(source)[2]
    for hostport in unquote(hosts).split(","):
        host, port = hostport, ""
        if hostport.startswith("["):
            host, bracket, port = hostport[1:].partition("]")
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                bracket = ""
            if not bracket or (port and not port.startswith(":")):
                raise HistoryError(f"{label}: malformed IPv6 host {hostport!r} (expected "
                                   "[address] or [address]:port)")
            port = port[1:]
        elif "[" in hostport or "]" in hostport:
            raise HistoryError(f"{label}: malformed IPv6 host {hostport!r} (expected [address] or "
                               "[address]:port)")
        elif hostport.count(":") > 1:
            raise HistoryError(f"{label}: malformed host {hostport!r} (an IPv6 address goes in "
                               "brackets: [address]:port)")
        else:
            host, _, port = hostport.partition(":")
        if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise HistoryError(f"{label}: port {port!r} of host {host!r} is not a number in "
                               "1-65535")


def _one_line(exc: BaseException) -> str:
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return text or type(exc).__name__


def _psycopg(label: str) -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingExtra(f"{label}: a PostgreSQL history needs psycopg 3 "
                           f"({EXTRA_HINT})") from None
    return psycopg


def check_target(source: str) -> None:
    """What can be known before a session runs: the scheme, the driver, the file's directory."""
    if "://" in source and not is_url(source):
        raise HistoryError(f"{redact(source)}: expected a path (SQLite) or a postgresql:// URL, "
                           f"got scheme {source.split('://', 1)[0]!r}")
    if is_url(source):
        check_url(source)
        _psycopg(redact(source))
        return
    path = Path(source)
    if path.is_dir():
        raise HistoryError(f"{source}: is a directory, expected a SQLite file")
    if not path.parent.is_dir():
        raise HistoryError(f"{source}: directory {path.parent} does not exist")


# --- records ------------------------------------------------------------------------------


def _utc(stamp: str | None) -> str | None:
    """An ISO-8601 time in UTC, so that stored times sort as text; unparsable ones as given."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).isoformat(timespec="seconds")


def commit_time(sha: str | None, cwd: str | os.PathLike[str] = ".") -> str | None:
    """The committer time of ``sha`` in the git repository at ``cwd`` (UTC), or ``None`` (no sha,
    no git, a commit this repository does not hold).

    ``sha`` comes from a results file: only a hexadecimal object name is given to git, and after
    ``--end-of-options``, so that no file can make git read it as an option (``--output=PATH``)."""
    if not sha or not is_sha(sha):
        return None
    try:
        done = subprocess.run(["git", "show", "-s", "--format=%cI", "--end-of-options", sha],
                              cwd=cwd, capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return _utc(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def step_value(run: RunResult, stat: StatResult) -> float | None:
    """The stat's per-step median (e2e: the per-step totals after the warm-up step, as the
    gate takes them) or per-call median (per-op benchmarks); without samples the mean."""
    samples = stat.samples_ms
    if samples:
        return median(after_warmup(samples) if run.kind == "e2e" else samples)
    if run.kind == "e2e":
        return stat.total_ms / run.batches if run.batches else None
    return stat.avg_ms


def _bounded(samples: Sequence[float] | None) -> str | None:
    if not samples:
        return None
    n = len(samples)
    if n > SAMPLES_KEPT:  # evenly spaced, first and last kept
        samples = [samples[round(i * (n - 1) / (SAMPLES_KEPT - 1))] for i in range(SAMPLES_KEPT)]
    return json.dumps([float(f"{x:.5g}") for x in samples])


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, allow_nan=False, default=str)


def fingerprint(results: ResultSet, compare: Any = None) -> str:
    """Identifies a session's results: importing the same file twice stores it once. (Every
    fact but the samples: hashing those would cost more than storing the session.)"""
    runs: list[list[Any]] = [
        [r.id, r.kind, r.wall_s, r.examples, r.examples_per_sec, r.python_share,
         [(s.name, s.count, s.total_ms, s.min_ms, s.max_ms) for s in r.stats]]
        for r in results.runs]
    for run, row in zip(results.runs, runs, strict=True):
        if run.work is not None:  # only then: a file without work counts keeps its fingerprint
            row.append(run.work.to_dict())
    doc = [results.created, results.commit, results.session, results.machine, results.gate, compare,
           runs]
    return hashlib.sha256(_dumps(doc).encode()).hexdigest()


@dataclass(frozen=True)
class StoredSession:
    id: int
    created: str
    source: str
    sha: str | None
    branch: str | None
    dirty: bool | None
    commit_time: str | None
    device: str | None
    device_class: str
    workload: str
    timing: str | None
    gate_passed: bool | None
    compare: Any
    runs: int

    @property
    def when(self) -> str:
        """The time the trends order by: the commit's when known, else the session's."""
        return self.commit_time or self.created


@dataclass(frozen=True)
class StoredRun:
    """A stored run; ``work`` its work counts per step (None: the run had none, or was stored
    before the store kept them)."""

    session_id: int
    run: str
    kind: str
    examples_per_sec: float
    python_share: float
    framework_share: float
    kernel_share: float
    wall_s: float
    work: WorkCounts | None = None


@dataclass(frozen=True)
class StoredStat:
    session_id: int
    run: str
    name: str
    parent: str | None
    kernel: bool
    value: float | None  # per-step (e2e) or per-call (op) median, ms
    step_count: int | None
    total_ms: float


@dataclass
class History:
    """What a store holds, in time order (sessions by :attr:`StoredSession.when`)."""

    sessions: list[StoredSession] = field(default_factory=list)
    runs: list[StoredRun] = field(default_factory=list)
    stats: list[StoredStat] = field(default_factory=list)


# --- the store --------------------------------------------------------------------------------


def _wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """WAL mode (readers never block the writer, nor it them), switched on once per file.

    The switch needs the file to itself, and SQLite answers "locked" at once, without
    waiting, when it would deadlock with a writer that is creating the store at the
    same moment: so it is retried, up to the busy timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


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
            psycopg = _psycopg(self.label)
            self._driver_errors = (psycopg.Error,)
            timeout = {"connect_timeout": max(1, round(timeout_s))}
            extra = {} if "connect_timeout" in self.source else timeout
            conn = psycopg.connect(self.source, autocommit=True, **extra)
            if not create:  # a reader: every statement in a read-only transaction, no DDL
                conn.execute("SET default_transaction_read_only = on")
            return conn
        path = Path(self.source)
        if path.is_dir():
            raise HistoryError(f"{self.label}: is a directory, expected a SQLite file")
        if not create and not path.exists():
            raise HistoryError(f"{self.label}: no such file")
        # A reader never writes: with a -wal (or -journal) beside the file, a writer may hold
        # commits there, which mode=ro reads (its -shm exists already); without one, the file
        # holds every commit and immutable=1 reads it with no lock and no -shm/-wal created,
        # also on a read-only file, directory or mount (where mode=ro cannot create the -shm).
        if create:
            mode = "mode=rwc"  # transactions are explicit: no isolation_level
        elif any(Path(f"{path}{end}").exists() for end in ("-wal", "-journal")):
            mode = "mode=ro"
        else:
            mode = "immutable=1"
        conn = sqlite3.connect(f"file:{quote(str(path))}?{mode}", uri=True, timeout=timeout_s,
                               isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        if create:
            _wal(conn, timeout_s)
        return conn

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
            message = scrub(_one_line(exc), self.source)
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
                self._execute("SELECT pg_advisory_xact_lock(?)", (_LOCK_KEY,))
            version = self._version()  # again, under the lock: another writer may have migrated
            if version == 0 and not self._has_schema_table():
                self._execute("CREATE TABLE opperf_schema (version INTEGER NOT NULL)")
                self._execute("INSERT INTO opperf_schema (version) VALUES (0)")
            for statements in self._migrations[version:]:
                for statement in statements:
                    self._execute(statement.format(**_DIALECT[self.dialect]))
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
            fingerprint(results, compare), _utc(results.created) or "",
            datetime.now(timezone.utc).isoformat(timespec="seconds"), source, commit.get("sha"),
            commit.get("branch"), None if dirty is None else int(bool(dirty)), _utc(commit_time),
            session.get("device") or machine.get("device"),
            session.get("device_class") or machine.get("device_class") or "unknown",
            session.get("workload") or "unknown", session.get("timing"), _dumps(machine),
            None if gate is None else int(bool(gate.get("passed"))),
            None if gate is None else _dumps(gate), None if compare is None else _dumps(compare),
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
        work = run.work
        if work is not None:  # named only then: a run without work counts is stored as before
            columns += ["work_steps", "work_pass_s", "work_versions", "work_varies",
                        "instructions", "instructions_cpu"]
            values += [work.steps, work.pass_s, _dumps(work.versions), _dumps(work.varies),
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
                 _bounded(s.samples_ms)) for s in run.stats]
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
                               f"({_one_line(exc)}): the store was written by something else "
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
            runs = [StoredRun(int(r[1]), r[2], r[3], float(r[4]), float(r[5]), float(r[6]),
                              float(r[7]), float(r[8]), None if r[9] is None else WorkCounts(
                                  counts.get(int(r[0]), {}), int(r[9]), float(r[10]),
                                  self._loads(r[11], f"session {r[1]} run {r[2]!r}",
                                              "work_versions"),
                                  self._loads(r[12], f"session {r[1]} run {r[2]!r}",
                                              "work_varies"),
                                  None if r[13] is None else int(r[13]), r[14]))
                    for r in self._execute(
                        "SELECT id, session_id, run, kind, examples_per_sec, python_share, "
                        f"framework_share, kernel_share, wall_s, {work_columns} "
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
                               f"({_one_line(exc)}): {str(text)!r:.60}") from None

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
