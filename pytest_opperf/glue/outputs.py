"""The files a session writes: the results JSON, the markdown (and the job summary), the trace,
the saved baseline.

Their directories are checked when the session starts (:func:`check_outputs`: what would stop a
write is a usage error then) and created when it writes, never before. A file that cannot be
written is an error of the report naming it; the other files are still written.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..records import atomic
from ..records.save import SaveRefused, baseline_to_save
from ..reports import report
from ..results import ResultSet, json_problem, write_results
from .settings import Settings

__all__ = ["OUTPUTS", "Outputs", "check_outputs", "directory_problem"]

OUTPUTS = ("save", "json", "markdown", "trace")  # the files the options name


def directory_problem(directory: Path) -> str | None:
    """Why the output directory ``directory`` (absolute) cannot be there when the session writes,
    or None: it exists, or its missing part can be created in the directory above it."""
    existing = next((p for p in (directory, *directory.parents) if os.path.lexists(p)), directory)
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if existing != directory and not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot create directory {directory}: no permission to write in {existing}"
    return None


def check_outputs(settings: Settings) -> None:
    """Output files and their directories: missing directories are created when the session
    writes (never before); what would stop that is a usage error now."""
    for name in OUTPUTS:
        path = settings.paths.get(name)
        if path is None or (name == "save" and path.is_dir()):
            continue
        label = settings.label(name)
        if name != "save" or not settings.save_dir:
            if path.is_dir():
                raise pytest.UsageError(f"opperf: {label}: is a directory, expected a file")
            path = path.parent
        problem = directory_problem(path)
        if problem:
            raise pytest.UsageError(f"opperf: {label}: {problem}")


@dataclass
class Outputs:
    """Writes a session's files and keeps what the report says of them."""

    settings: Settings
    errors: list[str]  # the session's errors: a file not written is one
    notes: list[str]  # the session's notes: "not saved, no measured runs"
    written: list[str] = field(default_factory=list)  # "json: <path>", one a file written
    save_notes: list[str] = field(default_factory=list)  # what --opperf-save merged

    def write(self, name: str, write: Callable[[Path], None], path: Path | None = None,
              label: str | None = None) -> None:
        path = path or self.settings.paths.get(name)
        if path is None:
            return
        try:
            if name in OUTPUTS:  # its missing directories, checked at the start
                path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
        except (OSError, ValueError) as exc:
            self.errors.append(f"{label or self.settings.label(name)}: cannot write {path}: {exc}")
        else:
            self.written.append(f"{name}: {path}")

    def write_all(self, results: ResultSet, markdown: Callable[[], str],
                  baseline_in: Callable[[Path], Path], partial: list[str]) -> None:
        """Every file the options name: ``markdown`` makes the markdown text (only when a file
        or the job summary takes it), ``baseline_in`` names the baseline file of a save
        directory, ``partial`` is what the session did not run (:func:`baseline_to_save`)."""
        self._drop_unwritable_runs(results)
        self.write("json", lambda p: write_results(p, results))
        save = self.settings.paths.get("save")
        if save is not None:
            if not results.runs:
                self.notes.append(f"{self.settings.label('save')}: not saved, no measured runs")
            else:
                self._save(results, save, baseline_in, partial)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if "markdown" in self.settings.paths or summary:
            text = markdown()
            self.write("markdown", lambda p: atomic.write_text_atomic(p, text))
            if summary:
                def append(p: Path) -> None:
                    with open(p, "a", encoding="utf-8") as f:
                        f.write(atomic.utf8_text(text))  # file names of a non-UTF-8 locale

                self.write("step summary", append, Path(summary), label="GITHUB_STEP_SUMMARY")
        self.write("trace", lambda p: atomic.write_json_atomic(p, report.chrome_trace(results)))

    def _drop_unwritable_runs(self, results: ResultSet) -> None:
        """Runs that JSON cannot hold (a hook put NaN or an object in them) are left out of every
        file, each with an error naming the run and the field; the other runs are written."""
        keep = []
        for run in results.runs:
            problem = json_problem(run.to_dict(), "run")
            if problem:
                self.errors.append(f"run {run.id!r} not written: {problem}")
            else:
                keep.append(run)
        results.runs[:] = keep

    def _save(self, results: ResultSet, save: Path, baseline_in: Callable[[Path], Path],
              partial: list[str]) -> None:
        """``--opperf-save``: a partial session merges into the baseline, or refuses (save.py)."""
        if self.settings.save_dir:
            try:
                save.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                label = self.settings.label("save")
                self.errors.append(f"{label}: cannot create directory {save}: {exc}")
                return
        target = baseline_in(save) if save.is_dir() else save
        try:
            saved = baseline_to_save(results, target, partial)
        except SaveRefused as exc:
            self.errors.append(f"{self.settings.label('save')}: {exc}")
            return
        self.write("save", lambda p: write_results(p, saved.results), target)
        if saved.note and f"save: {target}" in self.written:
            self.save_notes.append(saved.note)
