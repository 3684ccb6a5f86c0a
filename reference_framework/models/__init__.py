"""Model builders: networks made of layers (ResNet, the reference report's model)."""

from .resnet import DEPTHS, resnet

__all__ = ["DEPTHS", "resnet"]
