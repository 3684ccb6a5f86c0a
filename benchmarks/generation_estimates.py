"""Each process pair's estimate: the median of its pairs or their Hodges-Lehmann estimate (seeded;
no timing).

An e2e visit gives a generation (one process pair) some 9 step pairs. A headline metric is
unchanged once the one-sided ``1 - beta`` t bound of the generations' estimates lies below ``c``,
and a slowdown short of ``c`` is inconclusive once their t interval at the session's level lies
above no change (``pytest_opperf.ab.generations``). Both rest on how much the estimates spread
between generations. This simulates sessions whose generations each add a bias of their own
(normal, ``--bias`` sd) to pairs with noise of ``--noise`` sd (Student t with 4 degrees of freedom
scaled to that sd, or normal with ``--normal``) and prints, for each estimate:

* A/A: the generations an unchanged step needs (10th, 50th and 90th percentile, and the mean),
  stopping at ``--max-generations``;
* a ``--slowdown`` step: how often the t interval of ``--generations`` generations' estimates
  at level ``1 - --alpha`` lies above no change.

    python benchmarks/generation_estimates.py [--sessions 2000] [--noise 0.10] [--bias 0.01]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from pytest_opperf.ab.signedrank import hodges_lehmann
from pytest_opperf.core.stats import median, student_t_quantile

Estimate = Callable[[Sequence[float]], float]


def generation(rng: np.random.Generator, shift: float, args: argparse.Namespace) -> list[float]:
    """One process pair's pairs (log ratios): its bias and its pairs' noise around ``shift``."""
    bias = rng.normal(0.0, args.bias)
    if args.normal:
        noise = rng.normal(0.0, args.noise, args.pairs)
    else:
        noise = rng.standard_t(4, args.pairs) * args.noise / math.sqrt(2.0)  # t(4): variance 2
    return (shift + bias + noise).tolist()


def mean_se(estimates: Sequence[float]) -> tuple[float, float]:
    """The mean of the generations' estimates and its standard error."""
    return statistics.fmean(estimates), statistics.stdev(estimates) / math.sqrt(len(estimates))


def generations_to_unchanged(rng: np.random.Generator, estimate: Estimate,
                             args: argparse.Namespace) -> int:
    """The generations an unchanged step takes until its t bound lies below ``c``."""
    c = -math.log(1 - args.threshold)  # a rate's threshold in x
    estimates: list[float] = []
    for g in range(1, args.max_generations + 1):
        estimates.append(estimate(generation(rng, 0.0, args)))
        if g >= 3:
            mean, se = mean_se(estimates)
            if mean + student_t_quantile(1 - args.beta, g - 1) * se < c:
                return g
    return args.max_generations + 1


def shown(rng: np.random.Generator, estimate: Estimate, args: argparse.Namespace) -> bool:
    """Whether a slowdown's generations' t interval lies above no change."""
    estimates = [estimate(generation(rng, math.log(1 + args.slowdown), args))
                 for _ in range(args.generations)]
    mean, se = mean_se(estimates)
    return mean - student_t_quantile(1 - args.alpha / 2, args.generations - 1) * se > 0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=9, help="step pairs per generation")
    parser.add_argument("--noise", type=float, default=0.10, help="sd of a pair's log ratio")
    parser.add_argument("--normal", action="store_true", help="normal noise, not Student t(4)")
    parser.add_argument("--bias", type=float, default=0.01, help="sd of a process pair's bias")
    parser.add_argument("--threshold", type=float, default=0.05)
    parser.add_argument("--beta", type=float, default=0.01)
    parser.add_argument("--max-generations", type=int, default=16)
    parser.add_argument("--slowdown", type=float, default=0.027)
    parser.add_argument("--generations", type=int, default=17)
    parser.add_argument("--alpha", type=float, default=0.05 / 2 / 6,
                        help="the session's level of a headline metric (default: the e2e "
                             "test's, half of 0.05 over its 6 headline metrics)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"{args.pairs} pairs per generation, noise sd {args.noise:g} "
          f"({'normal' if args.normal else 'Student t(4)'}), bias sd {args.bias:g}; "
          f"{args.sessions} sessions per row")
    for name, estimate in (("median", median), ("Hodges-Lehmann", hodges_lehmann)):
        rng = np.random.default_rng(args.seed)
        needed = np.array([generations_to_unchanged(rng, estimate, args)
                           for _ in range(args.sessions)])
        rng = np.random.default_rng(args.seed)
        power = sum(shown(rng, estimate, args) for _ in range(args.sessions)) / args.sessions
        p10, p50, p90 = np.percentile(needed, [10, 50, 90]).tolist()
        print(f"{name:>15}: A/A unchanged after {p10:g} / {p50:g} / {p90:g} generations "
              f"(10th / 50th / 90th percentile), mean {needed.mean():.2f}; a "
              f"{100 * args.slowdown:g} % slower step shown by {args.generations} generations "
              f"in {100 * power:.1f} %")


if __name__ == "__main__":
    main()
