"""A `tinygrad` package made of core's public API, so test files written for tinygrad's Tensor run against core unchanged.
Only names are mapped here; every result comes from core's own Tensor (tools/tinygrad_compat/README.md)."""
from core import Tensor, dtypes, Variable, TinyJit, GlobalCounters, UOp
from core.tensor import nn
from tinygrad.device import Device
from tinygrad.helpers import Context

__all__ = ["Tensor", "dtypes", "Context", "Variable", "TinyJit", "GlobalCounters", "UOp", "nn", "Device"]
