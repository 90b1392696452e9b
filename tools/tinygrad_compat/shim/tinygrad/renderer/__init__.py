"""tinygrad.renderer: core's Renderer base."""
from core.device.renderer import Renderer

__all__ = ["Renderer"]
