"""``python -m pytest_opperf merge`` and ``gate``: the last job of a CI matrix.

``merge OUT.json IN.json...`` joins the results files of a session's parts
(:mod:`pytest_opperf.comparison.merge`); ``gate RESULTS.json [--baseline B] [--thresholds T]`` gives
a results file the verdict the session would have given, with its exit status (0 pass, 1 fail, 4
usage error): :func:`verdict_of` is the session's gate on stored results (``gate.evaluate``: the
``[[limit]]``s and the baseline's counts, work counts and drift; ``gate.add_compare``: the A/B
decisions stored in ``compare`` and the A/B problems and the incompleteness kept in the stored
``gate``). It can also write the results with that verdict, the markdown report and the pull
request comment (:mod:`pytest_opperf.reports.comment`).
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path
from typing import TextIO

from ..ab.paired import CompareResult
from ..core.identity import baseline_variant
from ..records.atomic import write_text_atomic
from ..records.reader import read_results
from ..reports import report
from ..results import ResultSet, baseline_file, write_results
from .gate import UNDECIDED_MODES, add_compare, evaluate
from .merge import Part, merge
from .thresholds import Thresholds, load_thresholds
from .verdict import Verdict

__all__ = ["AB_PROBLEMS", "add_commands", "run_command", "verdict_of"]

AB_PROBLEMS = ("ab:base", "ab:rerun")  # tests that could not be compared (gate.add_compare)
EXIT_OK, EXIT_GATE = 0, 1


def add_commands(commands: argparse._SubParsersAction) -> None:
    """The ``merge`` and ``gate`` subcommands."""
    m = commands.add_parser("merge", help="join the results files of a session's shards")
    m.add_argument("out", metavar="OUT.json")
    m.add_argument("parts", metavar="IN.json", nargs="+")
    g = commands.add_parser("gate", help="the session's verdict on a results file (exit 1: fail)")
    g.add_argument("results", metavar="RESULTS.json")
    g.add_argument("--baseline", metavar="PATH",
                   help="a baseline file, or a directory holding <device_class>-<workload>.json")
    g.add_argument("--thresholds", metavar="PATH", help="thresholds file (TOML)")
    g.add_argument("--compare-undecided", choices=UNDECIDED_MODES, default="inconclusive",
                   help="what undecided A/B metrics do, as --opperf-compare-undecided: "
                   "inconclusive ones fail (the default), none or all fail")
    g.add_argument("--json", metavar="PATH", help="write the results with this verdict")
    g.add_argument("--markdown", metavar="PATH", help="write the markdown report (also "
                   "appended to $GITHUB_STEP_SUMMARY when set)")
    g.add_argument("--comment", metavar="PATH", help="write the pull request comment (markdown)")
    g.add_argument("--report-url", metavar="URL", help="the full report's address, for the comment")
    g.add_argument("--dashboard-url", metavar="URL",
                   help="the dashboard's address, for the comment")
    g.add_argument("--sort", choices=sorted(report.SORT_KEYS), default="total")


def _baseline(path: str | None, results: ResultSet,
              warnings: list[str]) -> tuple[ResultSet | None, str | None]:
    """As the session reads ``--opperf-baseline``: a directory holds one file per hardware class,
    workload and variant; a directory without this session's file is a warning."""
    if path is None:
        return None, None
    given = Path(path).absolute()
    if not os.path.lexists(given):
        raise FileNotFoundError(f"--baseline {path}: no such file or directory")
    if given.is_dir():
        s = results.session
        variant = baseline_variant(str(s.get("timing", "")), bool(s.get("l2_flush")))
        device_class, workload = str(s.get("device_class")), str(s.get("workload"))
        given = baseline_file(given, device_class, workload, variant)
        if not os.path.lexists(given):
            warnings.append(f"no baseline {given} for device class {device_class!r} and "
                            f"workload {workload!r}: only absolute limits are checked")
            return None, None
    return read_results(given), str(given)


def verdict_of(results: ResultSet, thresholds: Thresholds | None = None,
               baseline: ResultSet | None = None, baseline_name: str | None = None,
               undecided: str = "inconclusive", source: str = "compare") -> Verdict:
    """The session's verdict on stored ``results``: the same gate functions on the same inputs
    (runs, limits, baseline, the A/B decisions), with the tests the A/B could not compare and
    the incompleteness that the stored verdict records. ``source`` names the results file in
    a refusal of its A/B decisions."""
    verdict = evaluate(results, thresholds, baseline, baseline_name)
    stored = Verdict.from_dict(results.gate) if results.gate is not None else None
    if stored is not None and stored.incomplete is not None:
        verdict.incomplete = stored.incomplete
    problems = [(v.run, v.metric, v.message) for v in (stored.violations if stored else [])
                if v.metric in AB_PROBLEMS]
    compare = (CompareResult.from_dict(results.compare, source)
               if results.compare is not None else None)
    if compare is not None or problems:
        add_compare(verdict, compare, problems, undecided)
    return verdict


def _out(path: str) -> str:
    """An output file's path, its missing directories made (as the plugin's output files)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return path


def _merge(args: argparse.Namespace, out: TextIO) -> int:
    parts = [Part(name, read_results(name)) for name in args.parts]
    merged = merge(parts)
    write_results(_out(args.out), merged)
    shards = [p.label for p in parts]
    out.write(f"opperf merge: {len(merged.runs)} run(s) from {len(parts)} file(s) "
              f"({', '.join(shards)}) -> {args.out}\n")
    if any(m.get("machine") for m in merged.session.get("merged", [])):
        out.write("note: the parts ran on different machines: each run's notes say which\n")
    return EXIT_OK


def _gate(args: argparse.Namespace, out: TextIO) -> int:
    results = read_results(args.results)
    thresholds = load_thresholds(Path(args.thresholds).absolute()) if args.thresholds else None
    warnings: list[str] = []
    baseline, name = _baseline(args.baseline, results, warnings)
    verdict = verdict_of(results, thresholds, baseline, name, args.compare_undecided,
                         args.results)
    verdict.warnings[:0] = warnings
    width = shutil.get_terminal_size().columns  # COLUMNS when set
    out.write(f"opperf gate: {args.results}\n")
    for line in report.verdict_lines(verdict, width):
        out.write(line + "\n")
    results.gate = verdict.to_dict()
    compare = (CompareResult.from_dict(results.compare, args.results)
               if results.compare is not None else None)
    if args.json:
        write_results(_out(args.json), results)
    if args.markdown:
        text = report.markdown(results, verdict, args.sort)
        if compare is not None:
            from ..ab import render

            text += "\n" + render.markdown(compare)
        write_text_atomic(_out(args.markdown), text)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:  # as the plugin's --opperf-markdown: the report is the job's summary
            with open(summary, "a", encoding="utf-8") as f:
                f.write(text)
    if args.comment:
        from ..reports.comment import render_comment

        text = render_comment(results, verdict, compare, args.report_url, args.dashboard_url)
        write_text_atomic(_out(args.comment), text)
    return EXIT_OK if verdict.passed else EXIT_GATE


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    return _merge(args, out) if args.command == "merge" else _gate(args, out)
