"""What ``--opperf-save`` writes: a partial session never drops the runs it did not measure.

A session is *partial* when some of its runs could not be measured: it was interrupted (Ctrl-C,
``-x``), tests were deselected (``-k``, ``-m``), a test that measured failed (its run is dropped),
per-op benchmarks ran untimed (``--benchmark-disable``, xdist) or an xdist worker went down. A
complete session replaces the baseline. A partial one keeps every run of the existing baseline it
did not measure (merge): measured runs replace theirs, new runs are added. When the existing file
cannot be read, or holds another device class or workload, a partial session refuses to save rather
than drop runs. Every outcome is one line for the report. No pytest import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..results import ResultsError, ResultSet
from .reader import read_results

__all__ = ["SaveRefused", "Saved", "baseline_to_save"]


class SaveRefused(Exception):
    """The session's results must not be saved; the message is one line saying why."""


@dataclass(frozen=True)
class Saved:
    """The results to write and the report line saying what they hold (None: nothing to say)."""

    results: ResultSet
    note: str | None


def baseline_to_save(results: ResultSet, target: Path, partial: list[str]) -> Saved:
    """The results ``--opperf-save`` writes to ``target`` (raises :class:`SaveRefused`).

    ``partial`` holds why the session is partial (empty: complete)."""
    if not partial:
        return Saved(results, None)
    why = f"partial session ({'; '.join(partial)})"
    if not os.path.lexists(target):
        return Saved(results, f"{why}: saved the {len(results.runs)} measured run(s); there was no "
                              f"baseline at {target} to keep other runs from")
    try:
        existing = read_results(target)
    except ResultsError as exc:
        raise SaveRefused(f"not saved: {why}, and the existing baseline cannot be read to keep the "
                          f"runs this session did not measure: {exc}") from None
    for key in ("device_class", "workload"):
        was, now = existing.session.get(key), results.session.get(key)
        if was is not None and now is not None and was != now:
            raise SaveRefused(f"not saved: {why}, and the existing baseline {target} is of {key} "
                              f"{was!r}, not {now!r}: its runs cannot be kept in this one")
    measured = {r.id: r for r in results.runs}
    kept = [r for r in existing.runs if r.id not in measured]
    old_ids = {r.id for r in existing.runs}
    runs = [measured.get(r.id, r) for r in existing.runs]
    runs += [r for r in results.runs if r.id not in old_ids]
    note = (f"{why}: saved {len(results.runs)} measured run(s) and kept {len(kept)} run(s) of the "
            f"existing baseline {target} that this session did not measure")
    return Saved(replace(results, runs=runs), note)
