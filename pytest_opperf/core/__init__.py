"""Core measurement beside the public modules (:mod:`pytest_opperf.timers`,
:mod:`~pytest_opperf.measure`, :mod:`~pytest_opperf.stattree`, :mod:`~pytest_opperf.device`,
:mod:`~pytest_opperf.recorded`): sample statistics, the machine and commit, the timing mode and
cache state, the per-op loop."""
