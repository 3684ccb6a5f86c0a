"""The torch suite's glue: torch's device (CUDA when usable) and the peer table of the report.

``pytest suites/torch --opperf`` runs on the device torch chooses; with
``pytest suites/ --opperf`` the reference framework's conftest chooses (the
hook is asked once, of the conftest of the directory given). When both
frameworks ran, the report gets a peer table of op times (see
``suites/torch/peer.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_opperf.torch import pytest_opperf_select_device  # noqa: F401  (the device hook)
from suites.torch.peer import peer_lines


def pytest_opperf_report_sections(config: pytest.Config,
                                  results: Any) -> list[tuple[str, list[str]]]:
    lines = peer_lines(results.runs)
    return [("peers: reference framework vs torch, per op type at the same shapes",
             lines)] if lines else []
