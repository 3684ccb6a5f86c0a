"""Plugin tests read whole report lines: they run in a terminal wide enough that none wraps
(the report's wrapping at a given width is tested on the pure renderers)."""

import pytest


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
