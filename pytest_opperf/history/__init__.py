"""The history of sessions: a store (SQLite or PostgreSQL), trends with change points, a dashboard.

* :mod:`.store` appends a session's results to a history and reads them back
  (``--opperf-history=PATH|URL``, ``python -m pytest_opperf history import``), on
  :mod:`.sources` (what a source names, its secrets redacted, checks before a session),
  :mod:`.connect` (opening SQLite or PostgreSQL), :mod:`.schema` (the tables' migrations),
  :mod:`.records` (what is stored and read back) and :mod:`.errors`.
* :mod:`.changepoints` finds where a series stepped (a penalised step fit).
* :mod:`.trends` turns stored sessions into per-metric series over commits and the ``history``
  command's tables.
* :mod:`.dashboard` renders the static site of ``python -m pytest_opperf dashboard``.
* :mod:`.commands` is the command line of both.

None of them imports pytest; SQLite needs nothing beyond the standard
library, PostgreSQL and the dashboard need the ``history`` extra.
"""
