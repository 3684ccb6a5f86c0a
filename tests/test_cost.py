"""Tests of program work (FLOPs, bytes) from the ops' cost models."""

from __future__ import annotations

import pytest

from reference_framework.benchmark import WORKLOADS, build_training_program
from reference_framework.cost import op_work, program_work


@pytest.fixture(scope="module")
def resnet50_224():
    return build_training_program(WORKLOADS["full"])


def test_resnet50_forward_convs_cost_about_4_1_gmacs_per_image(resnet50_224):
    work = program_work(resnet50_224.main, batch_size=1)
    # ResNet-50 (v1.5, 224x224) is ~4.1 GMACs, almost all of it convolutions.
    assert 7.9e9 < work["conv2d"].flops < 8.4e9
    # Backward does the forward's GEMMs twice (a cost model sees shapes, not
    # which gradients are wanted, so the stem's skipped input gradient counts).
    assert work["conv2d_grad"].flops == pytest.approx(2 * work["conv2d"].flops)
    assert work["mul"].flops == 2 * 2048 * 102
    assert work["conv2d"].bytes > 0


def test_work_scales_with_the_batch(resnet50_224):
    one, eight = program_work(resnet50_224.main, 1), program_work(resnet50_224.main, 8)
    assert eight["conv2d"].flops == pytest.approx(8 * one["conv2d"].flops)
    assert eight["batch_norm"].bytes > 7 * one["batch_norm"].bytes


def test_ops_without_a_cost_model_have_no_work(resnet50_224):
    fill = next(op for op in resnet50_224.main.global_block().ops if op.type == "fill_constant")
    assert op_work(fill, 8) is None
