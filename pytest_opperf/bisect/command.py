"""``python -m pytest_opperf bisect GOOD BAD [options] -- PYTEST_ARGS...``: the command.

Checks every input first (a bad revision, GOOD not an ancestor of BAD, a dirty selection, an
option with no meaning here: exit 4), then runs :func:`pytest_opperf.bisect.core.bisect` with the
A/B oracle of :mod:`.runner` over the first-parent history, printing a line as each step starts and
ends, and the report (:mod:`.report`) at the end. Exit status: 0 a culprit verified; 1 not
reproduced, or no single culprit verified (the report says which); 2 interrupted; 4 usage. Ctrl-C,
SIGTERM and SIGHUP end the side processes and remove every worktree before it exits.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from ..ab.reclaim import reclaim
from ..ab.tests_from import Staged, TestsFromError, resolve_source, stage
from ..comparison.thresholds import Thresholds, ThresholdsError, load_thresholds
from ..glue import child
from ..glue.options import (
    CHILD_DEFAULTS,
    CHILD_POLICIES,
    FLAGS,
    OPTIONS,
    VALUED_OPTIONS,
)
from . import core, report, runner
from .repo import (
    BisectUsage,
    Worktrees,
    dirty,
    history,
    selected_paths,
    toplevel,
)

__all__ = ["EXIT_CULPRIT", "EXIT_INTERRUPTED", "EXIT_NONE", "EXIT_USAGE", "add_command",
           "run_command"]

EXIT_CULPRIT, EXIT_NONE, EXIT_INTERRUPTED, EXIT_USAGE = 0, 1, 2, 4
DEFAULT_BUDGET_S = 1800.0
# opperf options of PYTEST_ARGS that mean nothing in a bisection, and what replaces them: these,
# and every option a child pytest does not get (pytest_opperf.glue.options), but the thresholds
_REFUSED = {"json": "--json", "markdown": "--markdown", "compare": "the bisection's own A/B",
            "compare-python": "--python", "compare-timeout": "--timeout", "trace": None,
            "tests-from": "--tests-from"}


def add_command(commands: argparse._SubParsersAction) -> None:
    """The ``bisect`` subcommand's arguments (PYTEST_ARGS follow ``--``, or ``--selection``)."""
    p = commands.add_parser(
        "bisect", help="find the commit that made a selection slower (paired A/B per step)",
        usage="%(prog)s GOOD BAD [options] -- PYTEST_ARGS...")
    p.add_argument("good", metavar="GOOD", help="a revision without the regression")
    p.add_argument("bad", metavar="BAD", help="a later revision with it (GOOD its ancestor)")
    p.add_argument("--selection", metavar="ARGS",
                   help="PYTEST_ARGS as one string (split as a shell would), for CI inputs")
    p.add_argument("--budget", metavar="SECONDS", type=_seconds, default=DEFAULT_BUDGET_S,
                   help=f"wall-time budget of the whole bisection (default {DEFAULT_BUDGET_S:g})")
    p.add_argument("--max-attempts", metavar="N", type=_attempts, default=4,
                   help="A/B sessions a step may pool while its verdict is open (default 4)")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON (opperf-bisect/1)")
    p.add_argument("--markdown", metavar="PATH",
                   help="write the markdown report (also appended to $GITHUB_STEP_SUMMARY)")
    p.add_argument("--python", metavar="PATH", default=sys.executable,
                   help="the sides' interpreter (default: this one)")
    p.add_argument("--timeout", metavar="SECONDS", type=_seconds, default=600.0,
                   help="the longest a side may take to answer (default 600)")
    p.add_argument("--tests-from", metavar="SOURCE", dest="tests_from",
                   help="run the selection's test files (and their conftest.py) from worktree "
                        "(the working tree, committed or not; files outside the repository too), "
                        "head (the HEAD commit) or a revision, against each commit's own code "
                        "(default: each commit's own tests)")


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"expected seconds in (0, 604800], got {value!r}")
    return seconds


def _attempts(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 10:
        raise argparse.ArgumentTypeError(f"expected a whole number in [1, 10], got {value!r}")
    return int(value)


def _opperf_options(args: Sequence[str]) -> dict[str, str]:
    """The ``--opperf-*`` options of PYTEST_ARGS (their values as on a command line)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--opperf", action="store_true")
    for name, _, _, kind, _, _ in OPTIONS:
        parser.add_argument(f"--opperf-{name}", dest=name, type=kind or str)
    for name, _, _ in FLAGS:
        parser.add_argument(f"--opperf-{name.replace('_', '-')}", dest=name.replace("_", "-"),
                            action="store_const", const="true")

    def refuse(message: str) -> Any:
        raise BisectUsage(f"PYTEST_ARGS: {message}")

    parser.error = refuse  # type: ignore[method-assign]
    known, _ = parser.parse_known_args(list(args))
    return {k: v for k, v in vars(known).items() if k != "opperf" and v is not None}


def _inputs(args: argparse.Namespace) -> tuple[list[str], dict[str, str], Thresholds]:
    """The selection without opperf options, the children's fixed options, the thresholds."""
    given = list(args.pytest_args)
    if args.selection is not None:
        if given:
            raise BisectUsage("give the selection after -- or as --selection, not both")
        try:
            given = shlex.split(args.selection)
        except ValueError as exc:
            raise BisectUsage(f"--selection: {exc}") from None
    if not given:
        raise BisectUsage("no selection: give the tests after --, e.g. -- suites/test_ops.py "
                          "-k conv2d --opperf-workload=small")
    options = _opperf_options(given)
    for name in options:
        if name != "thresholds" and (name in _REFUSED or CHILD_POLICIES.get(name) != "fixed"):
            instead = _REFUSED.get(name)
            raise BisectUsage(f"PYTEST_ARGS: --opperf-{name} has no meaning in a bisection"
                              + (f" (use {instead})" if instead else ""))
    thresholds = Thresholds()
    if "thresholds" in options:
        try:
            thresholds = load_thresholds(options.pop("thresholds"))
        except ThresholdsError as exc:
            raise BisectUsage(str(exc)) from None
    values: dict[str, str | None] = {n: CHILD_DEFAULTS.get(n) for n, policy in
                                     CHILD_POLICIES.items() if policy == "fixed"}
    values.update(options)
    fixed = child.fixed_values(CHILD_POLICIES, values)
    return child.strip_opperf_args(given, VALUED_OPTIONS), fixed, thresholds


@contextmanager
def _trapped() -> Iterator[None]:
    """SIGTERM and SIGHUP end the bisection as Ctrl-C does (the first only; a second one waits
    for the cleanup); restored after."""
    interrupted = False

    def interrupt(signum: int, frame: Any) -> None:
        nonlocal interrupted
        if not interrupted:
            interrupted = True
            raise KeyboardInterrupt(f"signal {signum}")

    old: dict[int, Any] = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None or signal.getsignal(sig) is signal.SIG_IGN:
            continue
        try:
            old[sig] = signal.signal(sig, interrupt)
        except ValueError:  # not the main thread
            break
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _staged(given: str | None, selection: list[str], invocation: Path,
            top: Path) -> Staged | None:
    """``--tests-from``: the selection's files as the source has them (None: each commit's own)."""
    if given is None:
        return None
    try:
        return stage(selection, invocation, top, resolve_source(given, top))
    except TestsFromError as exc:
        raise BisectUsage(f"--tests-from={given}: {exc}") from None


def _tests_from(staged: Staged | None, oracle: runner.ABOracle) -> dict[str, Any]:
    """Where the tests came from, for the report (and which path each side imported the code
    under test from, as the first step that measured found it)."""
    if staged is None:
        return {"source": "commit", "label": "each commit's own", "files": [], "imports": []}
    found = oracle.imports
    return {**staged.to_dict(), "summary": staged.describe(),
            "imports": list(found.imports) if found is not None else [],
            "import_lines": list(found.lines) if found is not None else []}


def _write(path: str, text: str) -> None:
    from ..records.atomic import write_text_atomic

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def run_command(args: argparse.Namespace, out: TextIO, err: TextIO,
                clock: Callable[[], float] = time.monotonic) -> int:
    """Run the bisection the arguments ask for; returns the exit status."""
    started = clock()
    invocation = Path.cwd()
    try:
        selection, fixed, thresholds = _inputs(args)
        top = toplevel(invocation)
        reclaimed = reclaim(top)  # what killed runs of this repository left
        for line in filter(None, [reclaimed.line(), *reclaimed.problems]):
            err.write(f"bisect: {line}\n")
        commits = history(top, args.good, args.bad)
        staged = _staged(args.tests_from, selection, invocation, top)
        changed = [] if staged else dirty(top, selected_paths(selection, invocation), invocation)
        if changed:
            raise BisectUsage(f"the selection has changes not committed ({', '.join(changed[:3])}"
                              f"{' ...' if len(changed) > 3 else ''}): each commit's own are "
                              "measured; commit or stash them, or run them from the working "
                              "tree on every commit: --tests-from=worktree")
        from ..ab.checkout import CompareError, check_python

        try:
            info = check_python(args.python, invocation)
        except CompareError as exc:
            raise BisectUsage(f"--python: {exc}") from None
    except BisectUsage as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    subdir = invocation.resolve().relative_to(top).as_posix()
    budget_end = started + args.budget

    def time_left() -> float:
        return budget_end - clock()

    with _trapped(), Worktrees(top) as trees:
        shim = trees.path / "shim"
        shim.mkdir()
        (shim / "pytest_opperf").symlink_to(Path(__file__).resolve().parent.parent,
                                            target_is_directory=True)
        oracle = runner.ABOracle(commits, trees, "" if subdir == "." else subdir, selection,
                                 fixed, thresholds.compare, shim, trees.path / "logs",
                                 python=args.python, with_plugin=not info.has_plugin_entry_point,
                                 timeout_s=args.timeout, time_left=time_left, clock=clock,
                                 tests=staged)
        run = report.BisectRun(commits, selection, args.budget, 0.0, EXIT_NONE)
        outcome = core.Outcome("undecided", "")

        def on_step(event: str, kind: Any, a: int, b: int, result: core.StepComparison | None
                    ) -> None:
            out.write(report.progress(run, outcome, event, kind, a, b, result, time_left())
                      + "\n")
            out.flush()

        out.write(f"bisect: {commits[0].short}..{commits[-1].short}: {len(commits) - 1} "
                  f"commit(s) after GOOD on the first-parent line; budget {args.budget:.0f} s; "
                  f"{runner.plugin_note(staged is not None)}\n")
        if staged is not None:
            out.write(f"bisect: {staged.describe()}\n")
        try:
            core.bisect(len(commits), oracle, args.max_attempts, time_left, on_step=on_step,
                        into=outcome)
            explained, explain_notes = runner.explain_culprits(oracle, outcome)
        except KeyboardInterrupt:
            err.write("bisect: interrupted: the side processes ended, the worktrees go now\n")
            return EXIT_INTERRUPTED
        except TestsFromError as exc:
            err.write(f"error: --tests-from={args.tests_from}: {exc}\n")
            return EXIT_USAGE
        finally:
            problems = trees.close()
            for problem in problems:
                err.write(f"bisect: {problem}\n")
    code = EXIT_CULPRIT if outcome.status == "culprit" else EXIT_NONE
    run = report.BisectRun(commits, selection, args.budget, clock() - started, code,
                           [runner.plugin_note(staged is not None), *oracle.warnings,
                            *explain_notes], explained, tests_from=_tests_from(staged, oracle))
    width = shutil.get_terminal_size().columns
    for line in report.terminal(run, outcome, width):
        out.write(line + "\n")
    if args.json:
        _write(args.json, json.dumps(report.as_json(run, outcome), indent=1) + "\n")
    if args.markdown:
        text = report.markdown(run, outcome)
        _write(args.markdown, text)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and Path(summary).resolve() != Path(args.markdown).resolve():
            with open(summary, "a", encoding="utf-8") as f:
                f.write(text)
    return code
