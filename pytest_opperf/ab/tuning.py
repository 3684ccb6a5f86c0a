"""The tuning constants of an A/B session, in one place, each with what it does and why its value.

Read by the scheduling (:mod:`.controller`: visits, passes, the budget) and the decisions
(:mod:`.decide`: the rules that confirm a change). The figures were measured here; the
sections named are those of ``benchmarks/notes/ab-method-experiments.md`` and
``benchmarks/notes/ab-sessions.md``.
Modules read them as ``tuning.NAME`` at the time of use, so a test that sets one here sets it for
all.
"""

from __future__ import annotations

# --- a visit of a per-op benchmark ------------------------------------------------------------

# A visit first looks at its pairs once they can bound an interval at the session's level (and
# number min_pairs), and then every this many pairs.
CHECK_EVERY = 4
# A visit's pairs, at most. What a visit of 48 pairs leaves undecided is mostly a metric whose
# process pairs differ (design effects 2-7 in the main job's A/A runs): a visit in the other
# start order, a new process pair, tells more than more pairs of this one. With 80, such visits
# took 2 s, and the choice of a generation's tests (cost.choose) skipped them as the costliest.
# Visits of 20 pairs (a new process pair sooner) were tried, without a measured gain
# (notes, "Shorter visits, tried").
MAX_VISIT_PAIRS = 48
MIN_ROUND_S = 0.0005  # timer resolution is far finer; rounds this long keep call overhead small
BLOCK_S = 0.008  # timed work per block: short, so base and head blocks lie close in time
MAX_ROUNDS = 50  # rounds per block, at most
# Warm-up pairs, discarded, for at least this long per visit (one pair at least). It was 0.3 s
# when a test's set-up left transients (BLAS threads busy-waiting after a call) that favoured the
# side that ran last. Now, with BLAS held to one thread and the arrays in shared memory, the
# pairs of a visit's first 0.2 s are noisier but not biased (A/A, shard 3/3: 22 % past 3 MADs in
# the first 0.05 s, 13 % after 0.3 s), and 0.3 s was a third of a visit's time
# (notes, "The warm-up of a visit").
WARMUP_S = 0.05
# The share of the time left to its generation's deadline (over the tests left) a visit of a
# benchmark may take once it has the pairs for a bounded interval; in the first pass the rest
# stays for running tests again. With 0.5 the main job's first pass took 1.7 times a
# single-side run; visits that have the pairs for a bounded interval gain little from more.
FIRST_VISIT_SHARE = 0.25
# A visit's share is never below this. Without it, the later generations of the main job's shards
# gave each visit the fewest pairs that bound an interval (its share of the budget left over some
# 80 tests: 0.1 s), and an A/A pull request ended with 9 of its 532 metrics undecided, its shards
# at 58-68 s; with it, 2 and 31-62 s.
MIN_VISIT_S = 0.5

# --- the passes after the first ---------------------------------------------------------------

# Passes after the first (each in fresh processes), at most: a cap, as the budget ends sessions.
# An e2e test gives each of its metrics one pair a step, about 9 a visit with the small workload;
# the e2e job's examples/sec stayed undecided after 9 generations (81 pairs) in 2 of 3 A/A
# sessions here, with budget_s not spent.
MAX_RERUNS = 16
# The reruns' budget, for the metrics the gate does not wait for: this share of the first pass's
# wall time (spawn and collection included), and up to SMALL_SESSION_S from the session's start at
# least, never past [compare] budget_s. With 0.3 the shards' metrics whose two process pairs
# disagreed stayed undecided; with 0.8, 14 of the main job's 532 metrics in an A/A run; 1.2 left
# 0-3 in twelve runs, the main job at 1.17-1.82 times the push, 1.31 at the median
# (notes, "The budget and the early stop").
RERUN_SHARE = 1.2
# A small selection's undecided metrics may run again until the session has run this long: a
# per-op slowdown at the threshold needs some 100-200 pairs, an e2e stat some 14 in each start
# order. A 3 % conv2d at a 3 % threshold ended undecided after 16 s in 2 of 7 sessions; counted
# from the first pass's end instead, suites/test_resnet50.py took 4 times its single side.
SMALL_SESSION_S = 60.0

# --- the decisions ----------------------------------------------------------------------------

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
