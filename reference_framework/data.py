"""Data: a synthetic Flowers-102 stand-in and the reference's reader decorators.

A *reader* is a function of no arguments returning an iterable of samples;
decorators wrap readers: ``reader.shuffle(r, buf_size)`` and
``batch(r, batch_size)``. ``dataset.flowers.train(image_size, seed)`` returns
the reader of a deterministic dataset of (flat float32 CHW image, int label)
samples whose 102 classes are learnable: each class has its own low-frequency
colour pattern, each sample adds (quantised) Gaussian noise to its class's
pattern.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["FLOWERS_CLASSES", "FLOWERS_TRAIN_SIZE", "batch", "dataset", "flowers_train", "reader",
           "shuffle"]

Reader = Callable[[], Iterable[Any]]

FLOWERS_CLASSES = 102
FLOWERS_TRAIN_SIZE = 3264  # 32 samples a class: 102 batches of 32, past the reference's 80
_PATTERN_CELLS = 4  # class patterns are 4 x 4 cells a channel, upsampled to the image
_NOISE_STD = 1.0


def _noise_levels() -> np.ndarray:
    """256 equally likely levels of a normal distribution (mean 0, std _NOISE_STD)."""
    quantile = statistics.NormalDist().inv_cdf
    levels = np.array([quantile((k + 0.5) / 256) for k in range(256)])
    return (levels / levels.std() * _NOISE_STD).astype(np.float32)


_NOISE_LEVELS = _noise_levels()


def flowers_train(image_size: int = 224, seed: int = 0, size: int = FLOWERS_TRAIN_SIZE) -> Reader:
    """The reader of the synthetic Flowers training set: ``size`` samples of
    (float32 array of 3 * image_size**2, label in 0..101), the same on every call."""
    if not isinstance(image_size, int) or image_size < 1:
        raise ValueError(f"flowers.train: image_size must be a positive int, given {image_size!r}")
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"flowers.train: size must be a positive int, given {size!r}")
    patterns = class_patterns(image_size, seed)
    # Every class equally often, in a fixed mixed order.
    labels = np.random.default_rng([seed, 1]).permutation(np.arange(size) % FLOWERS_CLASSES)

    def read() -> Iterator[tuple[np.ndarray, int]]:
        rng = np.random.default_rng([seed, 2])
        n = patterns.shape[1]
        for label in labels:
            # Random bytes mapped through a table of normal quantiles: four
            # times cheaper than drawing normals, and close enough to Gaussian.
            image = _NOISE_LEVELS.take(np.frombuffer(rng.bytes(n), dtype=np.uint8))
            image += patterns[label]
            yield image, int(label)

    return read


def class_patterns(image_size: int, seed: int = 0) -> np.ndarray:
    """[102, 3 * image_size**2] float32: each class's image before noise, a
    random 3 x 4 x 4 grid of N(0, 1) levels stretched over the image."""
    cells = np.random.default_rng([seed, 0]).standard_normal(
        (FLOWERS_CLASSES, 3, _PATTERN_CELLS, _PATTERN_CELLS)).astype(np.float32)
    cell_of = np.arange(image_size) * _PATTERN_CELLS // image_size  # pixel -> its cell
    return np.ascontiguousarray(cells[:, :, cell_of][:, :, :, cell_of]).reshape(FLOWERS_CLASSES, -1)


def shuffle(reader: Reader, buf_size: int, seed: int | None = None) -> Reader:
    """Fill a buffer of ``buf_size`` samples, shuffle it, yield it, repeat; the
    last, partial buffer is shuffled and yielded too. Each pass shuffles anew;
    a ``seed`` makes the sequence of passes reproducible."""
    if not isinstance(buf_size, int) or buf_size < 1:
        raise ValueError(f"reader.shuffle: buf_size must be a positive int, given {buf_size!r}")
    rng = random.Random(seed)

    def read() -> Iterator[Any]:
        buf: list[Any] = []
        for sample in reader():
            buf.append(sample)
            if len(buf) >= buf_size:
                rng.shuffle(buf)
                yield from buf
                buf = []
        if buf:
            rng.shuffle(buf)
            yield from buf

    return read


def batch(reader: Reader, batch_size: int, drop_last: bool = False) -> Reader:
    """Group samples into lists of ``batch_size``. As in the reference, a last
    batch with fewer samples is yielded too, unless ``drop_last``."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch: batch_size must be a positive int, given {batch_size!r}")

    def read() -> Iterator[list[Any]]:
        b: list[Any] = []
        for sample in reader():
            b.append(sample)
            if len(b) == batch_size:
                yield b
                b = []
        if b and not drop_last:
            yield b

    return read


# The reference script's namespaces: rf.dataset.flowers.train, rf.reader.shuffle.
dataset = SimpleNamespace(flowers=SimpleNamespace(train=flowers_train, classes=FLOWERS_CLASSES))
reader = SimpleNamespace(shuffle=shuffle)
