"""The synthetic Flowers dataset and the reader decorators (shuffle, batch)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import reference_framework as rf
from reference_framework.data import FLOWERS_CLASSES, class_patterns


def take(reader, n):
    return list(itertools.islice(reader(), n))


def test_samples_are_flat_float32_images_with_labels_of_102_classes():
    samples = list(rf.dataset.flowers.train(image_size=8, seed=0)())
    assert len(samples) >= 2560  # the reference's 80 batches of 32 fit in one pass
    for image, label in samples[:50]:
        assert image.dtype == np.float32 and image.shape == (3 * 8 * 8,)
        assert isinstance(label, int)
    labels = np.array([label for _, label in samples])
    assert labels.min() == 0 and labels.max() == FLOWERS_CLASSES - 1
    counts = np.bincount(labels, minlength=FLOWERS_CLASSES)
    assert counts.max() - counts.min() <= 1  # every class about equally often
    assert len(set(labels[:FLOWERS_CLASSES])) > 50  # mixed, not sorted by class


def test_the_dataset_is_deterministic_per_seed():
    first = take(rf.dataset.flowers.train(image_size=16, seed=3), 20)
    again = take(rf.dataset.flowers.train(image_size=16, seed=3), 20)
    other = take(rf.dataset.flowers.train(image_size=16, seed=4), 20)
    reader = rf.dataset.flowers.train(image_size=16, seed=3)
    assert take(reader, 20)[5][0].tobytes() == take(reader, 20)[5][0].tobytes()  # every pass alike
    for (a, la), (b, lb) in zip(first, again, strict=True):
        assert la == lb and np.array_equal(a, b)
    assert not all(np.array_equal(a, b) for (a, _), (b, _) in zip(first, other, strict=True))


def test_classes_are_learnable_noise_is_not_too_strong():
    """Each sample is its class pattern plus unit noise: matching a sample to the
    nearest class pattern recovers its label almost always, while single pixels
    say little (so a model must pool over regions to learn)."""
    size = 16
    patterns = class_patterns(size, seed=0)
    samples = take(rf.dataset.flowers.train(image_size=size, seed=0), 300)
    images = np.stack([image for image, _ in samples])
    labels = np.array([label for _, label in samples])
    noise = images - patterns[labels]
    assert 0.9 < noise.std() < 1.1 and abs(noise.mean()) < 0.02
    dist = ((images[:, None, :] - patterns[None, :, :]) ** 2).sum(-1)
    assert (dist.argmin(1) == labels).mean() > 0.95
    # patterns are piecewise constant over a 4 x 4 grid of cells per channel
    grid = patterns.reshape(FLOWERS_CLASSES, 3, 4, size // 4, 4, size // 4)
    assert np.array_equal(grid, np.broadcast_to(grid[:, :, :, :1, :, :1], grid.shape))


def test_patterns_cover_any_image_size():
    for size in (32, 33, 224):
        p = class_patterns(size)
        assert p.shape == (FLOWERS_CLASSES, 3 * size * size) and p.dtype == np.float32
    with pytest.raises(ValueError, match="image_size must be a positive int, given 0"):
        rf.dataset.flowers.train(image_size=0)


def numbers(n):
    return lambda: iter(range(n))


def test_shuffle_permutes_within_each_buffer_including_the_last_partial_one():
    out = list(rf.reader.shuffle(numbers(8), buf_size=3, seed=0)())
    assert (
        sorted(out[0:3]) == [0, 1, 2]
        and sorted(out[3:6]) == [3, 4, 5]
        and sorted(out[6:]) == [6, 7]
    )
    big = list(rf.reader.shuffle(numbers(100), buf_size=100, seed=0)())
    assert sorted(big) == list(range(100)) and big != list(range(100))


def test_shuffle_is_reproducible_with_a_seed_and_differs_between_passes():
    reader = rf.reader.shuffle(numbers(50), buf_size=50, seed=7)
    first, second = list(reader()), list(reader())
    assert first != second
    again = rf.reader.shuffle(numbers(50), buf_size=50, seed=7)
    assert list(again()) == first and list(again()) == second


def test_batch_yields_the_last_partial_batch_unless_drop_last():
    assert list(rf.batch(numbers(10), batch_size=4)()) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(rf.batch(numbers(10), batch_size=4, drop_last=True)()) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
    ]
    assert list(rf.batch(numbers(8), batch_size=4)()) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_reader_sizes_are_checked():
    with pytest.raises(ValueError, match="batch_size must be a positive int, given 0"):
        rf.batch(numbers(3), batch_size=0)
    with pytest.raises(ValueError, match="buf_size must be a positive int, given -1"):
        rf.reader.shuffle(numbers(3), buf_size=-1)


def test_the_reference_pipeline_batches_the_dataset():
    reader = rf.batch(
        rf.reader.shuffle(rf.dataset.flowers.train(image_size=8, seed=0), buf_size=5120, seed=0),
        batch_size=32,
    )
    batches = list(reader())
    assert len(batches) == -(-len(list(rf.dataset.flowers.train(image_size=8)())) // 32)
    assert all(len(b) == 32 for b in batches[:-1]) and 1 <= len(batches[-1]) <= 32
