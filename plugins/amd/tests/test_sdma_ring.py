"""An SDMA submit near the ring's end, through core's real submit program: without a NOP tail (the old encoding, a submit
wrapping anywhere) the COPY packet straddles the end and the MOCK SDMA engine refuses it; with the plugin's ring layout the
tail is NOPs, the submit starts at ring word 0 and the copy and the signal land. Exact ring words."""
from __future__ import annotations
import struct
import pytest
from core.device.hcq import RingLayout
from core.hcq import queue_ir as qir
from core.hcq.state import HCQState
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from plugin_amd import sdma
from plugin_amd.lower import lower_command, resolve_ins
from plugin_amd.mock_cp import AddressSpace, Actions, PacketError, SDMAProcessor
from plugin_amd.runtime import AMDHCQ

RING = 256   # bytes: 64 words
JUNK = 0xDEADBEEF

class WrapAnywhere(AMDHCQ):
  """The encoding before the plugin owned its ring layout: byte write pointers, submits wrap anywhere."""
  def ring_layout(self, queue: str) -> RingLayout: return RingLayout(unit=1)

def submit_near_the_end(hcq: AMDHCQ, wptr0: int) -> tuple[list[int], list[int], int, AddressSpace, Actions, int, int]:
  """Encodes a 64-byte copy and a signal for COPY:0 (device addresses in an AddressSpace the SDMA engine reads), runs core's
  submit program over a 256-byte ring whose write pointer is `wptr0`: (the submit's words, the ring's words, the new write
  pointer, the address space, the engine's actions, src, dst)."""
  from core.engine.run import buffer_of
  from core.hcq.callify import callify
  mem = AddressSpace()
  (src, srcbuf), (dst, _), (sig, _) = mem.alloc(64), mem.alloc(64), mem.alloc(8)
  srcbuf[:] = bytes(range(1, 65))
  src_u, dst_u = UOp.new_buffer("AMD", 64, dtypes.uint8), UOp.new_buffer("AMD", 64, dtypes.uint8)
  sig_u = qir.queue_buffer("timeline_signal", "COPY:0", "AMD")
  addr = {src_u: src, dst_u: dst, sig_u: sig}.__getitem__
  words = b"".join(resolve_ins(lower_command(c, "COPY:0", hcq.arch), addr) for c in (qir.copy(dst_u, src_u, 64), qir.signal(sig_u, qir.u64(9))))
  bufs = {k: UOp.new_buffer("PYTHON", n, dt) for k, n, dt in (("ring", RING // 4, dtypes.uint32), ("wptr", 1, dtypes.uint64),
                                                           ("doorbell", 1, dtypes.uint64), ("cmd", len(words) // 4, dtypes.uint32))}
  buffer_of(bufs["ring"]).copyin(memoryview(struct.pack(f"<{RING // 4}I", *[JUNK] * (RING // 4))))
  buffer_of(bufs["wptr"]).copyin(memoryview(struct.pack("<Q", wptr0)))
  buffer_of(bufs["cmd"]).copyin(memoryview(words))
  sub = UOp(Ops.CUSTOM_FUNCTION, src=(bufs["cmd"], UOp(Ops.DEVICE, arg="AMD"), bufs["ring"], bufs["wptr"], bufs["doorbell"]),
            arg=("submit", "COPY:0", len(words)))
  _, prg, args = callify(UOp(Ops.LINEAR, src=(sub,)), HCQState(None, lambda d: hcq, buffer_of))
  prg(*args)
  ring = bytes(buffer_of(bufs["ring"]).as_buffer())
  wptr = struct.unpack("<Q", bytes(buffer_of(bufs["doorbell"]).as_buffer()))[0]
  assert wptr == struct.unpack("<Q", bytes(buffer_of(bufs["wptr"]).as_buffer()))[0]
  # the MOCK SDMA engine runs what the doorbell announces
  actions = Actions(mem)
  SDMAProcessor(hcq.arch, mem, actions).run(bytearray(ring), wptr0, wptr)
  return list(struct.unpack(f"<{len(words) // 4}I", words)), list(struct.unpack(f"<{RING // 4}I", ring)), wptr, mem, actions, src, dst

def test_copy_queue_layout():
  assert AMDHCQ("AMD", "gfx1100").ring_layout("COPY:0") == RingLayout(unit=1, nop=sdma.NOP_DWORD) and sdma.NOP_DWORD == 0
  assert AMDHCQ("AMD", "gfx1100").ring_layout("COMPUTE:0") == RingLayout(unit=4)

def test_a_wrapping_sdma_submit_is_refused():
  # 3 laps in, 16 bytes (4 words) before the end: the COPY's 7 dwords straddle the end of the ring
  with pytest.raises(PacketError, match=r"COPY\): the packet's 7 dwords wrap past the end of the 0x100-byte ring \(it starts at ring offset 0xf0\)"):
    submit_near_the_end(WrapAnywhere("AMD", "gfx1100", RING), 3 * RING + 240)

def test_nop_tail_keeps_the_sdma_packets_whole():
  sub, ring, wptr, mem, actions, src, dst = submit_near_the_end(AMDHCQ("AMD", "gfx1100", RING), 3 * RING + 240)
  assert len(sub) == 15 and ring[60:] == [sdma.NOP_DWORD] * 4 and ring[:15] == sub and ring[15:60] == [JUNK] * 45
  assert wptr == 4 * RING + 60   # the write pointer (bytes) went over the NOPs
  assert mem.read(dst, 64) == bytes(range(1, 65))
  assert [a[0] for a in actions.log] == ["copy", "signal", "signal"] and struct.unpack("<Q", mem.read(actions.log[-1][1][0], 8))[0] == 9
