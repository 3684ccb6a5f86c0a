"""The benchmark suites users run: ``pytest suites/ --opperf`` (see suites/conftest.py)."""
