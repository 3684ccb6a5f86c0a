"""A/B in one job: the base revision and the working tree measured interleaved, decided on pairs.

The modules, from the pytest glue down: ``session`` (the main process's glue: the base, the two
sides, the controller), ``checkout`` (a base revision as a temporary worktree), ``controller``
(the schedule: visits, passes, the budget), ``processes`` (the side processes: start, restart,
stop), ``protocol`` (the messages on their sockets), ``side`` (the plugin inside a side
process), ``pairs`` (an e2e run's paired samples), ``paired`` (the statistics, pure, no pytest;
``[compare]`` is parsed by :mod:`pytest_opperf.comparison.thresholds` and the decisions become
violations in :mod:`pytest_opperf.comparison.gate`), ``decide`` (the final decisions: the
start-order rule), ``tuning`` (the constants), ``cost`` (each test's pairs and seconds),
``extensions`` (the check that both sides load the same compiled extensions), ``extras`` (the
compare object's later fields, read back) and ``render`` (the A/B report section). This package
imports nothing at load time, and ``paired`` imports numpy only when it decides, so the gate loads
without numpy.
"""
