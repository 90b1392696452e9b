"""The pipeline's context: plugin hooks, device lookups, and what stages record on the side (placeholder contents)."""
from __future__ import annotations
from dataclasses import field
from typing import Any, Callable, Protocol
from core.ir.ops import UOp
from core.device.hcq import HCQDevice
from core.device.registry import Device
from core.helpers import DEBUG, LRUCache, mutable_record
from core.codegen.program import binary_nbytes

# compiled kernels of HCQ schedules by (kernel, device), bounded by count and by their binaries' bytes
_compiled: LRUCache = LRUCache("hcq_programs", 512, 256 << 20, binary_nbytes)
Device.on_change(_compiled.clear)

def compile_kernel(ast: UOp, device: str) -> UOp:
  """The compiled PROGRAM(SINK, DEVICE, LINEAR, SOURCE, BINARY) of a kernel for `device`, once per (kernel, device)."""
  if (hit := _compiled.get((ast, device))) is None:
    from core.codegen.program import get_program, compile_program, program_source
    from core.device import profiler
    dev = Device[device]
    with profiler.compiling(device, str(ast.arg)): hit = _compiled[(ast, device)] = compile_program(get_program(ast, dev.renderer), dev.compiler)
    if DEBUG >= 4: print(program_source(hit))
  return hit

class HCQHooks(Protocol):
  """The plugin hooks the pipeline asks, each of the plugin that declared the device (core.device.plugins.PluginManager)."""
  def pm_prep_program(self, device: str) -> Any: ...
  def pm_lower(self, device: str) -> Any: ...
  def pm_bufferize(self, device: str) -> Any: ...

# tests set this to an HCQHooks object that stands in for the plugin manager
HOOKS: HCQHooks | None = None

@mutable_record
class HCQState:
  """Everything a stage may need besides the graph. Tests build one with a fake plugin; the engine uses `default()`."""
  hooks: HCQHooks
  hcq_of: Callable[[str], HCQDevice]           # device name -> its HCQ object
  buffer_of: Callable[[UOp], Any]              # real BUFFER uop -> Buffer
  compile: Callable[[UOp, str], UOp] = compile_kernel
  contents: dict[UOp, bytes] = field(default_factory=dict)      # placeholder -> bytes to upload into it
  internal: dict[UOp, None] = field(default_factory=dict)       # real buffers owned by the pipeline or plugin (not schedule slots)
  commands: dict[UOp, list[tuple[str, int]]] = field(default_factory=dict)  # encoded submit -> [(command kind, byte offset)]
  bufmap: dict[UOp, UOp] = field(default_factory=dict)          # placeholder -> the real buffer bufferize gave it
  timed: list[Any] = field(default_factory=list)                # timestamps.Timed of each timed command (profiling only)

  @staticmethod
  def default(buffer_of: Callable[[UOp], Any]) -> HCQState:
    from core.device.plugins import get_plugins
    def hcq_of(device: str) -> HCQDevice:
      if (h := Device[device].hcq) is None: raise RuntimeError(f"{device} has no command queues (its Compiled device has no hcq)")
      return h
    def lookup(u: UOp) -> Any:
      # buffers a plugin's pm_bufferize made are the plugin's (its HCQ object's buffer_of), the rest the engine's
      hcq = Device[u.src[1].arg].hcq
      return b if hcq is not None and (b := hcq.buffer_of(u)) is not None else buffer_of(u)
    return HCQState(HOOKS if HOOKS is not None else get_plugins(), hcq_of, lookup)

  def addr(self, buf_uop: UOp, device: str) -> int:
    """The address of the buffer behind `buf_uop` as `device` sees it."""
    return self.hcq_of(device).addr(self.buffer_of(buf_uop))
