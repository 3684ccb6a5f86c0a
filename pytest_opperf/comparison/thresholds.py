"""The thresholds file (TOML): every table and key, parsed once.

``[regression]`` (what a stored baseline gates, and the time tolerances when it does), ``[[limit]]``
(absolute limits matched to runs and stats by glob) and ``[compare]`` with its
``[[compare.override]]`` tables (the A/B decision). Each table is named once, in :data:`TABLES`;
each key is declared once, as a field made with :func:`pytest_opperf.comparison.keys.table_key`,
and checked by :mod:`pytest_opperf.comparison.keys`, so that every error is one line naming the
file, the table and the key. docs/reference/thresholds.md documents them
(tests/test_docs_reference.py checks it against :func:`table_keys`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from fnmatch import fnmatchcase
from typing import Any

from ..records.reader import read_text
from .keys import (
    Key,
    ThresholdsError,
    keys,
    parse,
    table_key,
    type_name,
    unknown,
)
from .metrics import MetricKey

__all__ = ["PER_METRIC", "TABLES", "CompareSettings", "Limit", "Override", "Regression",
           "Thresholds", "ThresholdsError", "load_thresholds", "parse_compare", "parse_thresholds",
           "table_keys"]


# --- [compare]: the A/B decision -------------------------------------------------------

@dataclass(frozen=True)
class Override:
    """One ``[[compare.override]]``: values for the runs (and stats) its globs match; None =
    not set. Each value is checked as the ``[compare]`` key of its name."""

    run: str = table_key("*", "glob on run ids")
    stat: str | None = table_key(None, "glob on the stat of call_ms:, step_ms: and count: metrics")
    min_slowdown: float | None = None
    max_python_share_increase: float | None = None
    min_call_ms: float | None = None
    min_step_ms: float | None = None
    min_step_share: float | None = None
    min_pairs: int | None = None

    def matches(self, key: MetricKey) -> bool:
        """Whether this override applies to ``key`` (its run glob, and its stat glob if set)."""
        if not fnmatchcase(key.run, self.run):
            return False
        if self.stat is None:
            return True
        return key.stat is not None and fnmatchcase(key.stat, self.stat)


PER_METRIC: tuple[str, ...] = tuple(f.name for f in fields(Override))[2:]  # what an override sets


@dataclass(frozen=True)
class CompareSettings:
    """The ``[compare]`` table of the thresholds file; the defaults when it is absent."""

    min_slowdown: float = table_key(0.05, "the smallest relative slowdown that counts (times up, "
                                    "examples/sec down)", 0.0, 1.0, hi_open=True)
    max_python_share_increase: float = table_key(
        0.01, "the smallest increase of the steady-state Python share that counts (absolute)",
        0.0, 1.0)
    alpha: float = table_key(0.05, "family-wise error rate, Bonferroni-corrected for the number of "
                             "metrics tested (the e2e runs' headline metrics share half of it)",
                             0.0, 1.0, lo_open=True, hi_open=True)
    beta: float = table_key(0.01, "the chance of calling a metric unchanged when it changed by as "
                            "much as counts: each metric's one-sided bound, not corrected (a pass "
                            "needs every metric unchanged)", 0.0, 0.5, lo_open=True, hi_open=True)
    budget_s: float = table_key(600.0, "wall-time budget of the whole A/B session (s); what is "
                                "undecided when it is spent is reported undecided", 0.0,
                                lo_open=True)
    min_call_ms: float = table_key(0.001, "floor of per-op metrics (call_ms): a call must grow by "
                                   "at least this many ms to count", 0.0)
    min_step_ms: float = table_key(0.05, "floor of e2e stats (step_ms): a stat's per-step total "
                                   "must grow by at least this many ms to count", 0.0)
    min_step_share: float = table_key(
        0.0, "floor of e2e stats (step_ms) relative to the step: a stat's per-step total must "
        "grow by at least this share of the base's median step time to count", 0.0, 1.0)
    min_pairs: int = table_key(10, "below this many pairs a metric is undecided", 2, 1_000_000)
    overrides: tuple[Override, ...] = ()

    def for_metric(self, key: MetricKey) -> CompareSettings:
        """The settings of one metric: each of :data:`PER_METRIC` from the last matching
        override that sets it, else the table's."""
        values = {n: getattr(o, n) for o in self.overrides if o.matches(key) for n in PER_METRIC
                  if getattr(o, n) is not None}
        return replace(self, **values, overrides=()) if values else self


def _parse_override(table: Any, index: int, source: str) -> Override:
    where = f"[[compare.override]] #{index}"
    values = parse(table_keys("compare.override"), table, where, source)
    if not any(k in values for k in PER_METRIC):
        raise ThresholdsError(f"{source}: {where} sets nothing "
                              f"(give one of {', '.join(PER_METRIC)})")
    return Override(**values)


def parse_compare(table: Mapping[str, Any], source: str = "<thresholds>") -> CompareSettings:
    """``[compare]`` from a parsed TOML table (raises :class:`ThresholdsError`)."""
    subtables = [name.split(".", 1)[1] for name in TABLES if name.startswith("compare.")]
    values = parse(table_keys("compare"), table, "[compare]", source, subtables)
    overrides = table.get("override", [])
    if not isinstance(overrides, list):
        raise ThresholdsError(f"{source}: compare.override must be an array of tables "
                              f"([[compare.override]]), got {type_name(overrides)}")
    values["overrides"] = tuple(_parse_override(t, i + 1, source) for i, t in enumerate(overrides))
    return CompareSettings(**values)


# --- [regression] and [[limit]] -----------------------------------------------------


@dataclass(frozen=True)
class Regression:
    """``[regression]``: what a stored baseline gates, and the tolerances of time when it does."""

    time: str = table_key(
        "advisory", "time against a stored baseline (stat times, examples/sec, Python share): "
        "drift, shown but never failing, or a gate (dedicated, quiet hardware only)",
        choices=("advisory", "gate"))
    max_slowdown: float = table_key(0.10, "relative, per stat and for examples/sec", 0.0)
    max_python_share_increase: float = table_key(
        0.02, "the tolerance of the Python share (absolute)", 0.0, 1.0)
    counts: str = table_key("exact", "per-step op counts must not change, or are not compared",
                            choices=("exact", "ignore"))
    max_work_increase: float = table_key(
        0.0, "work counts per step (bytecodes, Python calls, C calls of each stat; deterministic): "
        "the relative increase that fails (0: any increase)", 0.0)
    max_instructions_increase: float = table_key(
        0.001, "CPU instructions per step (--opperf-instructions; the same CPU model only): the "
        "relative increase that fails", 0.0)
    alpha: float = table_key(0.01, "significance level of the one-sided Mann-Whitney U test",
                             0.0, 1.0, lo_open=True)
    min_diff_ms: float = table_key(
        0.05, "floor: a stat's median per-step total must grow by more than this", 0.0)
    op_min_diff_ms: float = table_key(0.001, "the same floor per call, for per-op benchmarks", 0.0)
    min_samples: int = table_key(5, "fewer samples on either side: the conservative rule", 2)
    op_max_slowdown: float | None = table_key(
        None, "the relative tolerance of per-op benchmarks (default: max_slowdown); timed in "
        "isolation, they drift between sessions more than the steps of a run", 0.0)
    min_step_share: float = table_key(
        0.0, "a second e2e floor: a stat must also grow by more than this share of the "
        "baseline's median step time", 0.0, 1.0)
    min_baseline_share: float = table_key(
        0.5, "the share of the session's runs that must have a run of the same id in the "
        "baseline; below it the baseline is the wrong one and the gate fails", 0.0, 1.0)


@dataclass(frozen=True)
class Limit:
    """One ``[[limit]]``: absolute limits for the runs (and stats) its globs match."""

    run: str = table_key("*", "the runs it applies to (a glob on run ids)")
    stat: str | None = table_key(
        None, "the stats max_avg_ms and max_total_ms apply to (a glob; unset: every stat)")
    max_avg_ms: float | None = table_key(None, "upper limit of a stat's average (ms)", 0.0)
    max_total_ms: float | None = table_key(None, "upper limit of a stat's total (ms)", 0.0)
    min_examples_per_sec: float | None = table_key(
        None, "lower limit of a run's examples/sec (of the steps after warm-up, if any)", 0.0)
    max_python_share: float | None = table_key(None, "upper limit of a run's Python share of wall "
                                               "time", 0.0, 1.0, what="a share of wall time")


@dataclass(frozen=True)
class Thresholds:
    regression: Regression = Regression()
    limits: tuple[Limit, ...] = ()
    source: str | None = None
    compare: CompareSettings = CompareSettings()  # [compare]: the A/B decision


# Every table of the file, by its TOML name, with the dataclass that declares its keys: the
# parsers take exactly these tables.
TABLES: dict[str, type] = {"regression": Regression, "limit": Limit, "compare": CompareSettings,
                           "compare.override": Override}


def table_keys(table: str) -> dict[str, Key]:
    """The keys a table of :data:`TABLES` takes, each with its type, default, range and meaning
    (an override's values are checked as the ``[compare]`` keys of their names)."""
    specs = keys(TABLES[table])
    if table == "compare.override":
        specs = {**specs, **{name: keys(CompareSettings)[name] for name in PER_METRIC}}
    return specs


_STAT_LIMITS = ("max_avg_ms", "max_total_ms")
_RUN_LIMITS = ("min_examples_per_sec", "max_python_share")


def _parse_limit(table: Any, index: int, source: str) -> Limit:
    where = f"[[limit]] #{index}"
    values = parse(table_keys("limit"), table, where, source)
    if not any(k in values for k in _STAT_LIMITS + _RUN_LIMITS):
        raise ThresholdsError(f"{source}: {where} sets no limit "
                              f"(give one of {', '.join(_STAT_LIMITS + _RUN_LIMITS)})")
    run_level = [k for k in _RUN_LIMITS if k in values]
    if "stat" in values and run_level:
        raise ThresholdsError(f"{source}: {where} {run_level[0]} limits a run, but the table "
                              f"also names stat = {values['stat']!r}; put it in a [[limit]] "
                              "without stat")
    return Limit(**values)


def parse_thresholds(data: Mapping[str, Any], source: str = "<thresholds>") -> Thresholds:
    """Thresholds from a parsed TOML document (raises :class:`ThresholdsError`)."""
    unknown(data, [name for name in TABLES if "." not in name], "the top level", source)
    regression = parse(table_keys("regression"), data.get("regression", {}), "[regression]",
                       source)
    limits = data.get("limit", [])
    if not isinstance(limits, list):
        raise ThresholdsError(f"{source}: limit must be an array of tables ([[limit]]), "
                              f"got {type_name(limits)}")
    compare = parse_compare(data["compare"], source) if "compare" in data else CompareSettings()
    parsed = tuple(_parse_limit(t, i + 1, source) for i, t in enumerate(limits))
    return Thresholds(Regression(**regression), parsed, source, compare)


def load_thresholds(path: str | os.PathLike[str]) -> Thresholds:
    """Read a thresholds file; any problem is one line naming the file."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
    source = str(path)
    text = read_text(path, ThresholdsError, "a thresholds file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ThresholdsError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ThresholdsError(f"{source}: not a thresholds file: nested too deeply") from None
    return parse_thresholds(data, source)
