"""The results file's records read and written: the schema's checks, the strict reader, atomic
files, read-only shared containers, what ``--opperf-save`` keeps (the records themselves:
:mod:`pytest_opperf.results`)."""
