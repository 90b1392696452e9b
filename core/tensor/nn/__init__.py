"""Neural-network building blocks: layers, optimizers and state (state_dict, safetensors)."""
from __future__ import annotations
from core.tensor.nn.layers import (Linear, Conv1d, Conv2d, ConvTranspose2d, BatchNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d, LayerNorm,
                                   GroupNorm, RMSNorm, Embedding, Dropout)
from core.tensor.nn import optim, state

__all__ = ["Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm",
           "RMSNorm", "Embedding", "Dropout", "optim", "state"]
