"""What an xdist worker's session hands back to the controller: one JSON envelope.

The worker collects; the controller merges every worker's envelope into one set of runs, one
report and one gate. The envelope carries the runs (traces included), the counts the report
states (untimed and plain benchmarks, deselected tests) and, on a GPU, the worker's device for
the controller's same-model check."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pytest_opperf.results import ResultsError, ResultSet, RunResult
from pytest_opperf.results_checks import results_from_dict

__all__ = ["HandBack", "HandBackError"]


class HandBackError(Exception):
    """An envelope that cannot be read; the message says why."""


@dataclass
class HandBack:
    runs: list[RunResult]
    untimed: int = 0  # per-op benchmarks that ran untimed
    plain: int = 0  # tests with pytest-benchmark's plain fixture
    deselected: int = 0
    device: dict[str, Any] | None = None  # a GPU worker's device and NVML snapshots

    def dumps(self) -> str:
        payload: dict[str, Any] = {
            "results": ResultSet(runs=self.runs).to_dict(with_trace=True),
            "untimed": self.untimed, "deselected": self.deselected, "plain": self.plain}
        if self.device is not None:
            payload["device"] = self.device
        return json.dumps(payload)

    @classmethod
    def loads(cls, data: str, source: str) -> HandBack:
        try:
            payload = json.loads(data)
            runs = results_from_dict(payload["results"], source=source).runs
            device = payload.get("device")
            return cls(runs, int(payload.get("untimed", 0)), int(payload.get("plain", 0)),
                       int(payload.get("deselected", 0)),
                       device if isinstance(device, dict) else None)
        except (ValueError, KeyError, TypeError, ResultsError) as exc:
            raise HandBackError(str(exc)) from None
