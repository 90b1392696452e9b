"""tinygrad.nn.state: core's state helpers."""
from core.tensor.nn.state import *  # noqa: F403
