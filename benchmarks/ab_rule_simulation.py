"""The A/B decision rule on simulated sequential sessions (seeded; no timing).

Prints, for true slowdowns of 0, 3, 5 and 10 % with 2 % and 5 % noise per
pair, how often a metric ends regressed (or unchanged), and after how many
pairs, under the rule of ``pytest_opperf.ab.paired`` ("lo > c/2") and under the
simpler "lo > 0", each with "unchanged" ruled on the one-sided ``1 - beta``
bound, not corrected: the table in docs/ab-statistics.md.

    python benchmarks/ab_rule_simulation.py [--sessions 400] [--metrics 150] [--beta 0.01]
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np

from pytest_opperf.ab.paired import rule
from pytest_opperf.ab.signedrank import walsh_intervals


def lo_above_zero(low: float, high: float, c: float, bound: float) -> str:
    """The rule first considered: significant, and the interval reaches what counts."""
    if low > 0 and high >= c:
        return "regressed"
    if high < 0 and low <= -c:
        return "improved"
    return "unchanged" if bound < c else "undecided"


def session(x: np.ndarray, a: float, beta: float, c: float, decide, start: int,
            block: int) -> tuple[str, int]:
    n = start
    while n <= len(x):
        _, [(low, high), (_, bound)] = walsh_intervals(x[None, :n], [a, 2 * beta])[0]
        verdict = decide(low, high, c, bound)
        if verdict != "undecided":
            return verdict, n
        n += block
    return "undecided", len(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--metrics", type=int, default=150, help="K of the Bonferroni correction")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--beta", type=float, default=0.01, help="unchanged's one-sided level")
    parser.add_argument("--min-slowdown", type=float, default=0.05)
    parser.add_argument("--max-pairs", type=int, default=400)
    args = parser.parse_args()
    a, c = args.alpha / args.metrics, math.log1p(args.min_slowdown)
    print(f"K={args.metrics} alpha={args.alpha} beta={args.beta} "
          f"min_slowdown={args.min_slowdown}: decisions after "
          "10, 15, ... "
          f"pairs (at most {args.max_pairs}), the first verdict kept, {args.sessions} sessions")
    print(f"{'true':>6} {'noise':>6}  {'rule':<10} {'regressed':>9} {'unchanged':>9} "
          f"{'undecided':>9} {'improved':>8} {'median pairs':>12}")
    for true in (0.0, 0.03, 0.05, 0.10):
        for sigma in (0.02, 0.05):
            for name, decide in (("lo > 0", lo_above_zero), ("lo > c/2", rule)):
                outcomes: dict[str, int] = {}
                pairs = []
                for seed in range(args.sessions):
                    x = np.random.default_rng(seed).normal(math.log1p(true), sigma, args.max_pairs)
                    verdict, n = session(x, a, args.beta, c, decide, 10, 5)
                    outcomes[verdict] = outcomes.get(verdict, 0) + 1
                    pairs.append(n)
                share = {v: f"{outcomes.get(v, 0) / args.sessions:.2%}" for v in
                         ("regressed", "unchanged", "undecided", "improved")}
                print(f"{true:>6.0%} {sigma:>6.0%}  {name:<10} {share['regressed']:>9} "
                      f"{share['unchanged']:>9} {share['undecided']:>9} {share['improved']:>8} "
                      f"{statistics.median(pairs):>12g}")


if __name__ == "__main__":
    main()
