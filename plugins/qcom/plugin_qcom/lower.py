"""pm_lower for QCOM: queue IR commands -> INS (A6xx PM4 words) with patches for addresses and timeline values.

Signals and waits: CP_EVENT_WRITE(CACHE_FLUSH_TS) writes a 32-bit value once everything before it is done, and
CP_WAIT_REG_MEM compares 32 bits, so a 64-bit timeline signal gets its high dword from a CP_MEM_WRITE just before and
waits compare the low dword (timeline values stay below 2**32, four billion submits)."""
from __future__ import annotations
from core.device.hcq import EncodeCtx
from core.ir.ops import UOp, Ops
from core.hcq.queue_ir import Words, lower_each_command, const_value, getaddr, hi32, lo32
from plugin_qcom import descriptors, pm4, regs
from plugin_qcom.prep import QCOMProgramData


def lower_launch(cmd: UOp) -> UOp:
  """LAUNCH(PROGRAM(image), kernargs): compute mode, shader registers, the NDRANGE, the shader and the argument constants
  (CP_LOAD_STATE6_FRAG, indirect from memory), then CP_EXEC_CS with the work-group counts."""
  prog, kernargs = cmd.src[0], cmd.src[1]
  data, image = prog.arg, prog.src[1]
  if not isinstance(data, QCOMProgramData): raise TypeError(f"QCOM launch of a program prepared as {type(data).__name__}, not QCOMProgramData")
  gs, ls = (tuple(x) + (1,) * (3 - len(x)) for x in cmd.arg)
  if not all(isinstance(x, int) and x > 0 for x in gs + ls): raise ValueError(f"{data.name}: global {gs} and local {ls} must be positive ints")
  code = getaddr(image, data.code_offset)
  w = Words()
  w.add(pm4.set_marker(pm4.RM6_COMPUTE))
  w.add(pm4.pkt4(regs.SP_CS_CTRL_REG0, [regs.cs_ctrl_reg0(data.full_regs, data.half_regs)]))
  w.add(pm4.pkt4(regs.SP_CS_CONFIG, [regs.cs_config(len(data.read_images), 1 if data.read_images else 0, len(data.written_images))]))
  w.add(pm4.pkt4(regs.HLSQ_CS_CNTL, [regs.HLSQ_CS_CNTL_ENABLED | -(-(data.const_offset + data.const_units) // 4)]))
  at = w.add(pm4.pkt4(regs.SP_CS_OBJ_START, [0, 0]))
  w.set(at + 1, code, 8)
  w.add(pm4.pkt4(regs.SP_CS_INSTRLEN, [data.instrlen]))
  w.add(pm4.pkt4(regs.HLSQ_CS_NDRANGE_0, [regs.ndrange_0(ls), gs[0] * ls[0], 0, gs[1] * ls[1], 0, gs[2] * ls[2], 0]))
  w.add(pm4.pkt4(regs.HLSQ_CS_KERNEL_GROUP_X, [1, 1, 1]))
  at = w.add(pm4.load_state6(pm4.ST6_SHADER, pm4.SS6_INDIRECT, pm4.SB6_CS_SHADER, data.code_units))
  w.set(at + pm4.LOAD_STATE6_ADDR_DW, code, 8)
  if data.immediates: write_immediates(w, data, kernargs)
  at = w.add(pm4.load_state6(pm4.ST6_CONSTANTS, pm4.SS6_INDIRECT, pm4.SB6_CS_SHADER, data.const_units, dst_off=data.const_offset))
  w.set(at + pm4.LOAD_STATE6_ADDR_DW, getaddr(kernargs), 8)
  if data.images: bind_images(w, data, kernargs)
  w.add(pm4.exec_cs(gs))   # type: ignore[arg-type]
  return w.ins()

def write_immediates(w: Words, data: QCOMProgramData, kernargs: UOp) -> None:
  """The constants a driver binary's code expects (adreno_binary.py) written into the kernarg buffer before it is loaded, one
  CP_MEM_WRITE per dword (2-byte values share their dword)."""
  dwords: dict[int, int] = {}
  for off, n, v in data.immediates: dwords[off // 4] = dwords.get(off // 4, 0) | (v & ((1 << 8 * n) - 1)) << 8 * (off % 4)
  for dw, v in sorted(dwords.items()):
    at = w.add(pm4.mem_write(0, [v]))
    w.set(at + pm4.MEM_WRITE_ADDR_DW, getaddr(kernargs, 4 * dw), 8)
  w.add(pm4.wait_for_me())   # the writes land before the constants load reads them

def bind_images(w: Words, data: QCOMProgramData, kernargs: UOp) -> None:
  """The descriptors of a kernel's images go into its kernarg buffer after the constants (their BASE dwords hold the images'
  addresses, stored there by the kernarg patches): CP_MEM_WRITE of the other dwords and the sampler, then CP_LOAD_STATE6 of
  the read images' descriptors (ST6_CONSTANTS into SB6_CS_TEX), the sampler (ST6_SHADER into SB6_CS_TEX) and the written
  images' (ST6_IBO into SB6_CS_SHADER), as freedreno binds a compute shader's textures and storage images."""
  tex, base = data.tex_offset, descriptors.BASE_DW
  for k, im in enumerate(data.read_images + data.written_images):
    desc = descriptors.tex_const(im.height, im.width, im.half)
    for lo, hi in ((0, base), (base + 2, descriptors.TEX_DWORDS)):
      at = w.add(pm4.mem_write(0, desc[lo:hi]))
      w.set(at + pm4.MEM_WRITE_ADDR_DW, getaddr(kernargs, tex + 4 * (descriptors.TEX_DWORDS * k + lo)), 8)
  at = w.add(pm4.mem_write(0, descriptors.sampler()))
  w.set(at + pm4.MEM_WRITE_ADDR_DW, getaddr(kernargs, data.sampler_offset), 8)
  w.add(pm4.wait_for_me())   # the writes land before the state loads read them
  nread = len(data.read_images)
  loads = [(pm4.ST6_CONSTANTS, pm4.SB6_CS_TEX, nread, tex), (pm4.ST6_SHADER, pm4.SB6_CS_TEX, 1, data.sampler_offset),
           (pm4.ST6_IBO, pm4.SB6_CS_SHADER, len(data.written_images), tex + 4 * descriptors.TEX_DWORDS * nread)]
  for st, sb, n, off in loads:
    if n == 0: continue
    at = w.add(pm4.load_state6(st, pm4.SS6_INDIRECT, sb, n))
    w.set(at + pm4.LOAD_STATE6_ADDR_DW, getaddr(kernargs, off), 8)
  # the shader finds them through these registers (as freedreno programs them for a compute shader's textures and IBOs)
  bases = [(regs.SP_CS_TEX_CONST, nread, tex), (regs.SP_CS_TEX_SAMP, 1 if nread else 0, data.sampler_offset),
           (regs.SP_CS_IBO, len(data.written_images), tex + 4 * descriptors.TEX_DWORDS * nread)]
  for reg, n, off in bases:
    if n == 0: continue
    at = w.add(pm4.pkt4(reg, [0, 0]))
    w.set(at + 1, getaddr(kernargs, off), 8)
  w.add(pm4.pkt4(regs.SP_CS_TEX_COUNT, [nread]))
  w.add(pm4.pkt4(regs.SP_CS_IBO_COUNT, [len(data.written_images)]))

def lower_signal(signal: UOp, value: UOp) -> UOp:
  v = const_value(value)
  w = Words()
  hi = w.add(pm4.mem_write(0, [0]))
  w.set(hi + pm4.MEM_WRITE_ADDR_DW, getaddr(signal, 4), 8)
  w.set(hi + pm4.MEM_WRITE_DATA_DW, hi32(v), 4)
  ev = w.add(pm4.event_write(pm4.CACHE_FLUSH_TS))
  w.set(ev + pm4.EVENT_ADDR_DW, getaddr(signal), 8)
  w.set(ev + pm4.EVENT_VALUE_DW, lo32(v), 4)
  return w.ins()

def lower_wait(signal: UOp, value: UOp) -> UOp:
  v = const_value(value)
  if isinstance(v, int) and not 0 <= v < 1 << 32: raise ValueError(f"wait value {v:#x}: CP_WAIT_REG_MEM compares 32 bits")
  w = Words()
  at = w.add(pm4.wait_reg_mem(0, 0))
  w.set(at + pm4.WAIT_ADDR_DW, getaddr(signal), 8)
  w.set(at + pm4.WAIT_REF_DW, lo32(v), 4)
  return w.ins()

def lower_timestamp(buf: UOp) -> UOp:
  w = Words()
  at = w.add(pm4.event_write(pm4.CACHE_FLUSH_TS, timestamp=True))
  w.set(at + pm4.EVENT_ADDR_DW, getaddr(buf), 8)
  return w.ins()

def lower_barrier() -> UOp:
  w = Words()
  w.add(pm4.wait_for_idle())
  return w.ins()

def lower_copy(dest: UOp, src: UOp, nbytes: int) -> UOp:
  """CP_MEMCPY copies whole dwords: a size that is not a multiple of 4 is rounded up, which stays inside both buffers because
  every QCOM allocation is a multiple of 256 bytes (iface_mock.ALIGN) and core copies whole buffers."""
  w = Words()
  at = w.add(pm4.memcpy(-(-nbytes // 4), 0, 0))
  w.set(at + pm4.MEMCPY_SRC_DW, getaddr(src), 8)
  w.set(at + pm4.MEMCPY_DST_DW, getaddr(dest), 8)
  return w.ins()

def lower_command(cmd: UOp, queue: str = "COMPUTE:0") -> UOp:
  """The INS for one queue command (QCOM has one queue kind: COMPUTE, which also copies)."""
  if not queue.startswith("COMPUTE"): raise ValueError(f"QCOM has only COMPUTE:n queues, not {queue!r}")
  if cmd.op is Ops.LAUNCH: return lower_launch(cmd)
  if cmd.op is Ops.SIGNAL: return lower_signal(cmd.src[0], cmd.src[1])
  if cmd.op is Ops.WAIT: return lower_wait(cmd.src[0], cmd.src[1])
  if cmd.op is Ops.TIMESTAMP: return lower_timestamp(cmd.src[0])
  if cmd.op is Ops.BARRIER: return lower_barrier()
  if cmd.op is Ops.COPY: return lower_copy(cmd.src[0], cmd.src[1], cmd.arg)
  raise ValueError(f"QCOM pm_lower: no lowering for {cmd.op.name}")

def _lower(ctx: EncodeCtx, cmd: UOp) -> UOp: return lower_command(cmd, ctx.queue)

# the HCQ contract's pm_lower (ctx: core.device.hcq.EncodeCtx)
pm_lower = lower_each_command(_lower, "lower QCOM queue commands")
