"""The torch suite's glue: torch's device (CUDA when usable) and the peer table of the report.

``pytest suites/torch --opperf`` runs on the device torch chooses; with
``pytest suites/ --opperf`` the reference framework's conftest chooses (the
hook is asked once, of the conftest of the directory given). When both
frameworks ran, the report gets a peer table of op times (``suites/torch/peer.py``, added by
``suites/conftest.py``, with Paddle's column when the Paddle suite ran too).
"""

from __future__ import annotations

from pytest_opperf.torch import pytest_opperf_select_device  # noqa: F401  (the device hook)
