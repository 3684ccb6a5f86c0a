"""``python -m pytest_opperf``: compare or show results files, or read a history, outside pytest.

``compare BASE.json NEW.json [--thresholds T]`` gives the plugin's verdicts and exit codes (0 pass,
1 gate violations, 4 usage error or unreadable file) for CI steps that run no tests; ``show R.json``
prints the terminal report stored in a results file. ``history`` and ``dashboard`` read a history
store (:mod:`pytest_opperf.history.commands`). ``schema`` prints the path of the results format's
JSON Schema.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from .comparison.gate import evaluate
from .comparison.thresholds import ThresholdsError, load_thresholds
from .comparison.verdict import Verdict
from .history.errors import HistoryError
from .records.reader import read_results
from .reports import report
from .results import ResultsError

__all__ = ["main"]

EXIT_OK, EXIT_GATE, EXIT_USAGE = 0, 1, 4


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 4: as the plugin's usage errors
        raise _Usage(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m pytest_opperf", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    compare = commands.add_parser("compare", help="gate NEW against BASE (exit 1 on violations)")
    compare.add_argument("base", metavar="BASE.json")
    compare.add_argument("new", metavar="NEW.json")
    compare.add_argument("--thresholds", metavar="PATH", help="thresholds file (TOML)")
    compare.add_argument("--markdown", metavar="PATH", help="also write the markdown report")
    compare.add_argument("--sort", choices=sorted(report.SORT_KEYS), default="total")
    show = commands.add_parser("show", help="print the terminal report of a results file")
    show.add_argument("results", metavar="R.json")
    show.add_argument("--sort", choices=sorted(report.SORT_KEYS), default="total")
    commands.add_parser("schema", help="print the path of the results format's JSON Schema")
    from .comparison.gate_cli import add_commands as add_gate_commands

    add_gate_commands(commands)  # merge, gate: the last job of a CI matrix
    from .history.commands import add_commands

    add_commands(commands)
    from .bisect.command import add_command as add_bisect

    add_bisect(commands)
    return parser


def _compare(args: argparse.Namespace, out: TextIO) -> int:
    base = read_results(args.base)
    new = read_results(args.new)
    thresholds = load_thresholds(args.thresholds) if args.thresholds else None
    verdict = evaluate(new, thresholds, base, args.base)
    out.write(f"opperf compare: {args.base} -> {args.new}\n")
    width = shutil.get_terminal_size().columns  # COLUMNS when set
    for line in report.verdict_lines(verdict, width):
        out.write(line + "\n")
    if args.markdown:
        from .records.atomic import write_text_atomic

        new.gate = verdict.to_dict()
        write_text_atomic(args.markdown, report.markdown(new, verdict, args.sort))
    return EXIT_OK if verdict.passed else EXIT_GATE


def _show(args: argparse.Namespace, out: TextIO) -> int:
    results = read_results(args.results)
    verdict = Verdict.from_dict(results.gate) if results.gate else None
    width = shutil.get_terminal_size().columns  # COLUMNS when set
    for line in report.terminal_lines(results, verdict, args.sort, width=width):
        out.write(line + "\n")
    if verdict is not None and not verdict.passed:
        for line in report.gate_section(verdict, width):
            out.write(line + "\n")
    return EXIT_OK


def _run(argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    tail: list[str] = []
    if argv[:1] == ["bisect"] and "--" in argv:  # bisect GOOD BAD [options] -- PYTEST_ARGS
        argv, tail = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = _parser().parse_args(argv)
    if args.command == "bisect":
        from .bisect.command import run_command as bisect

        args.pytest_args = tail
        return bisect(args, out, err)
    if args.command in ("history", "dashboard"):
        from .history.commands import run_command

        return run_command(args, out)
    if args.command in ("merge", "gate"):
        from .comparison.gate_cli import run_command as run_gate_command

        return run_gate_command(args, out)
    if args.command == "schema":
        out.write(f"{Path(__file__).with_name('schema') / 'opperf-1.schema.json'}\n")
        return EXIT_OK
    return _compare(args, out) if args.command == "compare" else _show(args, out)


def _quiet_stdout(out: TextIO) -> None:
    """After a broken pipe on stdout: point its descriptor at the null device, so that the
    interpreter's flush of what is still buffered at exit neither fails nor prints."""
    if out is not sys.stdout:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run a command; returns the exit status (never raises for bad input)."""
    out = out or sys.stdout
    err = err or sys.stderr
    for stream in (out, err):  # an id stdout's encoding cannot hold (LC_ALL=C) prints escaped
        if isinstance(stream, io.TextIOWrapper) and stream.encoding.lower().replace(
                "-", "").replace("_", "") not in ("utf8", "utf8sig"):
            stream.reconfigure(errors="backslashreplace")
    try:
        code = _run(argv, out, err)
        out.flush()  # inside the try: a closed pipe is found here for short outputs
        return code
    except BrokenPipeError:  # the reader went away (| head): end quietly, as git log does
        _quiet_stdout(out)
        return EXIT_OK
    except (_Usage, ResultsError, ThresholdsError, HistoryError, OSError) as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
