"""What a measurement is, beyond the hardware: the timing mode and the cache state.

A baseline is only comparable with a run measured the same way: CUDA-event spans and
per-op-synchronised host times are different quantities, and a per-op benchmark with the L2 cache
flushed before each call (cold) measures other work than one with a warm cache.
:func:`baseline_variant` names the baseline file of a measurement (``nvidia-h200-full-sync.json``),
and :func:`mismatch` says why a baseline run must not be compared with a run; :func:`run_id_of`
is the one id of a test's run. No pytest import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..records.atomic import utf8_text

__all__ = ["baseline_variant", "mismatch", "run_id_of", "run_identity"]


def run_id_of(node: Any) -> str:
    """A test's run id, on every path that records one (windows, per-op benchmarks, plain
    benchmarks, A/B sides): its node id with the file part relative to the rootdir.

    pytest names a file outside the rootdir relative to the argument it was
    collected from, so the same test would get another id when pytest is run
    from another directory, and match no baseline run. Under a locale that is not UTF-8
    (``LC_ALL=C``) Python decodes a non-ASCII file name with surrogate escapes: the id is made
    the UTF-8 the name is on disk (:func:`~pytest_opperf.records.atomic.utf8_text`), so that the
    same test has the same id, and the same bytes in every file, in every locale."""
    nodeid = node.nodeid
    path = getattr(node, "path", None)
    if path is None:
        return utf8_text(str(nodeid))
    _, sep, rest = nodeid.partition("::")
    rel = Path(os.path.relpath(path, node.config.rootpath)).as_posix()
    return utf8_text(f"{rel}::{rest}" if sep else rel)


def baseline_variant(timing: str, l2_flush: bool = False) -> str:
    """The suffix of a baseline file for a session's measurement: ``""`` for the
    default (CUDA events, or the host clock off the GPU, warm cache), ``sync``,
    ``cold`` (L2 flushed before each per-op call), ``sync-cold``."""
    parts = ["sync"] if timing == "sync" else []
    if l2_flush:
        parts.append("cold")
    return "-".join(parts)


def run_identity(run: Any) -> dict[str, Any]:
    """How a run was measured: its timing, and for per-op runs whether the L2 was flushed."""
    bench = run.config.get("benchmark") if isinstance(run.config, Mapping) else None
    flushed = bool(bench.get("l2_flush")) if isinstance(bench, Mapping) else False
    return {"timing": run.timing, "l2_flush": flushed}


def mismatch(base: Any, new: Any) -> str | None:
    """``None`` when two runs were measured the same way, else how they differ."""
    a, b = run_identity(base), run_identity(new)
    diffs = []
    if a["timing"] != b["timing"]:
        diffs.append(f"timing {b['timing']} vs baseline {a['timing']}")
    if a["l2_flush"] != b["l2_flush"]:
        diffs.append(f"{'cold' if b['l2_flush'] else 'warm'} cache vs baseline "
                     f"{'cold' if a['l2_flush'] else 'warm'}")
    return "; ".join(diffs) or None
