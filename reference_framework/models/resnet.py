"""ResNet for image classification, built from layers (depth 50 is the reference).

Standard ImageNet ResNet: a 7x7/2 stem convolution with batch norm and relu, a
3x3/2 pooling, four stages of residual blocks at 64/128/256/512 channels
(x4 for bottleneck blocks), global average pooling and a softmax fc layer.
Stages 2-4 halve the resolution in their first block; in a bottleneck the
stride sits on the 3x3 convolution (the "v1.5" placement). Shortcuts are
identities, or a 1x1 convolution with batch norm where the channels or the
stride change.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import layers
from ..framework import Variable

__all__ = ["DEPTHS", "basic_block", "bottleneck", "resnet"]

Block = Callable[[Variable, int, int], Variable]


def conv_bn(input: Variable, channels: int, filter_size: int, stride: int = 1, padding: int = 0,
            act: str | None = "relu") -> Variable:
    conv = layers.conv2d(input, num_filters=channels, filter_size=filter_size, stride=stride,
                         padding=padding)
    return layers.batch_norm(conv, act=act)


def shortcut(input: Variable, channels: int, stride: int) -> Variable:
    """The identity, or a projection where the shape changes."""
    if input.known_shape[1] != channels or stride != 1:
        return conv_bn(input, channels, 1, stride, act=None)
    return input


def bottleneck(input: Variable, channels: int, stride: int) -> Variable:
    """1x1 (reduce) -> 3x3 (stride) -> 1x1 (expand x4), plus the shortcut, relu."""
    reduced = conv_bn(input, channels, 1)
    spatial = conv_bn(reduced, channels, 3, stride, padding=1)
    expanded = conv_bn(spatial, channels * 4, 1, act=None)
    return layers.elementwise_add(shortcut(input, channels * 4, stride), expanded, act="relu")


def basic_block(input: Variable, channels: int, stride: int) -> Variable:
    """Two 3x3 convolutions plus the shortcut, relu (ResNet-18/34)."""
    first = conv_bn(input, channels, 3, stride, padding=1)
    second = conv_bn(first, channels, 3, 1, padding=1, act=None)
    return layers.elementwise_add(shortcut(input, channels, stride), second, act="relu")


# depth -> (blocks per stage, block)
DEPTHS: dict[int, tuple[list[int], Block]] = {
    18: ([2, 2, 2, 2], basic_block),
    34: ([3, 4, 6, 3], basic_block),
    50: ([3, 4, 6, 3], bottleneck),
    101: ([3, 4, 23, 3], bottleneck),
    152: ([3, 8, 36, 3], bottleneck),
}
STAGE_CHANNELS = (64, 128, 256, 512)


def resnet(input: Variable, class_dim: int = 102, depth: int = 50,
           stem_pool: str = "max") -> Variable:
    """Class probabilities [N, class_dim] of ResNet-``depth`` for an NCHW image batch.

    ``stem_pool``: "max" (standard: 3x3/2 max pooling, padding 1) or "avg" (the
    reference report's script: 3x3/2 average pooling without padding).
    """
    if depth not in DEPTHS:
        raise ValueError(f"resnet: depth must be one of {sorted(DEPTHS)}, given {depth!r}")
    if stem_pool not in ("max", "avg"):
        raise ValueError(f"resnet: stem_pool must be 'max' or 'avg', given {stem_pool!r}")
    if input.shape is None or len(input.shape) != 4:
        raise ValueError(f"resnet: the input must be an NCHW batch, {input.name!r} has shape "
                         f"{input.shape}")
    stages, block = DEPTHS[depth]
    x = conv_bn(input, 64, 7, stride=2, padding=3)
    x = layers.pool2d(x, pool_size=3, pool_type=stem_pool, pool_stride=2,
                      pool_padding=1 if stem_pool == "max" else 0)
    for stage, (blocks, channels) in enumerate(zip(stages, STAGE_CHANNELS, strict=True)):
        for i in range(blocks):
            x = block(x, channels, 2 if stage > 0 and i == 0 else 1)
    x = layers.pool2d(x, pool_type="avg", global_pooling=True)
    return layers.fc(x, size=class_dim, act="softmax")
