"""Files written so that a reader sees the old file or the new one, never a part.

The data goes to a temp file beside the target (the rename cannot cross file systems), is
fsynced, and replaces the target in one rename; on any error the temp file is removed and the
target is untouched. Temp files that a killed writer left are removed by the next writer.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

__all__ = ["remove_stale_temps", "utf8_text", "write_bytes_atomic", "write_json_atomic",
           "write_text_atomic"]


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` so that readers see the old file or the new one.

    The data goes to a temp file in the same directory (so the rename cannot
    cross file systems), is fsynced, and replaces ``path`` in one rename; on
    any error the temp file is removed and ``path`` is untouched.
    """
    write_text_atomic(path, json.dumps(obj, allow_nan=False) + "\n")


def _temp_beside(target: Path) -> tuple[int, str]:
    """A new temp file next to ``target``, created with mode 0o666 so that the
    umask applies as for any new file (mkstemp's would stay private, 0o600)."""
    while True:
        tmp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), str(tmp)
        except FileExistsError:
            continue


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process
        return True
    return True


def remove_stale_temps(target: Path) -> int:
    """Remove the temp files that writers of ``target`` killed mid-write left
    behind (named by a process that no longer runs); returns how many."""
    prefix = f".{target.name}."
    try:
        names = os.listdir(target.parent)
    except OSError:
        return 0
    removed = 0
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        parts = name[len(prefix):-len(".tmp")].split(".")
        pid = int(parts[0]) if len(parts) == 2 and parts[0].isdigit() else None
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        try:
            os.unlink(target.parent / name)
            removed += 1
        except OSError:
            pass
    return removed


def utf8_text(text: str) -> str:
    """``text`` as UTF-8 can encode it. Under a file-system encoding that is not
    UTF-8 (``LC_ALL=C``) Python decodes a non-ASCII file name, and so a test's node
    id, with surrogate escapes (``test_\\udcc3\\udca9.py``), which no UTF-8 writer
    takes: their bytes are decoded as UTF-8 again (``test_é.py``); bytes that are no
    UTF-8, and lone surrogates, become ``\\x``/``\\u`` escapes. Text without
    surrogates is returned as it is."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that escapes no byte (from "\\ud800" in JSON)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`write_bytes_atomic`). Text UTF-8 cannot
    encode (file names under a non-UTF-8 locale) is written as :func:`utf8_text` gives it."""
    write_bytes_atomic(path, utf8_text(text).encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`write_json_atomic`).

    A symbolic link is written through: its target is replaced and the link stays. A path that is
    not a regular file (``/dev/null``, a FIFO) is written to in place, as a shell redirection would,
    never replaced by a file. Temp files of killed earlier writers are removed first."""
    target = Path(path)
    if os.path.islink(target):
        target = Path(os.path.realpath(target))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(target, "wb") as f:
            f.write(data)
        return
    remove_stale_temps(target)
    fd, tmp = _temp_beside(target)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
