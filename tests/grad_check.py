"""Finite-difference checks of whole programs: perturb one array element in place, rerun."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def numeric_grad(loss: Callable[[], float], array: np.ndarray, flat_indices: Sequence[int],
                 eps: float = 1e-6) -> np.ndarray:
    """Central differences of ``loss()`` with respect to ``array``'s elements at
    ``flat_indices``; ``array`` (contiguous, float64) is what the program reads
    - a parameter's scope value or a fed array - perturbed in place and restored."""
    assert array.dtype == np.float64 and array.flags.c_contiguous
    flat = array.reshape(-1)
    grads = np.empty(len(flat_indices))
    for j, i in enumerate(flat_indices):
        orig = flat[i]
        flat[i] = orig + eps
        plus = loss()
        flat[i] = orig - eps
        minus = loss()
        flat[i] = orig
        grads[j] = (plus - minus) / (2 * eps)
    return grads


def sample_indices(size: int, n: int, seed: int = 0) -> np.ndarray:
    """``n`` distinct flat positions out of ``size`` (all of them when fewer)."""
    if size <= n:
        return np.arange(size)
    return np.sort(np.random.default_rng(seed).choice(size, n, replace=False))
