"""The user-facing tensor layer: Tensor, autograd (gradient.py) and nn."""
from __future__ import annotations
from core.tensor.tensor import Tensor
from core.tensor.validate import install

install(Tensor)   # every public method checks its arguments' types from its annotations (validate.py)

__all__ = ["Tensor"]
