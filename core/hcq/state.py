"""The pipeline's context: plugin hooks, device lookups, and what stages record on the side (placeholder contents)."""
from __future__ import annotations
import ctypes
from dataclasses import dataclass, field
from typing import Any, Callable
from core.ir.ops import UOp
from core.helpers import DEBUG

_compiled: dict[tuple[UOp, str], tuple[Any, bytes]] = {}

def compile_kernel(ast: UOp, device: str) -> tuple[Any, bytes]:
  """(ProgramSpec, compiled bytes) of a kernel for `device`, once per (kernel, device)."""
  if (hit := _compiled.get((ast, device))) is None:
    from core.device.registry import Device
    from core.codegen.program import get_program
    dev = Device[device]
    spec = get_program(ast, dev.renderer)
    hit = _compiled[(ast, device)] = (spec, dev.compiler.compile_cached(spec.src))
    if DEBUG >= 4: print(spec.src)
  return hit

def buffer_addr(buf: Any, hcq: Any = None) -> int:
  """The device address of an allocated Buffer: the HCQ object's `addr(buf)` when it has one, else the allocator handle
  itself (an int, a ctypes object, or an object with `va_addr`)."""
  if hcq is not None and hasattr(hcq, "addr"): return int(hcq.addr(buf))
  if not buf.is_allocated(): buf.allocate()
  h = buf._buf
  if h is None: return 0
  if isinstance(h, int): return h
  if hasattr(h, "va_addr"): return int(h.va_addr)
  return ctypes.addressof(h)

# tests set this to an object with pm_prep_program/pm_lower/pm_bufferize(device) to stand in for the plugin manager
HOOKS: Any = None

@dataclass
class HCQState:
  """Everything a stage may need besides the graph. Tests build one with a fake plugin; the engine uses `default()`."""
  hooks: Any                                   # pm_prep_program(dev), pm_lower(dev), pm_bufferize(dev) -> PatternMatcher | None
  hcq_of: Callable[[str], Any]                 # device name -> its HCQ object
  buffer_of: Callable[[UOp], Any]              # real BUFFER uop -> Buffer
  compile: Callable[[UOp, str], tuple[Any, bytes]] = compile_kernel
  contents: dict[UOp, bytes] = field(default_factory=dict)      # placeholder -> bytes to upload into it
  internal: dict[UOp, None] = field(default_factory=dict)       # real buffers owned by the pipeline or plugin (not schedule slots)
  commands: dict[UOp, list[tuple[str, int]]] = field(default_factory=dict)  # encoded submit -> [(command kind, byte offset)]
  bufmap: dict[UOp, UOp] = field(default_factory=dict)          # placeholder -> the real buffer bufferize gave it

  @staticmethod
  def default(buffer_of: Callable[[UOp], Any]) -> HCQState:
    from core.device.plugins import get_plugins
    from core.device.registry import Device
    def lookup(u: UOp) -> Any:
      # buffers a plugin's pm_bufferize made are the plugin's (its HCQ object's buffer_of), the rest the engine's
      hcq = getattr(Device[u.src[1].arg], "hcq", None)
      return b if (b := getattr(hcq, "buffer_of", lambda u: None)(u)) is not None else buffer_of(u)
    return HCQState(HOOKS if HOOKS is not None else get_plugins(), lambda d: Device[d].hcq, lookup)

  def addr(self, buf_uop: UOp) -> int:
    from core.hcq.queue_ir import device_of
    return buffer_addr(self.buffer_of(buf_uop), self.hcq_of(device_of(buf_uop)))
