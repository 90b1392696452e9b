"""A stand-in for tinygrad's NIR (Mesa) renderer, which core doesn't have: test files only ask whether the device's
renderer is one (`isinstance(..., NIRRenderer)`), and no core renderer is."""
from core.device.renderer import Renderer

class NIRRenderer(Renderer):
  pass
