"""Opening a connection to a history: a SQLite file (WAL for writers; a reader that never writes,
also on a read-only file or mount) or a PostgreSQL database (psycopg 3, a reader read-only)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .errors import HistoryError

__all__ = ["connect_postgresql", "connect_sqlite"]


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


def connect_postgresql(psycopg: Any, source: str, create: bool, timeout_s: float) -> Any:
    """An autocommit connection; a reader's (``create`` false) runs every statement in a read-only
    transaction. ``timeout_s`` is the connect timeout unless the URL sets one."""
    timeout = {"connect_timeout": max(1, round(timeout_s))}
    extra = {} if "connect_timeout" in source else timeout
    conn = psycopg.connect(source, autocommit=True, **extra)
    if not create:  # a reader: every statement in a read-only transaction, no DDL
        conn.execute("SET default_transaction_read_only = on")
    return conn


def connect_sqlite(source: str, label: str, create: bool, timeout_s: float) -> sqlite3.Connection:
    """A connection with foreign keys on; ``create``: the file is created if missing and put in
    WAL mode, else a missing file is a :class:`HistoryError`."""
    path = Path(source)
    if path.is_dir():
        raise HistoryError(f"{label}: is a directory, expected a SQLite file")
    if not create and not path.exists():
        raise HistoryError(f"{label}: no such file")
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
