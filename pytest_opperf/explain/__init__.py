"""Why a metric got slower: per-function work-count diffs, their classes, the differential profile
(pprof and folded stacks) and the changed lines the added work runs through."""
