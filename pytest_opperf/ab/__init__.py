"""A/B in one job: the base revision and the working tree measured interleaved, decided on pairs.

``paired`` holds the statistics and the ``[compare]`` thresholds (pure, no
pytest), ``render`` the A/B report section. This package imports nothing at
load time, so the gate can read ``[compare]`` without numpy.
"""
