"""Comparison: the thresholds file, the metrics view, the regression rule, the baseline checks, the
verdict and the gate; shards and their merge."""
