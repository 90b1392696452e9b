"""pm_bufferize and the HCQ object's ring rules: per-queue placeholders become the channel's own buffers (one each, however often
asked), the packed kinds fresh allocations, and unknown kinds or queues are refused by name."""
from __future__ import annotations
from typing import Any
import pytest
from core.device.buffer import Buffer
from core.device.hcq import RingLayout
from core.hcq import queue_ir as qi
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from plugin_nv.bufferize import pm_bufferize
from plugin_nv.runtime import NVHCQ

class FakeHCQ(NVHCQ):
  """An NVHCQ whose buffers are recorded, not allocated."""
  def __init__(self) -> None:
    super().__init__("NV", "sm_90", 1 << 12)
    self.asked: list[tuple[str, str]] = []
    self.fresh: list[tuple[Any, int]] = []
  def queue_buffer(self, kind: str, queue: str) -> Buffer:
    self.asked.append((kind, queue))
    return Buffer("PYTHON", 8, dtypes.uint64)
  def buffer_uop(self, tag: Any, dtype: DType, size: int) -> UOp:
    if not (isinstance(tag, tuple) and tag[0] in ("ring", "wptr", "doorbell", "timeline_signal")): self.fresh.append((tag, size))
    return super().buffer_uop(tag, dtype, size) if isinstance(tag, tuple) else UOp.new_buffer("PYTHON", max(size, 1), dtype)

def test_per_queue_buffers_are_the_channels():
  h = FakeHCQ()
  ring, ring2 = (graph_rewrite(qi.queue_buffer("ring", "COMPUTE:0", "NV"), pm_bufferize, h) for _ in range(2))
  assert ring is ring2 and ring.op is Ops.BUFFER and ring.tag is None and h.asked == [("ring", "COMPUTE:0")]
  sig = graph_rewrite(qi.queue_buffer("timeline_signal", "COPY:0", "NV"), pm_bufferize, h)
  assert sig is not ring and h.asked[-1] == ("timeline_signal", "COPY:0") and h.buffer_of(sig) is not None

def test_packed_kinds_are_fresh_and_unknowns_refused():
  h = FakeHCQ()
  for kind in ("program", "kernargs", "cmdbuf", "scratch", "staging"):
    assert graph_rewrite(qi.placeholder(kind, "NV", 300), pm_bufferize, h).tag is None
  assert h.fresh == [(k, 300) for k in ("program", "kernargs", "cmdbuf", "scratch", "staging")]
  with pytest.raises(ValueError, match="no buffer for placeholder tag 'qmd'"): graph_rewrite(qi.placeholder("qmd", "NV", 8), pm_bufferize, h)
  with pytest.raises(ValueError, match=r"names a queue this device lacks \(it has COMPUTE:0, COPY:0\)"):
    graph_rewrite(qi.queue_buffer("ring", "COMPUTE:1", "NV"), pm_bufferize, h)

def test_ring_rules():
  h = FakeHCQ()
  # dword write pointers, and no submit wraps: a GPFIFO entry points at one contiguous segment, the tail gets empty headers (0)
  assert h.ring_layout("COMPUTE:0") == h.ring_layout("COPY:0") == RingLayout(unit=4, nop=0) and h.ring_size("COPY:0") == 1 << 12
  with pytest.raises(ValueError, match="NV has no queue 'COPY:1'"): h.ring_size("COPY:1")
  with pytest.raises(ValueError, match="not a power of two"): NVHCQ.__init__(h, "NV", "sm_90", 1000)
