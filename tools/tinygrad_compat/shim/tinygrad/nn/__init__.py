"""tinygrad.nn: core's layers, optimizers and state helpers."""
from core.tensor.nn import *  # noqa: F403
from core.tensor.nn import __all__ as _core_all, optim, state  # noqa: F401

__all__ = list(_core_all)
