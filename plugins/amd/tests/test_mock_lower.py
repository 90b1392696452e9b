"""pm_lower end to end: queue IR commands -> INS -> patches resolved -> MOCK processor -> the effects the IR asked for."""
from __future__ import annotations
import struct
import pytest
from core.device.hcq import EncodeCtx, HCQDevice
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from core.hcq import queue_ir as qir
from plugin_amd.lower import pm_lower, resolve_ins, lower_command, eval_patch
from plugin_amd.mock_cp import AddressSpace, Actions, MockQueue, PM4Processor, SDMAProcessor, PacketError
from plugin_amd.prep import AMDProgramData
from plugin_amd.runtime import AMDHCQ

def encode_ctx(arch: str, queue: str) -> EncodeCtx:
  """What core's encode stage passes pm_lower: the device's HCQ object and the submit's device and queue."""
  return EncodeCtx(AMDHCQ("AMD", arch), "AMD", queue)

class Env:
  """Device memory with an address for every buffer UOp the commands mention."""
  def __init__(self, arch: str, kind: str, timeout_s: float = 2.0):
    self.arch, self.mem = arch, AddressSpace()
    self.dispatches: list = []
    self.actions = Actions(self.mem, on_dispatch=self.dispatches.append, timeout_s=timeout_s)
    self.proc = PM4Processor(arch, self.mem, self.actions) if kind == "COMPUTE" else SDMAProcessor(arch, self.mem, self.actions)
    self.q = MockQueue(self.proc, 1 << 16)
    self.addrs: dict[UOp, tuple[int, bytearray]] = {}
    self.queue = f"{kind}:0"
  def buf(self, u: UOp, size: int) -> UOp:
    self.addrs[u] = self.mem.alloc(size, 256)
    return u
  def addr(self, u: UOp) -> int: return self.addrs[u][0]
  def host(self, u: UOp) -> bytearray: return self.addrs[u][1]
  def run(self, cmds: list[UOp], tv: int = 0) -> list[UOp]:
    ctx = encode_ctx(self.arch, self.queue)
    out = []
    for cmd in cmds:   # as core's encode stage: one command at a time, bottom up
      ins = graph_rewrite(cmd, pm_lower, ctx, bottom_up=True)
      assert ins.op is Ops.INS
      self.q.submit(resolve_ins(ins, self.addr, {("timeline", self.queue, "AMD"): tv}))
      out.append(ins)
    return out

def placeholder(kind, size=64): return qir.placeholder(kind, "AMD", size)
def data(arch: str, **kw) -> AMDProgramData:
  base = dict(name="k", kernarg_size=16, kernarg_align=8, arg_offsets=(0, 8), arch=arch, entry_offset=0x100, rsrc1=0x00AF0041,
              rsrc2=0x0000138C, rsrc3=0x3, wave_size=64 if arch.startswith("gfx9") else 32, kernel_code_properties=1 << 3)
  return AMDProgramData(**{**base, **kw})

@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"])
def test_launch_dispatches_the_encoded_program(arch):
  env = Env(arch, "COMPUTE")
  image, kernargs = env.buf(placeholder("program", 4096), 4096), env.buf(placeholder("kernargs"), 64)
  prog = qir.prepared_program("AMD", image, data(arch))
  env.run([qir.launch(prog, kernargs, (12, 3, 2), (32, 4, 1))])
  (d,) = env.dispatches
  assert d.pgm_addr == env.addr(image) + 0x100
  assert (d.grid, d.block, d.kernarg_addr, d.wave32) == ((12, 3, 2), (32, 4, 1), env.addr(kernargs), not arch.startswith("gfx9"))
  assert (d.registers["COMPUTE_PGM_RSRC1"], d.registers["COMPUTE_PGM_RSRC2"], d.registers["COMPUTE_PGM_RSRC3"]) == (0x00AF0041, 0x138C, 3)
  assert d.registers["COMPUTE_TMPRING_SIZE"] == 0
  assert [n for _, n in env.proc.packets][0] == "ACQUIRE_MEM" and [n for _, n in env.proc.packets][-1] == "DISPATCH_DIRECT"

def test_launch_patches_are_addresses_not_baked_constants():
  image, kernargs = placeholder("program", 4096), placeholder("kernargs")
  ins = lower_command(qir.launch(qir.prepared_program("AMD", image, data("gfx1100")), kernargs, (1, 1, 1), (1, 1, 1)), "COMPUTE:0", "gfx1100")
  # the code address (>> 8, over PGM_LO/HI) and the kernarg pointer (USER_DATA_0/1) are the two patches
  assert len(ins.src) == 2 and all(v.dtype is dtypes.uint64 for v in ins.src)
  addrs = {image: 0x12_3456_0000, kernargs: 0x9_0000_0040}
  assert [eval_patch(v, addrs.__getitem__) for v in ins.src] == [(0x12_3456_0000 + 0x100) >> 8, 0x9_0000_0040]

def test_launch_with_symbolic_grid_patches_uint32_dims():
  image, kernargs = placeholder("program", 4096), placeholder("kernargs")
  n = UOp(Ops.DEFINE_VAR, dtypes.int32, arg=("n", 1, 100))
  ins = lower_command(qir.launch(qir.prepared_program("AMD", image, data("gfx1100")), kernargs, (n, 1, 1), (1, 1, 1)), "COMPUTE:0", "gfx1100")
  dims = [v for v in ins.src if v.dtype is dtypes.uint32]
  assert len(dims) == 1 and eval_patch(dims[0], lambda b: 0, {("n", 1, 100): 17}) == 17

@pytest.mark.parametrize("arch", ["gfx942", "gfx1100", "gfx1201"])
def test_compute_signal_wait_timestamp_barrier(arch):
  env = Env(arch, "COMPUTE")
  mine = env.buf(qir.queue_buffer("timeline_signal", "COMPUTE:0", "AMD"), 8)
  other = env.buf(qir.queue_buffer("timeline_signal", "COPY:0", "AMD"), 8)
  ts = env.buf(placeholder("scratch", 8), 8)
  struct.pack_into("<Q", env.host(other), 0, 41)
  tv = qir.timeline("COMPUTE:0", "AMD")
  env.run([qir.wait(other, qir.u64(41)), qir.barrier(), qir.timestamp(ts), qir.signal(mine, tv + qir.u64(1))], tv=1000)
  assert struct.unpack("<Q", env.host(mine))[0] == 1001
  assert struct.unpack("<Q", env.host(ts))[0] > 0
  assert [n for _, n in env.proc.packets] == ["WAIT_REG_MEM", "EVENT_WRITE", "ACQUIRE_MEM", "RELEASE_MEM", "RELEASE_MEM"]

def test_compute_wait_really_waits():
  env = Env("gfx1100", "COMPUTE", timeout_s=0.05)
  other = env.buf(qir.queue_buffer("timeline_signal", "COPY:0", "AMD"), 8)
  with pytest.raises(PacketError, match=r"WAIT_REG_MEM.*needs >= 0x7"): env.run([qir.wait(other, qir.u64(7))])

@pytest.mark.parametrize("arch", ["gfx90a", "gfx1100", "gfx1201"])
def test_copy_queue_copy_signal_wait_timestamp(arch):
  env = Env(arch, "COPY")
  n = 0x400000 + 300
  src, dst = env.buf(UOp(Ops.BUFFER, dtypes.uint8, (UOp(Ops.UNIQUE, arg=-1), UOp(Ops.DEVICE, arg="AMD")), n), n), \
             env.buf(UOp(Ops.BUFFER, dtypes.uint8, (UOp(Ops.UNIQUE, arg=-2), UOp(Ops.DEVICE, arg="AMD")), n), n)
  env.host(src)[:] = bytes(i * 7 % 251 for i in range(n))
  mine = env.buf(qir.queue_buffer("timeline_signal", "COPY:0", "AMD"), 8)
  other = env.buf(qir.queue_buffer("timeline_signal", "COMPUTE:0", "AMD"), 8)
  ts = env.buf(placeholder("scratch", 8), 8)
  struct.pack_into("<Q", env.host(other), 0, 3)
  tv = qir.timeline("COPY:0", "AMD")
  env.run([qir.wait(other, qir.u64(3)), qir.copy(dst, src, n), qir.barrier(), qir.timestamp(ts), qir.signal(mine, tv + qir.u64(2))],
          tv=0x1_0000_0000)
  assert env.host(dst) == env.host(src)
  assert struct.unpack("<Q", env.host(mine))[0] == 0x1_0000_0002
  assert [n for _, n in env.proc.packets] == ["POLL_REGMEM", "COPY", "COPY", "NOP", "TIMESTAMP", "FENCE", "FENCE"]

def test_each_command_is_encoded_for_the_submits_queue():
  # the same command is a PM4 packet on COMPUTE:0 and an SDMA packet on COPY:0: the queue is the submit's (ctx.queue)
  sig = qir.queue_buffer("timeline_signal", "COPY:0", "AMD")
  def header(cmd: UOp, queue: str) -> int:
    ins = graph_rewrite(cmd, pm_lower, encode_ctx("gfx1100", queue), bottom_up=True)
    assert ins.op is Ops.INS
    return struct.unpack_from("<I", ins.arg[0])[0]
  pm4_op, sdma_op = lambda h: h >> 8 & 0xFF, lambda h: h & 0xFF
  assert pm4_op(header(qir.signal(sig, qir.u64(1)), "COMPUTE:0")) == 0x49 and sdma_op(header(qir.signal(sig, qir.u64(1)), "COPY:0")) == 5
  assert pm4_op(header(qir.wait(sig, qir.u64(1)), "COMPUTE:0")) == 0x3C and sdma_op(header(qir.wait(sig, qir.u64(1)), "COPY:0")) == 8
  assert pm4_op(header(qir.barrier(), "COMPUTE:0")) == 0x46 and header(qir.barrier(), "COPY:0") == 0   # EVENT_WRITE, SDMA NOP
  assert pm4_op(header(qir.timestamp(sig), "COMPUTE:0")) == 0x49 and sdma_op(header(qir.timestamp(sig), "COPY:0")) == 13

def test_lowering_needs_the_amd_hcq_object():
  class Other(HCQDevice):
    queues = ("COMPUTE:0",)
    def ring_size(self, queue): return 4096
    def wait_signal(self, signal, value, timeout_s): pass
  with pytest.raises(TypeError, match="its HCQ object is a Other, not an AMDHCQ"):
    graph_rewrite(qir.barrier(), pm_lower, EncodeCtx(Other(), "AMD", "COMPUTE:0"), bottom_up=True)

def test_lowering_errors():
  image, kernargs = placeholder("program", 4096), placeholder("kernargs")
  launch = qir.launch(qir.prepared_program("AMD", image, data("gfx1100")), kernargs, (1, 1, 1), (1, 1, 1))
  with pytest.raises(ValueError, match="launch on copy queue COPY:0"): lower_command(launch, "COPY:0", "gfx1100")
  with pytest.raises(ValueError, match="copy on compute queue"): lower_command(qir.copy(image, kernargs, 4), "COMPUTE:0", "gfx1100")
  with pytest.raises(ValueError, match="below 2\\*\\*32"): lower_command(qir.wait(image, qir.u64(1 << 32)), "COMPUTE:0", "gfx1100")
  with pytest.raises(ValueError, match="wave32 program on gfx9"):
    lower_command(qir.launch(qir.prepared_program("AMD", image, data("gfx942", wave_size=32)), kernargs, (1,), (1,)), "COMPUTE:0", "gfx942")
  with pytest.raises(NotImplementedError, match="dispatch_ptr"):
    lower_command(qir.launch(qir.prepared_program("AMD", image, data("gfx1100", kernel_code_properties=0b1010)), kernargs, (1,), (1,)),
                  "COMPUTE:0", "gfx1100")
  with pytest.raises(NotImplementedError, match="scratch"):
    lower_command(qir.launch(qir.prepared_program("AMD", image, data("gfx1100", scratch_size=64)), kernargs, (1,), (1,)), "COMPUTE:0", "gfx1100")
