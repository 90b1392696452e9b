"""tinygrad.nn.optim: core's optimizers."""
from core.tensor.nn.optim import *  # noqa: F403
