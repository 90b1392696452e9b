"""pm_lower for AMD: queue IR commands -> INS (PM4 words on COMPUTE queues, SDMA words on COPY queues) with patches."""
from __future__ import annotations
from typing import Any, Callable
from core.device.hcq import EncodeCtx
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.hcq.queue_ir import Words, lower_each_command, const_value, hi32, lo32
from plugin_amd import pm4, sdma
from plugin_amd.prep import AMDProgramData, USER_SGPRS
from plugin_amd.runtime import AMDHCQ
from plugin_amd.regs import gen_of, sh_offset, NUM_USER_DATA, DISPATCH_INITIATOR_COMPUTE_SHADER_EN, \
  DISPATCH_INITIATOR_FORCE_START_AT_000, DISPATCH_INITIATOR_CS_W32_EN

# Patch values follow the HCQ contract (CONST, GETADDR(buf)+c, timeline value + k) plus two forms the hardware needs:
# SHR by a constant (COMPUTE_PGM_LO/HI and the scratch base hold address >> 8, written as one 64-bit patch over the
# LO/HI register pair) and CAST to uint32 (the 32-bit reference of a wait, the halves of an SDMA 64-bit signal).
# Waits compare the low 32 bits of a signal (WAIT_REG_MEM/POLL_REGMEM are 32-bit compares): timeline values must stay
# below 2**32, which a per-submit increment reaches after four billion submits.

def getaddr(buf: UOp) -> UOp: return buf if buf.op is Ops.GETADDR else UOp(Ops.GETADDR, dtypes.uint64, (buf,))

def _check_wait_value(v: Any) -> None:
  if isinstance(v, int) and not 0 <= v < 1 << 32:
    raise ValueError(f"wait value {v:#x}: AMD waits compare 32 bits, so timeline values must stay below 2**32")

# *** compute queue (PM4) ***

def _user_sgprs(props: int, kernargs: UOp, w: Words) -> tuple[list[int], Callable[[int], None]]:
  """The COMPUTE_USER_DATA values for the enabled kernel inputs, and a hook placing the kernarg patch once emitted."""
  values: list[int] = []
  kernarg_index = -1
  for bit, (name, n) in enumerate(USER_SGPRS):
    if not props & (1 << bit): continue
    if name == "kernarg_segment_ptr": kernarg_index = len(values)
    elif name != "dispatch_id":
      raise NotImplementedError(f"AMD kernel asks for user SGPR input {name!r} (kernel_code_properties bit {bit}); the PM4 launch "
                                "provides only kernarg_segment_ptr and dispatch_id")
    values += [0] * n
  if len(values) > NUM_USER_DATA: raise ValueError(f"{len(values)} user SGPRs exceed COMPUTE_USER_DATA_0..{NUM_USER_DATA - 1}")
  def place(start_dw: int) -> None:
    if kernarg_index >= 0: w.set(start_dw + pm4.SET_SH_REG_VALUES_DW + kernarg_index, getaddr(kernargs), 8)
  return values, place

def lower_launch(gen: str, cmd: UOp, hcq: AMDHCQ | None = None) -> UOp:
  """PROGRAM(prog, kernargs) -> cache invalidate, program/resource/thread/user registers, DISPATCH_DIRECT. `hcq` sets up
  scratch for a kernel that needs it (None: such a kernel is refused)."""
  prog, kernargs = cmd.src[0], cmd.src[1]
  global_size, local_size = (tuple(x) + (1,) * (3 - len(x)) for x in cmd.arg)
  data, image = prog.arg, prog.src[1]
  if not isinstance(data, AMDProgramData):
    raise TypeError(f"AMD launch of a program prepared as {type(data).__name__}, not AMDProgramData (by plugin_amd.prep)")
  entry, rsrc1, rsrc2, rsrc3, wave32, scratch = data.entry_offset, data.rsrc1, data.rsrc2, data.rsrc3, data.wave32, data.scratch_size
  props = data.kernel_code_properties
  if wave32 and gen == "gfx9": raise ValueError(f"{data.name}: wave32 program on gfx9, which runs wave64 only")
  if not all(isinstance(x, int) and x > 0 for x in local_size): raise ValueError(f"local size {local_size} must be positive ints")
  w = Words()
  w.add(pm4.acquire_mem(gen))
  pgm = w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_PGM_LO"), [0, 0]))
  w.set(pgm + pm4.SET_SH_REG_VALUES_DW, ((getaddr(image) + entry) if entry else getaddr(image)) >> 8, 8)   # PGM_LO/HI = code address >> 8
  w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_PGM_RSRC1"), [rsrc1, rsrc2]))
  w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_PGM_RSRC3"), [rsrc3]))
  if scratch:
    if hcq is None: raise NotImplementedError(f"{data.name} needs {scratch} bytes of scratch; lowered without the device's HCQ object, which sets it up")
    w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_TMPRING_SIZE"), [hcq.tmpring_size(scratch)]))
    sb = w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_DISPATCH_SCRATCH_BASE_LO"), [0, 0]))
    w.set(sb + pm4.SET_SH_REG_VALUES_DW, getaddr(hcq.scratch) >> 8, 8)
  else: w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_TMPRING_SIZE"), [0]))
  w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_RESOURCE_LIMITS"), [0]))
  w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_START_X"), [0, 0, 0, *local_size]))
  user, place = _user_sgprs(props, kernargs, w)
  if user: place(w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_USER_DATA_0"), user)))
  initiator = DISPATCH_INITIATOR_COMPUTE_SHADER_EN | DISPATCH_INITIATOR_FORCE_START_AT_000 | (DISPATCH_INITIATOR_CS_W32_EN if wave32 else 0)
  d = w.add(pm4.dispatch_direct((1, 1, 1), initiator))
  for i, g in enumerate(global_size): w.set(d + pm4.DISPATCH_DIM_DW + i, g, 4)
  return w.ins()

def _lower_wait(packet: list[int], addr_dw: int, ref_dw: int, signal: UOp, value: UOp) -> UOp:
  """A memory poll until the signal's low dword >= value: WAIT_REG_MEM (PM4) or POLL_REGMEM (SDMA), same patches."""
  w = Words()
  at = w.add(packet)
  _check_wait_value(v := const_value(value))
  w.set(at + addr_dw, getaddr(signal), 8)
  w.set(at + ref_dw, lo32(v), 4)
  return w.ins()

def lower_compute_wait(gen: str, signal: UOp, value: UOp) -> UOp:
  return _lower_wait(pm4.wait_reg_mem(0, 0), pm4.WAIT_ADDR_DW, pm4.WAIT_REF_DW, signal, value)

def lower_compute_signal(gen: str, signal: UOp, value: UOp) -> UOp:
  w = Words()
  at = w.add(pm4.release_mem(gen, 0, 0, data_sel=pm4.DATA_SEL_64))
  w.set(at + pm4.RELEASE_ADDR_DW, getaddr(signal), 8)
  w.set(at + pm4.RELEASE_DATA_DW, const_value(value), 8)
  return w.ins()

def lower_compute_timestamp(gen: str, buf: UOp) -> UOp:
  w = Words()
  at = w.add(pm4.release_mem(gen, 0, data_sel=pm4.DATA_SEL_GPU_CLOCK, event_type=pm4.BOTTOM_OF_PIPE_TS, cache_flush=False))
  w.set(at + pm4.RELEASE_ADDR_DW, getaddr(buf), 8)
  return w.ins()

def lower_compute_barrier(gen: str) -> UOp:
  """Wait for earlier dispatches (CS_PARTIAL_FLUSH), then invalidate caches so later ones see their writes."""
  w = Words()
  w.add(pm4.event_write(pm4.CS_PARTIAL_FLUSH, pm4.EVENT_INDEX_CS_PARTIAL_FLUSH))
  w.add(pm4.acquire_mem(gen))
  return w.ins()

# *** copy queue (SDMA) ***

def lower_copy(gen: str, dest: UOp, src: UOp, nbytes: int) -> UOp:
  w = Words()
  for off, n in sdma.copy_chunks(gen, nbytes):
    at = w.add(sdma.copy_linear_one(gen, 0, 0, n))
    w.set(at + sdma.COPY_SRC_DW, getaddr(src) + off if off else getaddr(src), 8)
    w.set(at + sdma.COPY_DST_DW, getaddr(dest) + off if off else getaddr(dest), 8)
  return w.ins()

def lower_sdma_wait(gen: str, signal: UOp, value: UOp) -> UOp:
  return _lower_wait(sdma.poll_regmem(0, 0), sdma.POLL_ADDR_DW, sdma.POLL_VALUE_DW, signal, value)

def lower_sdma_signal(gen: str, signal: UOp, value: UOp) -> UOp:
  """Two FENCEs, high dword first (sdma.fence64 says why)."""
  w = Words()
  v = const_value(value)
  hi, lo = w.add(sdma.fence(0, 0)), w.add(sdma.fence(0, 0))
  w.set(hi + sdma.FENCE_ADDR_DW, getaddr(signal) + 4, 8)
  w.set(hi + sdma.FENCE_DATA_DW, hi32(v), 4)
  w.set(lo + sdma.FENCE_ADDR_DW, getaddr(signal), 8)
  w.set(lo + sdma.FENCE_DATA_DW, lo32(v), 4)
  return w.ins()

def lower_sdma_timestamp(gen: str, buf: UOp) -> UOp:
  w = Words()
  at = w.add(sdma.timestamp(0))
  w.set(at + sdma.TIMESTAMP_ADDR_DW, getaddr(buf), 8)
  return w.ins()

def lower_sdma_barrier(gen: str) -> UOp:
  """The SDMA engine runs packets in order and each copy completes before the next packet; a NOP keeps one INS."""
  w = Words()
  w.add(sdma.nop(1))
  return w.ins()

# *** one command, the matcher ***


def lower_command(cmd: UOp, queue: str, arch: str, hcq: AMDHCQ | None = None) -> UOp:
  """The INS for one queue command on `queue` ("COMPUTE:n" or "COPY:n") of an `arch` device (`hcq`: for scratch setup)."""
  gen, kind = gen_of(arch), queue.split(":")[0]
  if cmd.op is Ops.INS: return cmd
  if kind not in ("COMPUTE", "COPY"): raise ValueError(f"unknown queue {queue!r}: AMD has COMPUTE:n and COPY:n queues")
  compute = kind == "COMPUTE"
  if cmd.op is Ops.WAIT: return (lower_compute_wait if compute else lower_sdma_wait)(gen, cmd.src[0], cmd.src[1])
  if cmd.op is Ops.SIGNAL: return (lower_compute_signal if compute else lower_sdma_signal)(gen, cmd.src[0], cmd.src[1])
  if cmd.op is Ops.BARRIER: return (lower_compute_barrier if compute else lower_sdma_barrier)(gen)
  if cmd.op is Ops.TIMESTAMP: return (lower_compute_timestamp if compute else lower_sdma_timestamp)(gen, cmd.src[0])
  if cmd.op is Ops.LAUNCH:
    if not compute: raise ValueError(f"kernel launch on copy queue {queue}: launches go to a COMPUTE queue")
    return lower_launch(gen, cmd, hcq)
  if cmd.op is Ops.COPY:
    if compute: raise ValueError(f"copy on compute queue {queue}: AMD copies go to a COPY (SDMA) queue")
    return lower_copy(gen, cmd.src[0], cmd.src[1], cmd.arg)
  raise ValueError(f"AMD pm_lower: no lowering for {cmd.op.name} (arg {cmd.arg!r}) on {queue}")

def _lower(ctx: EncodeCtx, cmd: UOp) -> UOp:
  # core's encode stage names the submit's queue; the arch is the device's own
  if not isinstance(ctx.hcq, AMDHCQ): raise TypeError(f"AMD pm_lower for {ctx.device}: its HCQ object is a {type(ctx.hcq).__name__}, not an AMDHCQ")
  return lower_command(cmd, ctx.queue, ctx.hcq.arch, ctx.hcq)

# the HCQ contract's pm_lower: each abstract command -> the words of its queue's engine (ctx: core.device.hcq.EncodeCtx)
pm_lower = lower_each_command(_lower, "lower AMD queue commands")

# *** resolving patches (what core's resolve stage does; used by the MOCK interface's tests) ***

def eval_patch(v: UOp, addr_of: Callable[[UOp], int], var_vals: dict[Any, int] | None = None) -> int:
  """The integer value of a patch UOp, given device addresses of buffers and values of timeline variables."""
  if v.op is Ops.CONST: return int(v.arg)
  if v.op is Ops.GETADDR: return addr_of(v.src[0])
  if v.op is Ops.DEFINE_VAR:
    if var_vals is None or v.arg not in var_vals: raise KeyError(f"no value for variable {v.arg!r}")
    return var_vals[v.arg]
  args = [eval_patch(s, addr_of, var_vals) for s in v.src]
  bits = 8 * v.dtype.itemsize
  if v.op is Ops.CAST: return args[0] & ((1 << bits) - 1)
  ops: dict[Ops, Callable[..., int]] = {Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.SHR: lambda a, b: a >> b,
                                        Ops.SHL: lambda a, b: a << b, Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b}
  if v.op not in ops: raise ValueError(f"patch value op {v.op.name} is not evaluable")
  return ops[v.op](*args) & ((1 << bits) - 1)

def resolve_ins(ins: UOp, addr_of: Callable[[UOp], int], var_vals: dict[Any, int] | None = None) -> bytes:
  """An INS's bytes with every patch written (little endian, the value's dtype width)."""
  data, offsets = bytearray(ins.arg[0]), ins.arg[1]
  for v, off in zip(ins.src, offsets):
    n = v.dtype.itemsize
    data[off:off + n] = eval_patch(v, addr_of, var_vals).to_bytes(n, "little")
  return bytes(data)
