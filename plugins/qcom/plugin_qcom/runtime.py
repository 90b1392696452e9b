"""make_device: the Compiled device of the interface DEV names (CL: iface_cl.py, MOCK: iface_mock.py, KGSL: iface_kgsl.py)."""
from __future__ import annotations
from typing import Any
from core.device.compiled import Compiled
from core.device.allocator import BufferSpec
from core.device.buffer import Buffer
from core.device.hcq import RingHCQ, RingLayout
from core.ir.dtype import dtypes
from core.device.target import Target
from plugin_qcom import INTERFACES

def make_device(name: str, target: Target | None = None) -> Compiled:
  """DEV=[KGSL|CL|MOCK+]QCOM[:CL]: CL runs kernels one by one on the first OpenCL device; MOCK and KGSL run schedules through
  core's HCQ pipeline as Adreno command streams."""
  iface = (target.interface if target is not None else None) or INTERFACES[0]
  if target is not None and target.renderer not in (None, "CL"):
    raise ValueError(f"QCOM has no renderer {target.renderer!r}; it offers CL (OpenCL C)")
  if iface == "CL":
    from plugin_qcom import cl
    from plugin_qcom.compiler import CLCompiler
    from plugin_qcom.iface_cl import CLAllocator, CLProgram, caps_of
    from plugin_qcom.renderer import OpenCLRenderer
    ctx = cl.context(target.indices[0] if target is not None and target.indices else 0)
    return Compiled(name, CLAllocator(name, ctx), OpenCLRenderer(caps_of(ctx), name), CLCompiler(ctx),
                    lambda n, lib: CLProgram(ctx, n, lib), target)
  if iface == "MOCK":
    from plugin_qcom.iface_mock import open_device as open_mock
    return open_mock(name, target)
  if iface == "KGSL":
    from plugin_qcom.iface_kgsl import open_device as open_kgsl
    return open_kgsl(name, target)
  raise ValueError(f"QCOM has no interface {iface!r}; it offers {', '.join(INTERFACES)} (e.g. DEV=CL+QCOM)")

# *** what the HCQ interfaces (MOCK, KGSL) share ***


class QCOMHCQ(RingHCQ):
  """The HCQ side of a QCOM device: one COMPUTE queue (Adreno's CP runs kernels and copies in one ring) whose write pointer
  counts dwords, and its buffers. An interface's subclass provides `_step()` (let the command processor run what the doorbells
  announced; False when nothing could move) and `_describe()`."""
  queues: tuple[str, ...] = ("COMPUTE:0",)
  kind = "QCOM"

  def __init__(self, device: str, ring_size: int = 1 << 20):
    super().__init__(device, ring_size)
    self._queue_bufs: dict[tuple[str, str], Buffer] = {}

  def ring_layout(self, queue: str) -> RingLayout:
    self._check(queue)
    return RingLayout(unit=4)   # the CP's read and write pointers count dwords

  def queue_buffer(self, kind: str, queue: str) -> Buffer:
    """The one ring/wptr/doorbell/timeline_signal buffer of a queue (fresh memory starts zeroed)."""
    self._check(queue)
    with self._lock:
      if (b := self._queue_bufs.get((kind, queue))) is None:
        b = Buffer(self.device, self._ring_size // 4, dtypes.uint32, BufferSpec(nolru=True)) if kind == "ring" else \
          Buffer(self.device, 1, dtypes.uint64, BufferSpec(nolru=True))
        b.allocate()
        if b.host_view() is not None: b.host_view()[:] = bytes(b.nbytes)   # type: ignore[index]
        self._queue_bufs[(kind, queue)] = b
    return b

def no_direct_path(name: str, lib: bytes) -> Any:
  """The Compiled runtime of the HCQ interfaces: kernels run only through the command stream (core's HCQ pipeline)."""
  raise NotImplementedError(f"QCOM's MOCK and KGSL interfaces run kernel {name} only through the command stream (core's HCQ pipeline); "
                            "DEV=CL+QCOM runs kernels one by one")
