"""plugin-example's command-queue side (queue.py): exact packet words, and what each of the three rule sets makes of core's IR."""
from __future__ import annotations
import struct
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from core.hcq import queue_ir as q
from core.hcq.plain import HandleProgramData
from core.hcq.state import HCQState
from core.hcq.encode import encode_submit
from core.codegen.program import ProgramSpec
from plugin_example.queue import Op, decode, packet, pm_bufferize, pm_lower, pm_prep_program
from plugin_example.iface_sim import SimHCQ

# *** the packet format ***

def test_packet_words_are_exact() -> None:
  assert packet(Op.BARRIER).hex() == "0601000000000000"                                   # header: opcode 6 | 1 word << 8
  assert packet(Op.WAIT, 0x1000, 5).hex() == "0303000000000000" "0010000000000000" "0500000000000000"
  assert packet(Op.LAUNCH, 0xA0, 0xB0, 2 | 1 << 32) == struct.pack("<4Q", 0x401, 0xA0, 0xB0, 0x1_0000_0002)
  assert packet(Op.COPY, 1, 2, 64) == struct.pack("<4Q", 0x402, 1, 2, 64)
  assert packet(Op.SIGNAL, 0x10, 7) == struct.pack("<3Q", 0x304, 0x10, 7)
  assert packet(Op.TIMESTAMP, 0x20) == struct.pack("<2Q", 0x205, 0x20)
  with pytest.raises(ValueError, match="a COPY packet has 3 fields, got 2"): packet(Op.COPY, 1, 2)

def test_decode_reads_back_every_packet_and_rejects_garbage() -> None:
  words = packet(Op.COPY, 1, 2, 3) + packet(Op.BARRIER) + packet(Op.SIGNAL, 4, 5)
  assert decode(words) == [(Op.COPY, (1, 2, 3)), (Op.BARRIER, ()), (Op.SIGNAL, (4, 5))]
  with pytest.raises(ValueError, match="bad packet header 0x0000000000000909"): decode(struct.pack("<Q", 0x909))
  with pytest.raises(ValueError, match="bad packet header 0x0000000000000502"): decode(struct.pack("<4Q", 0x502, 0, 0, 0))   # COPY is 4 words
  with pytest.raises(ValueError, match="needs 24 bytes, only 16 left"): decode(packet(Op.WAIT, 1, 2)[:16])

# *** pm_prep_program ***

KERNEL = "void k(float* out, const float* a, int n) { for (int i = 0; i < n; i++) out[i] = a[i] * 2.0f; }"

def compiled_kernel() -> UOp:
  """A compiled PROGRAM as core's codegen hands it to pm_prep_program: two buffer parameters and one variable."""
  from plugin_example.compiler import HostCCompiler
  n = UOp.variable("n", 0, 1024, dtypes.int32)
  params = (UOp.param(0, dtypes.float32.ptr()), UOp.param(1, dtypes.float32.ptr()), n)
  return UOp(Ops.PROGRAM, src=(UOp(Ops.SINK, arg="k"), UOp(Ops.DEVICE, arg="EXAMPLE"), UOp(Ops.LINEAR, src=params), UOp(Ops.SOURCE, arg=KERNEL),
                               UOp(Ops.BINARY, arg=HostCCompiler().compile(KERNEL))), arg=ProgramSpec("k", vars=(n,)))

def test_prep_program_loads_the_kernel_and_describes_its_arguments() -> None:
  sim = SimHCQ("EXAMPLE")
  prepared = graph_rewrite(compiled_kernel(), pm_prep_program, sim, name="prep")
  data = prepared.arg
  assert prepared.op is Ops.PROGRAM and [s.op for s in prepared.src] == [Ops.DEVICE, Ops.BINARY] and prepared.src[0].arg == "EXAMPLE"
  assert data == HandleProgramData("k", 24, 8, (0, 8, 16), handle=data.handle, nbufs=2, nvars=1) and data.handle >= 1
  assert prepared.src[1].arg == struct.pack("<Q", data.handle)   # the image: the handle the driver gave the loaded kernel
  assert sim.load_program("k", compiled_kernel().src[4].arg) is data.program   # loaded once while held

def test_a_program_is_loaded_once_while_held_and_unloaded_after() -> None:
  import gc
  from plugin_example import iface_sim
  sim, lib = SimHCQ("EXAMPLE"), compiled_kernel().src[4].arg
  a = sim.load_program("k", lib)
  assert sim.load_program("k", lib) is a and iface_sim._programs[a.handle] is a
  handle = a.handle
  del a
  gc.collect()
  assert handle not in iface_sim._programs   # nothing launches it any more (a plain dict kept every kernel ever loaded)
  assert sim.load_program("k", lib).handle > handle   # a handle is never reused: a stale LAUNCH can't run another program

# *** pm_lower, through core's encode stage ***

def encode(cmds: list[UOp]) -> tuple[bytes, list[tuple[int, UOp]], list[tuple[int, UOp]]]:
  """(command buffer words, host patches, ring patches) of one COMPUTE:0 submit of `cmds`, as core's encode stage makes them."""
  sim = SimHCQ("EXAMPLE")
  ctx = HCQState(hooks=None, hcq_of=lambda d: sim, buffer_of=lambda u: None)   # type: ignore[arg-type]  # encode asks no hooks
  sub, host = encode_submit(q.submit(cmds, "EXAMPLE", "COMPUTE:0"), ctx, pm_lower)
  return ctx.contents[sub.src[0]], [(p.arg, p.src[1]) for p in host], [(p.arg, p.src[0]) for p in sub.src[5:]]

def addresses(patches: list[tuple[int, UOp]]) -> list[tuple[int, UOp]]:
  """(byte offset, buffer) of each patch that writes a buffer's address (GETADDR)."""
  return [(off, v.src[0]) for off, v in patches if v.op is Ops.GETADDR]

def test_lower_launch_patches_image_and_kernargs_addresses() -> None:
  image, kargs = q.placeholder("program", "EXAMPLE", 8), q.placeholder("kernargs", "EXAMPLE", 24)
  prog = q.prepared_program("EXAMPLE", image, HandleProgramData("k", 24, 8, (0, 8, 16), handle=3, nbufs=2, nvars=1))
  words, host, ring = encode([q.launch(prog, kargs, (1, 1, 1), (1, 1, 1))])
  assert words == packet(Op.LAUNCH, 0, 0, 2 | 1 << 32)
  assert addresses(host) == [(8, image), (16, kargs)] and len(host) == 2 and ring == []
  with pytest.raises(RuntimeError, match=r"kernel k has global size \(4, 1, 1\)"): encode([q.launch(prog, kargs, (4, 1, 1), (1, 1, 1))])

def test_lower_copy_wait_signal_timestamp_barrier() -> None:
  dst, src, sig, ts = (UOp.new_buffer("EXAMPLE", 8, dtypes.uint64) for _ in range(4))
  tl = q.timeline_value("COMPUTE:0", "EXAMPLE", 1)
  words, host, ring = encode([q.copy(dst, src, 64), q.wait(sig, q.u64(5)), q.signal(sig, tl), q.timestamp(ts), q.barrier()])
  # constants are written into the words now; addresses are host patches; the timeline value is written at submit time
  assert words == packet(Op.COPY, 0, 0, 64) + packet(Op.WAIT, 0, 5) + packet(Op.SIGNAL, 0, 0) + packet(Op.TIMESTAMP, 0) + packet(Op.BARRIER)
  assert addresses(host) == [(8, dst), (16, src), (40, sig), (64, sig), (88, ts)] and len(host) == 5
  assert ring == [(72, tl)]

# *** pm_bufferize ***

def test_bufferize_gives_each_queue_buffer_once_and_other_kinds_fresh_buffers() -> None:
  sim = SimHCQ("EXAMPLE", ring_size=4096)
  ring, bell = q.queue_buffer("ring", "COMPUTE:0", "EXAMPLE"), q.queue_buffer("doorbell", "COPY:0", "EXAMPLE")
  k1, k2 = q.placeholder("kernargs", "EXAMPLE", 24), q.placeholder("kernargs", "EXAMPLE", 24)
  out = graph_rewrite(UOp(Ops.SINK, src=(ring, bell, k1, k2)), pm_bufferize, sim, bottom_up=True, name="bufferize").src
  assert all(u.op is Ops.BUFFER and u.tag is None for u in out)
  assert out[0] is sim.buffer_uop(("ring", "COMPUTE:0"), dtypes.uint32, 0) and out[1] is sim.buffer_uop(("doorbell", "COPY:0"), dtypes.uint64, 1)
  assert graph_rewrite(ring, pm_bufferize, sim, name="bufferize") is out[0]   # the same buffer for every schedule
  bufs = [b for u in out if (b := sim.buffer_of(u)) is not None]
  assert [b.nbytes for b in bufs] == [4096, 8, 24, 24] and bufs[2] is not bufs[3]
  assert bufs[0] is sim.queue("COMPUTE:0").buffers["ring"]
