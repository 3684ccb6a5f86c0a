"""The reference report's ResNet training program in Paddle's static graph (the suites' peer).

The network follows ``reference_framework.models.resnet`` layer for layer (its depth table,
bottleneck with the stride on the 3x3 convolution, projection shortcuts where the shape changes, no
convolution bias, batch norm, the stem's pooling, global average pooling, an fc layer with
softmax), so the parameter counts are equal; the suite checks it. Training is the report's script:
``cross_entropy`` on the softmax, ``mean``, ``Momentum(0.01, 0.9)``, and the accuracy of the batch
(``top_k`` + ``accuracy``), fetched with the loss on every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from reference_framework.benchmark import BenchmarkConfig
from reference_framework.models.resnet import DEPTHS, STAGE_CHANNELS, bottleneck

__all__ = ["PaddleProgram", "build_program", "parameter_count"]


@dataclass
class PaddleProgram:
    """A built training program: its programs, inputs and what each run fetches."""

    main: Any
    startup: Any
    avg_cost: Any
    accuracy: Any


def _conv_bn(nn: Any, x: Any, cin: int, cout: int, k: int, stride: int = 1, padding: int = 0,
             relu: bool = True) -> Any:
    y = nn.BatchNorm2D(cout)(nn.Conv2D(cin, cout, k, stride, padding, bias_attr=False)(x))
    return nn.functional.relu(y) if relu else y


def _block(nn: Any, x: Any, cin: int, channels: int, stride: int, bottle: bool) -> tuple[Any, int]:
    cout = channels * 4 if bottle else channels
    if bottle:
        body = _conv_bn(nn, x, cin, channels, 1)
        body = _conv_bn(nn, body, channels, channels, 3, stride, 1)
        body = _conv_bn(nn, body, channels, cout, 1, relu=False)
    else:
        body = _conv_bn(nn, x, cin, channels, 3, stride, 1)
        body = _conv_bn(nn, body, channels, channels, 3, 1, 1, relu=False)
    short = (_conv_bn(nn, x, cin, cout, 1, stride, relu=False) if cin != cout or stride != 1
             else x)
    return nn.functional.relu(short + body), cout


def build_program(paddle: Any, config: BenchmarkConfig) -> PaddleProgram:
    """The training program of ``config`` (static graph; ``paddle.enable_static()`` first)."""
    nn = paddle.nn
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = config.seed
    with paddle.static.program_guard(main, startup):
        size = config.image_size
        image = paddle.static.data("data", [-1, 3, size, size], "float32")
        label = paddle.static.data("label", [-1, 1], "int64")
        x = _conv_bn(nn, image, 3, 64, 7, 2, 3)
        x = (nn.MaxPool2D(3, 2, 1) if config.stem_pool == "max" else nn.AvgPool2D(3, 2, 0))(x)
        stages, block = DEPTHS[config.depth]
        cin = 64
        for stage, (blocks, channels) in enumerate(zip(stages, STAGE_CHANNELS, strict=True)):
            for i in range(blocks):
                stride = 2 if stage > 0 and i == 0 else 1
                x, cin = _block(nn, x, cin, channels, stride, block is bottleneck)
        x = paddle.flatten(nn.AdaptiveAvgPool2D(1)(x), 1)
        predict = nn.functional.softmax(nn.Linear(cin, config.class_dim)(x))
        cost = nn.functional.cross_entropy(predict, label, use_softmax=False, reduction="none")
        avg_cost = paddle.mean(cost)
        accuracy = paddle.static.accuracy(predict, label)
        paddle.optimizer.Momentum(learning_rate=config.learning_rate,
                                  momentum=config.momentum).minimize(avg_cost)
    return PaddleProgram(main, startup, avg_cost, accuracy)


def parameter_count(program: Any) -> int:
    """The trainable parameters of a built program (batch norm's running statistics are not)."""
    return sum(math.prod(p.shape) for p in program.get_all_parameter_values().values()
               if not p.stop_gradient)
