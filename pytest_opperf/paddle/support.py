"""The Paddle releases this package supports, and importing paddle quietly (no paddle import here).

``profile()`` reads Paddle's profiler through its private pybind classes
(``paddle.base.core._Profiler``, ``ProfilerOptions``, ``_RecordEvent``) and the names its tracer
gives events (``pd_op.*``, ``StandaloneExecutor::run``, ``Global_*GradNode``): known to hold for
the releases in :data:`PADDLE_SUPPORTED`, which tests/test_paddle_profile.py checks on the installed
one.
Another release gives an :class:`pytest_opperf.hookspec.OpPerfPaddleWarning` and a note in the run.
"""

from __future__ import annotations

import os
import re
import warnings
from importlib import metadata
from typing import Any

__all__ = ["PADDLE_DISTRIBUTION", "INSTALL", "PADDLE_SUPPORTED", "import_paddle", "quiet_glog",
           "supported_range", "version_problem"]

PADDLE_DISTRIBUTION = "paddlepaddle"
PADDLE_SUPPORTED = ((3, 3), (3, 4))  # releases from the first up to, not including, the second
INSTALL = "pip install 'pytest-opperf[paddle]'; the CPU wheel: paddlepaddle==3.3.1"
# glog's INFO and WARNING lines (an executor's "Running with ..." banner, PIR passes) on stderr
GLOG_QUIET = {"GLOG_minloglevel": "2", "GLOG_v": "0"}


def supported_range() -> str:
    """:data:`PADDLE_SUPPORTED` as a requirement: ``>=3.3,<3.4``."""
    (a, b), (c, d) = PADDLE_SUPPORTED
    return f">={a}.{b},<{c}.{d}"


def version_problem(version: str) -> str | None:
    """What is wrong with Paddle ``version`` for ``profile()``; None: supported."""
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if PADDLE_SUPPORTED[0] <= release < PADDLE_SUPPORTED[1]:
        return None
    return (f"paddle {version} is outside the supported range {supported_range()}: profile() "
            "reads Paddle's private profiler classes and event names, which may have changed "
            "(pytest_opperf/paddle/support.py)")


def quiet_glog() -> None:
    """Silence glog below ERROR for a paddle imported after this (settings already made are kept;
    glog reads them once, when paddle's library loads)."""
    for key, value in GLOG_QUIET.items():
        os.environ.setdefault(key, value)


def import_paddle() -> Any:
    """``import paddle``, without the ``UserWarning`` it gives on every import where ccache is not
    installed (so that ``-W error`` runs), and with glog quiet unless set otherwise; a
    ``ModuleNotFoundError`` of one line when paddle is not installed."""
    quiet_glog()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
            import paddle
    except ModuleNotFoundError as exc:
        if exc.name != "paddle":
            raise
        raise ModuleNotFoundError(f"pytest_opperf.paddle: paddle is not installed ({INSTALL})",
                                  name="paddle") from None
    return paddle


def installed_version() -> str | None:
    """The installed paddlepaddle's version, or None (without importing it)."""
    try:
        return metadata.version(PADDLE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
