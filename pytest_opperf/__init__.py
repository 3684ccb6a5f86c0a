"""pytest-opperf: operator-level performance measurement and a CI gate for pytest.

``pytest_opperf.timers`` is the instrumentation API frameworks call; the pytest
plugin (``pytest --opperf``) collects, reports and gates what it records.
"""

__version__ = "0.1.0"
