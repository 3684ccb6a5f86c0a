"""The tuning constants of an A/B session, in one place, each with what it does and why its value.

Read by the scheduling (:mod:`.controller`: visits, passes, the budget), the decisions
(:mod:`.decide`: the start-order rule) and the process management (:mod:`.processes`: the log
tail of a failed side). The figures were measured here (docs/ab-statistics.md, "Measured").
Modules read them as ``tuning.NAME`` at the time of use, so a test that sets one here sets it for
all.
"""

from __future__ import annotations

# --- a visit of a per-op benchmark ------------------------------------------------------------

MIN_PAIRS = 12  # a visit's first look at its pairs; paired.decide's own minimum applies on top
VISIT_MARGIN_PAIRS = 2  # a visit's pairs past the fewest with a bounded interval
CHECK_EVERY = 4  # after MIN_PAIRS, the visit looks at its pairs every this many pairs
# A visit's pairs, at most. What a visit of 48 pairs leaves undecided is mostly a metric whose
# process pairs differ (design effects 2-7 in the main job's A/A runs): a visit in the other
# start order, a new process pair, tells more than more pairs of this one. With 80, such visits
# took 2 s, and the fill of a generation (cost.fill) skipped them as the costliest.
# Visits of 20 pairs (a new process pair sooner) were tried, without a measured gain
# (docs/ab-statistics.md, "Shorter visits, tried").
MAX_VISIT_PAIRS = 48
MIN_ROUND_S = 0.0005  # timer resolution is far finer; rounds this long keep call overhead small
BLOCK_S = 0.008  # timed work per block: short, so base and head blocks lie close in time
MAX_ROUNDS = 50  # rounds per block, at most
MIN_VISIT_S = 0.5  # a benchmark's share of the budget is never below this
# Warm-up pairs, discarded, for at least this long per visit (one pair at least). It was 0.3 s
# when a test's set-up left transients (BLAS threads busy-waiting after a call) that favoured the
# side that ran last. Now, with BLAS held to one thread and the arrays in shared memory, the
# pairs of a visit's first 0.2 s are noisier but not biased (A/A, shard 3/3: 22 % past 3 MADs in
# the first 0.05 s, 13 % after 0.3 s), and 0.3 s was a third of a visit's time
# (docs/ab-statistics.md, "The warm-up of a visit").
WARMUP_S = 0.05
# The share of the budget left (over the tests left) a first visit of a benchmark may take; the
# rest stays for running tests again. With 0.5 the main job's first pass took 1.7 times a
# single-side run; visits that have the pairs for a bounded interval gain little from more.
FIRST_VISIT_SHARE = 0.25

# --- the passes after the first ---------------------------------------------------------------

# Passes after the first (each in fresh processes), at most. An e2e test gives each of its metrics
# one pair a step, about 9 a visit with the small workload; the e2e job's examples/sec stayed
# undecided after 9 generations (81 pairs) in 2 of 3 A/A sessions here, with budget_s not spent:
# the budget, not this count, should end a session whose headline metric is still open.
MAX_RERUNS = 16
# The passes after the first may take this share of the first pass's wall time (spawn and
# collection included), but at least RERUN_MIN_S, and never more than [compare] budget_s allows.
# With a warm-up of 0.3 s the main job's first pass cost about 1.45 times a single-side run, and
# 0.3 brought its whole A/B to 1.77 times. With 0.05 s the shards' first passes take 25-31 s,
# 0.3 of that left room for one generation after it, and the metrics whose two process pairs
# disagreed stayed undecided; 0.8 gives them 3-5 (docs/ab-statistics.md, "The budget and the
# early stop"). With "unchanged" on each metric's own bound (beta), 0.8 left 14 of the main
# job's 532 metrics undecided in an A/A run, most of them ops whose two or three process pairs
# disagreed, and the main job at 1.5 times the push; 1.2 left 0-3 in twelve runs, the main job
# at 1.17-1.82 times the push, 1.31 at the median (docs/ab-statistics.md, "Unchanged on its own
# bound").
RERUN_SHARE = 1.2
RERUN_MIN_S = 10.0
# When the reruns' budget has no room for every undecided test, the changes seen in one start
# order and the leaning metrics go on until the session has run this long at least (still
# within [compare] budget_s): an e2e stat gets 3 pairs a run and needs about 14 in each start
# order, which a small selection's generations give in a few seconds each, and a per-op slowdown
# at the threshold needs some 100-200 pairs. Counted from the session's start, so a small
# selection's A/B costs at most this much more than its single side (counted from the first
# pass's end, suites/test_resnet50.py took 4x, +73 s). Once each start order's pairs had an
# interval of their own, leaning metrics stopped: a 3 % conv2d at a 3 % threshold ended
# undecided after 16 s in 2 of 7 sessions.
LEANING_MIN_S = 60.0

# A generation that runs only a tier's tests (past the reruns' budget, or the last) takes along
# other undecided tests that fit in this share of its visits' seconds (cost.take_along): the
# sides start anyway. Without it, the e2e job's executor benchmarks (0.3-0.9 s a visit) ended
# undecided after two visits while generations ran its e2e runs (11 s a visit) for their
# examples/sec, in two A/A runs of ci.yml's pull request (docs/ab-statistics.md, "Taken along").
TAKE_ALONG_SHARE = 0.25

# --- the decisions ----------------------------------------------------------------------------

MIN_ORDER_PAIRS = 4  # pairs of each start order a regressed or improved metric needs
# Generations (process pairs) a change in time needs, the t interval of their estimates (at the
# session's corrected level) on the change's side of no change (decide._across_generations).
# With two, 2 of 7 A/A pull-request runs failed here (one busy loop beside it): small
# memory-bound calls (relu_grad of 0.03-0.06 ms) at 1.08-1.14 head/base in both process pairs,
# whose agreement the design effect reads as no spread between them. An e2e run's headline
# metric (examples/sec, the Python share, the step) is unchanged on as many, the one-sided t
# bound of their estimates below the threshold (generations.generations_bound): a step 4 % slower
# was called unchanged on two process pairs at 0.994 examples/sec, its threshold 3 %.
MIN_CHANGE_GENERATIONS = 3
# The design effect assumed for the pairs of one start order alone (one process pair, or
# process pairs started in one order) before "unchanged" counts on them (decide._one_sided):
# they cannot show the spread between process pairs. Where several showed it, it was 1.15-3.9
# for a conv2d of 1.8 ms (one busy loop beside it; 10.9 once); without it, a conv2d 3 % slower
# was called unchanged on one process pair at 1.001-1.013 in 3 of 10 sessions.
ONE_PAIR_DESIGN_EFFECT = 2.0

# --- the side processes -----------------------------------------------------------------------

LOG_TAIL_LINES = 15  # the lines of a failed side's log its error shows
