"""pytest glue of ``--opperf-shard=K/N`` (the partition itself:
:mod:`pytest_opperf.comparison.shard`).

:func:`register` adds a :class:`ShardPlugin` to a session that has the option. It keeps the
shard's tests at the end of collection (the others are deselected, as ``-k`` does), in every
process that collects (pytest-xdist workers compute the same part and tell the controller), and
records the shard in the results (``session.shard``). In A/B (``--opperf-compare``) the main
process does not collect: the two sides collect every test, and :func:`ab_selection` gives the
controller the shard of their tests (the head's and those on the base only), so both sides run
the same part. The durations that balance the parts are those of the session's baseline
(``--opperf-baseline``), read here the way the session reads it, so that every runner of a
matrix computes the same parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ..comparison import shard
from ..core.identity import baseline_variant, run_id_of
from ..results import ResultSet
from .inputs import read_baseline
from .settings import (
    Settings,
    resolved_workload,
    select_device,
    usage_errors,
)

__all__ = ["SHARD_PLUGIN_NAME", "ShardPlugin", "ab_selection", "register"]

SHARD_PLUGIN_NAME = "opperf-shard"
SHARD = pytest.StashKey["ShardPlugin"]()  # the session's shard plugin, when it has a shard


def register(config: pytest.Config, settings: Settings) -> None:
    """With ``--opperf-shard``: check it and register the plugin (a usage error otherwise)."""
    if settings.shard is None:
        return
    label = settings.label("shard")
    with usage_errors(label, shard.ShardError):
        part = shard.parse(settings.shard)
    if not settings.enabled:
        raise pytest.UsageError(f"opperf: {label}: needs --opperf (or ini opperf_enabled)")
    for name, given in (("save", "save" in settings.paths), ("history", settings.history)):
        if given:
            raise pytest.UsageError(
                f"opperf: {label}: does not combine with {settings.label(name)}: a shard is a "
                "part of a session; merge the shards' results (python -m pytest_opperf merge) and "
                "save or import the merged file")
    plugin = config.stash[SHARD] = ShardPlugin(config, settings, part)
    config.pluginmanager.register(plugin, SHARD_PLUGIN_NAME)


class ShardPlugin:
    """Keeps the tests of one shard; records which in the results."""

    def __init__(self, config: pytest.Config, settings: Settings, part: shard.Shard) -> None:
        self.config = config
        self.settings = settings
        self.shard = part
        self.record: dict[str, Any] | None = None

    def expected(self, ids: Sequence[str]) -> tuple[dict[str, float] | None, str]:
        """Each test's expected seconds from the baseline, and what balanced the parts."""
        if "baseline" not in self.settings.paths:
            return None, "count"
        device = select_device(self.config)
        workload = resolved_workload(self.settings, device)
        variant = baseline_variant(device.timing_label(self.settings.timing),
                                   self.settings.l2_flush)
        baseline, name = read_baseline(self.settings, device.device_class, workload, variant,
                                       lambda message: None)  # the session warns itself
        if baseline is None:
            return None, "count"
        found = shard.durations(baseline.runs, ids)
        if not found:
            return None, "count"
        return found, f"durations in {name}"

    def take(self, ids: Sequence[str]) -> set[str]:
        """The ids of this shard among ``ids``; records the shard for the results."""
        expected, balanced_by = self.expected(ids)
        with usage_errors(self.settings.label("shard"), shard.ShardError):
            keep = shard.select(ids, self.shard, expected)
        self.record = shard.record(self.shard, len(keep), len(set(ids)),
                                   shard.selection_id(ids), balanced_by)
        return set(keep)

    @pytest.hookimpl(trylast=True)  # after -k, -m and other deselection: a part of what is left
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[Any]) -> None:
        if not items:
            return  # nothing selected: pytest's own exit status (5) says so
        ids = [run_id_of(item) for item in items]
        keep = self.take(ids)
        kept = [item for item, test in zip(items, ids, strict=True) if test in keep]
        dropped = [item for item, test in zip(items, ids, strict=True) if test not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept

    def pytest_opperf_modify_results(self, config: pytest.Config, results: ResultSet) -> None:
        if self.record is not None:
            results.session["shard"] = dict(self.record)


def ab_selection(config: pytest.Config, ids: Sequence[str]) -> set[str] | None:
    """In A/B: the shard of ``ids`` (what the two sides collected), or None without a shard."""
    plugin = config.stash.get(SHARD, None)
    return None if plugin is None else plugin.take(ids)


def taken(config: pytest.Config) -> dict[str, Any] | None:
    """The record of the shard this process took (an xdist worker hands it back), or None."""
    plugin = config.stash.get(SHARD, None)
    return None if plugin is None or plugin.record is None else dict(plugin.record)


def took(config: pytest.Config, record: dict[str, Any]) -> None:
    """On the xdist controller, which collects nothing: the shard a worker took."""
    plugin = config.stash.get(SHARD, None)
    if plugin is not None and plugin.record is None:
        plugin.record = dict(record)
