"""A/B in one job: the base revision and the working tree measured interleaved, decided on pairs.

``paired`` holds the statistics (pure, no pytest; ``[compare]`` is parsed by
:mod:`pytest_opperf.thresholds` and the decisions become violations in
:mod:`pytest_opperf.gate`), ``render`` the A/B report section. This package
imports nothing at load time, and ``paired`` imports numpy only when it
decides, so the gate loads without numpy.
"""
