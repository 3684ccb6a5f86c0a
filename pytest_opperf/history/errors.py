"""The history's errors: a store that cannot be used (one line naming it), a missing extra."""

from __future__ import annotations

__all__ = ["EXTRA_HINT", "HistoryError", "MissingExtra", "one_line"]

EXTRA_HINT = "pip install 'pytest-opperf[history]'"


class HistoryError(Exception):
    """A history store that cannot be used; the message is one line naming the store."""


class MissingExtra(HistoryError):
    """An optional library of the ``history`` extra is not installed."""


def one_line(exc: BaseException) -> str:
    """A driver's message as one line (its type's name when it has none)."""
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return text or type(exc).__name__

