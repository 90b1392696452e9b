"""The submit program honours each queue's RingLayout: a queue with a `nop` never gets a submit across the ring's end (the
words up to the end become NOPs and the submit starts at ring word 0); without one a submit wraps anywhere. Exact ring words."""
import struct
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.hcq import queue_ir as q
from core.hcq.state import HCQState
from core.device.hcq import RingLayout

NOP, JUNK = 0x0000ABCD, 0xDEADBEEF

def run_submits(fake, layout: RingLayout, wptr0: int, cmds: list[tuple[int, ...]]) -> tuple[tuple[int, ...], int, int]:
  """Runs one schedule of `cmds` (each a submit's words) on FAKE's COMPUTE:0 whose write pointer starts at `wptr0` (in units):
  (the ring's 1024 words, the write pointer, the doorbell)."""
  from core.device.registry import Device
  from core.engine.run import buffer_of
  from core.hcq.callify import callify
  hcq = Device["FAKE"].hcq
  hcq.layout = layout
  ctx = HCQState(None, lambda d: Device[d].hcq, lambda u: hcq.buffer_of(u) or buffer_of(u))
  real = {k: hcq.buffer_uop(q.queue_buffer(k, "COMPUTE:0", "FAKE")) for k in ("ring", "wptr", "doorbell")}
  ring, wptr, bell = (ctx.buffer_of(real[k]) for k in ("ring", "wptr", "doorbell"))
  ring.copyin(memoryview(struct.pack("<1024I", *[JUNK] * 1024)))
  wptr.copyin(memoryview(struct.pack("<Q", wptr0)))
  subs = []
  for words in cmds:
    cmd = UOp.new_buffer("FAKE", len(words), dtypes.uint32)
    buffer_of(cmd).copyin(memoryview(struct.pack(f"<{len(words)}I", *words)))
    subs.append(UOp(Ops.CUSTOM_FUNCTION, src=(cmd, UOp(Ops.DEVICE, arg="FAKE"), real["ring"], real["wptr"], real["doorbell"]),
                    arg=("submit", "COMPUTE:0", 4 * len(words))))
  _, prg, args = callify(UOp(Ops.LINEAR, src=tuple(subs)), ctx)
  prg(*args)
  u64 = lambda b: struct.unpack("<Q", bytes(b.as_buffer()))[0]
  return struct.unpack("<1024I", bytes(ring.as_buffer())), u64(wptr), u64(bell)

def test_nop_tail_moves_a_submit_that_would_cross_the_end(fake):
  # 2 words left before the end of the (second lap of the) 4 KB ring, a 4-word submit: NOPs up to the end, the submit at word 0,
  # and the next submit of the schedule right after it
  words, wptr, bell = run_submits(fake, RingLayout(unit=1, nop=NOP), 4096 + 4088, [(1, 2, 3, 4), (5, 6)])
  assert words[1022:] == (NOP, NOP) and words[:6] == (1, 2, 3, 4, 5, 6) and words[6] == JUNK and words[1021] == JUNK
  assert wptr == bell == 2 * 4096 + 24   # the write pointer went over the NOPs

def test_without_a_nop_the_submit_wraps(fake):
  words, wptr, bell = run_submits(fake, RingLayout(unit=1), 4096 + 4088, [(1, 2, 3, 4)])
  assert words[1022:] == (1, 2) and words[:2] == (3, 4) and words[2] == JUNK
  assert wptr == bell == 4096 + 4104

def test_a_submit_that_fits_gets_no_nops(fake):
  # exactly up to the ring's end: no NOPs (nor when the write pointer counts dwords); the next one starts at word 0
  words, wptr, bell = run_submits(fake, RingLayout(unit=4, nop=NOP), (4096 + 4080) // 4, [(1, 2, 3, 4), (5, 6, 7)])
  assert words[1020:] == (1, 2, 3, 4) and words[:3] == (5, 6, 7) and words[3] == JUNK and words[1019] == JUNK
  assert wptr == bell == (2 * 4096 + 12) // 4

def test_nop_tail_with_a_dword_write_pointer(fake):
  words, wptr, bell = run_submits(fake, RingLayout(unit=4, nop=NOP), 1021, [(1, 2, 3, 4, 5)])
  assert words[1021:] == (NOP, NOP, NOP) and words[:5] == (1, 2, 3, 4, 5) and words[5] == JUNK
  assert wptr == bell == 1024 + 5

def test_ring_too_small_for_the_words_and_a_nop_tail(fake):
  # 600 words fit in the 1024-word ring, but not with the NOP tail (up to 599 words) they may need: from word 425 on, the NOPs
  # would fill [425, 1024) and the submit [0, 600) would overwrite the NOPs before the command processor read them
  with pytest.raises(RuntimeError, match=r"needs 2400 bytes of commands \(\+ up to 2396 bytes of NOPs\), more than the 4096-byte ring"):
    run_submits(fake, RingLayout(unit=1, nop=NOP), 425 * 4, [(1,) * 600])
  words, wptr, _ = run_submits(fake, RingLayout(unit=1), 425 * 4, [(1,) * 600])   # wrapping anywhere, they fit
  assert words[425:] == (1,) * 599 and words[0] == 1 and words[1] == JUNK and wptr == 1025 * 4
