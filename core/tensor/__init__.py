"""The user-facing tensor layer: Tensor, autograd (gradient.py) and nn."""
from __future__ import annotations
from core.tensor.tensor import Tensor

__all__ = ["Tensor"]
