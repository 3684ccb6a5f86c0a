"""``python -m pytest_opperf history|dashboard``: load results into a history, look at it.

* ``history import FILE.json... --into SOURCE``: store results files and baselines (each once: a
  file already stored is skipped and said so).
* ``history SOURCE [--run GLOB] [--stat NAME] [--last N] [--summary PATH]``: sessions, trend
  tables over the last N commits, change points, and the suspected regressions among them
  (:mod:`.suspects`; ``--summary`` also appends them as markdown, e.g. to the job summary).
* ``dashboard SOURCE --out DIR [--last N]``: ``DIR/index.html``.
"""

from __future__ import annotations

import argparse
import fnmatch
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ..records.checks import results_from_dict
from ..records.reader import loads_strict, read_text
from ..results import ResultsError
from .errors import HistoryError
from .records import History, commit_time
from .store import Store

__all__ = ["add_commands", "run_command"]


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def add_commands(commands: argparse._SubParsersAction) -> None:
    history = commands.add_parser(
        "history", help="sessions, trends, change points of a history (or: history import FILE...)",
        usage="%(prog)s SOURCE [--run GLOB] [--stat NAME] [--last N] [--summary PATH]\n"
              "       %(prog)s import FILE.json... --into SOURCE")
    history.add_argument("source", metavar="SOURCE",
                         help="a SQLite file or a postgresql:// URL; or 'import'")
    history.add_argument("files", metavar="FILE.json", nargs="*",
                         help="with import: results files to store")
    history.add_argument("--into", metavar="SOURCE",
                         help="with import: the history to store them in")
    history.add_argument("--run", metavar="GLOB", help="only runs whose id matches (default: all)")
    history.add_argument("--stat", metavar="NAME",
                         help="only these stats (a glob; also examples_per_sec, python_share, "
                         "their whole-window window_examples_per_sec, window_python_share, "
                         "and the work counts bytecodes, py_calls, c_calls, instructions; "
                         "default: the run metrics, each e2e run's top 10 stats and its work "
                         "counts per step)")
    history.add_argument("--last", metavar="N", type=_positive, default=10,
                         help="commits shown in the trend tables (default: 10)")
    history.add_argument("--summary", metavar="PATH",
                         help="append the suspected regressions of the last N commits as markdown "
                         "to PATH (e.g. $GITHUB_STEP_SUMMARY)")
    dashboard = commands.add_parser("dashboard", help="write a static dashboard DIR/index.html")
    dashboard.add_argument("source", metavar="SOURCE", help="a SQLite file or a postgresql:// URL")
    dashboard.add_argument("--out", metavar="DIR", required=True,
                           help="directory for index.html (created)")
    dashboard.add_argument("--last", metavar="N", type=_positive,
                           help="only the last N commits (default: all)")


def _import(files: Sequence[str], into: str, out: TextIO) -> None:
    documents = []
    for name in files:  # read and check every file first: one bad file stores nothing
        data = loads_strict(read_text(name, ResultsError, "a results file"), name)
        results = results_from_dict(data, source=name)
        compare = data.get("compare") if isinstance(data.get("compare"), dict) else None
        documents.append((name, results, compare))
    with Store(into, create=True) as store:
        for name, results, compare in documents:
            when = commit_time((results.commit or {}).get("sha"))
            sid = store.append(results, compare, source=name, commit_time=when)
            if sid is None:
                out.write(f"{name}: already in the history, skipped\n")
            else:
                out.write(f"{name}: stored as session {sid} ({len(results.runs)} runs)\n")


def _load(source: str, run_glob: str | None) -> tuple[str, History]:
    with Store(source) as store:
        keep = (lambda run: fnmatch.fnmatchcase(run, run_glob)) if run_glob else None
        return store.label, store.load(keep)


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``history`` or ``dashboard``; raises HistoryError/ResultsError/_Usage-like errors."""
    from . import trends

    if args.command == "history":
        if args.source == "import":
            if not args.files or not args.into:
                raise HistoryError("history import: expected FILE.json... --into SOURCE")
            if args.summary:
                raise HistoryError("history import: --summary is for history SOURCE")
            _import(args.files, args.into, out)
            return 0
        if args.files or args.into:
            raise HistoryError(f"history {args.source}: unexpected arguments "
                               f"{' '.join(args.files) or '--into'} "
                               "(to store files: history import FILE.json... --into SOURCE)")
        from . import suspects

        label, history = _load(args.source, args.run)
        groups = trends.build(history)
        found = suspects.find(groups, args.last, stat_glob=args.stat)
        for line in [*trends.history_lines(label, groups, args.stat, args.last), "",
                     *suspects.text_lines(found, args.last)]:
            out.write(line + "\n")
        if args.summary:
            text = "\n".join(suspects.markdown_lines(found, args.last)) + "\n"
            try:
                with open(args.summary, "a", encoding="utf-8") as f:
                    f.write(text)
            except OSError as exc:
                raise HistoryError(f"--summary {args.summary}: cannot write: {exc}") from None
        return 0
    from . import dashboard

    started = time.perf_counter()
    label, history = _load(args.source, None)
    groups = trends.build(history, args.last)
    target = Path(args.out)
    if target.exists() and not target.is_dir():
        raise HistoryError(f"--out {args.out}: is not a directory")
    target.mkdir(parents=True, exist_ok=True)
    page = target / "index.html"
    size = dashboard.write(page, label, groups, history)
    out.write(f"wrote dashboard: {page} ({size / 1e6:.2f} MB, {len(history.sessions)} session(s), "
              f"{time.perf_counter() - started:.2f} s)\n")
    return 0
