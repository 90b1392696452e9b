"""pm_lower for NV: queue IR commands -> pushbuffer methods (INS with patches) for one GPFIFO channel per queue.

COMPUTE:n channels carry the compute class on subchannel 1, COPY:n channels the copy class on subchannel 4 (the interface binds
them with SET_OBJECT when it creates the channel); semaphores are host methods, the same on both. What each command becomes:
- LAUNCH: the QMD (qmd.py) is written by inline-to-memory (LINE_LENGTH_IN, LINE_COUNT, OFFSET_OUT_UPPER/OFFSET_OUT, LAUNCH_DMA,
  LOAD_INLINE_DATA) into the launch's kernarg buffer, right after constant bank 0, at a 256-byte aligned address; then SEND_PCAS_A
  with that address >> 8 and SEND_SIGNALING_PCAS_B (INVALIDATE | SCHEDULE) on Ampere/Ada, SEND_SIGNALING_PCAS2_B
  (INVALIDATE_COPY_SCHEDULE) on Hopper and Blackwell. The QMD's program and constant-buffer addresses are patches.
- WAIT: SEM_ADDR, SEM_PAYLOAD (64 bits), SEM_EXECUTE ACQ_STRICT_GEQ with a 64-bit payload: the channel waits until the
  signal >= value (all 64 bits compared).
- SIGNAL: the same methods with RELEASE, RELEASE_WFI (earlier work finishes first) and a 64-bit payload.
- TIMESTAMP: RELEASE with RELEASE_TIMESTAMP: a 16-byte report at the buffer, payload 0 then the time in ns at byte 8
  (NVHCQ.timestamp_size = 16 tells core's timestamps stage).
- BARRIER: compute WAIT_FOR_IDLE then INVALIDATE_SHADER_CACHES (instruction, data with flush, constant); copy: a NOP (the copy
  engine runs its LAUNCH_DMAs in order, each flushed).
- COPY: OFFSET_IN/OUT (upper dword first), LINE_LENGTH_IN, LAUNCH_DMA (1D pitch copy, non-pipelined, flushed), split at
  LINE_LENGTH_IN's 32-bit maximum."""
from __future__ import annotations
from math import prod
from typing import Any
from core.device.hcq import EncodeCtx
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.hcq.queue_ir import Words, lower_each_command, const_value, hi32, lo32
from plugin_nv import pushbuf as pb
from plugin_nv.prep import NVProgramData, QMD_ALIGN
from plugin_nv.runtime import NVHCQ
from plugin_nv.qmd import address_fields, address_slot, arch_info, build_qmd

def getaddr(buf: UOp) -> UOp: return buf if buf.op is Ops.GETADDR else UOp(Ops.GETADDR, dtypes.uint64, (buf,))
def _u64(v: int) -> UOp: return UOp.const(dtypes.uint64, v)
def _plus(a: UOp, off: int) -> UOp: return a + _u64(off) if off else a

# *** host methods: semaphores ***

def _semaphore(w: Words, addr: Any, payload: Any, execute: int) -> None:
  at = w.add(pb.incr(pb.SUBCH_HOST, pb.SEM_ADDR_LO, 0, 0, 0, 0, execute))
  w.set(at + 1, addr, 8)        # SEM_ADDR_LO, SEM_ADDR_HI: the address, little endian
  w.set(at + 3, payload, 8)     # SEM_PAYLOAD_LO, SEM_PAYLOAD_HI

def lower_wait(signal: UOp, value: UOp) -> UOp:
  w = Words()
  _semaphore(w, getaddr(signal), const_value(value), pb.SEM_OP_ACQ_STRICT_GEQ | pb.SEM_PAYLOAD_64BIT)
  return w.ins()

def lower_signal(signal: UOp, value: UOp) -> UOp:
  w = Words()
  _semaphore(w, getaddr(signal), const_value(value), pb.SEM_OP_RELEASE | pb.SEM_RELEASE_WFI | pb.SEM_PAYLOAD_64BIT)
  return w.ins()

def lower_timestamp(buf: UOp) -> UOp:
  w = Words()
  _semaphore(w, getaddr(buf), 0, pb.SEM_OP_RELEASE | pb.SEM_RELEASE_WFI | pb.SEM_PAYLOAD_64BIT | pb.SEM_RELEASE_TIMESTAMP)
  return w.ins()

# *** compute: launches and barriers ***

def qmd_address(kernargs: UOp, data: NVProgramData) -> UOp:
  """Where the launch's QMD goes: the first 256-byte aligned address at or past kernargs + qmd_offset (prep.kernarg_layout)."""
  return (_plus(getaddr(kernargs), data.qmd_offset + QMD_ALIGN - 1)) & _u64(~(QMD_ALIGN - 1) & (2**64 - 1))

def lower_launch(arch: str, cmd: UOp) -> UOp:
  prog, kernargs = cmd.src[0], cmd.src[1]
  grid, block = (tuple(x) + (1,) * (3 - len(x)) for x in cmd.arg)
  data, image = prog.arg, prog.src[1]
  if not isinstance(data, NVProgramData): raise TypeError(f"NV launch of a program prepared as {type(data).__name__}, not NVProgramData (plugin_nv.prep)")
  if data.arch and data.arch != arch: raise ValueError(f"{data.name}: built for {data.arch}, launched on an {arch} device")
  if not all(isinstance(x, int) and x > 0 for x in (*grid, *block)): raise ValueError(f"{data.name}: grid {grid} and block {block} must be positive ints")
  if data.max_threads and prod(block) > prod(data.max_threads):   # .maxntid/.reqntid bound the CTA's thread count
    raise ValueError(f"{data.name}: block {block} exceeds the kernel's thread limit {data.max_threads}")
  info = arch_info(arch)
  q = build_qmd(arch, data, grid, block)   # type: ignore[arg-type]
  qwords = q.words()
  w = Words()
  qaddr = qmd_address(kernargs, data)
  i2m = w.add(pb.incr(pb.SUBCH_COMPUTE, pb.C_LINE_LENGTH_IN, len(qwords) * 4, 1, 0, 0))
  w.set(i2m + 3, hi32(qaddr), 4)   # OFFSET_OUT_UPPER
  w.set(i2m + 4, lo32(qaddr), 4)   # OFFSET_OUT
  w.add(pb.incr(pb.SUBCH_COMPUTE, pb.C_LAUNCH_DMA, pb.C_LAUNCH_DMA_PITCH))
  body = w.add(pb.nonincr(pb.SUBCH_COMPUTE, pb.C_LOAD_INLINE_DATA, *qwords)) + 1
  # the QMD's addresses: the code, constant bank 0 (the kernarg buffer itself) and each extra bank in the image
  addrs = [_plus(getaddr(image), data.code_offset), getaddr(kernargs)] + [_plus(getaddr(image), off) for _, off, _ in data.const_banks]
  for (field, idx), addr in zip(address_fields(arch, data), addrs):
    dw, shift, _ = address_slot(info.qmd, field, idx)
    rest = qwords[dw] | qwords[dw + 1] << 32   # the fields sharing the two dwords (a constant buffer's size)
    v = (addr >> _u64(shift)) if shift else addr
    w.set(body + dw, v | _u64(rest) if rest else v, 8)
  pcas = w.add(pb.incr(pb.SUBCH_COMPUTE, pb.C_SEND_PCAS_A, 0))
  w.set(pcas + 1, (qaddr >> _u64(8)).cast(dtypes.uint32), 4)
  if info.qmd.major == 3: w.add(pb.incr(pb.SUBCH_COMPUTE, pb.C_SEND_SIGNALING_PCAS_B, pb.PCAS_B_INVALIDATE_SCHEDULE))
  else: w.add(pb.incr(pb.SUBCH_COMPUTE, pb.C_SEND_SIGNALING_PCAS2_B, pb.PCAS2_ACTION_INVALIDATE_COPY_SCHEDULE))
  return w.ins()

def lower_compute_barrier() -> UOp:
  w = Words()
  w.add(pb.incr(pb.SUBCH_COMPUTE, pb.C_WAIT_FOR_IDLE, 0))
  w.add(pb.incr(pb.SUBCH_COMPUTE, pb.C_INVALIDATE_SHADER_CACHES, pb.INVALIDATE_ALL_SHADER_CACHES))
  return w.ins()

# *** copy engine ***

def copy_chunks(nbytes: int, max_copy: int = pb.MAX_COPY) -> list[tuple[int, int]]:
  """(offset, length) of each LAUNCH_DMA of an nbytes copy."""
  return [(off, min(max_copy, nbytes - off)) for off in range(0, nbytes, max_copy)]

def lower_copy(dest: UOp, src: UOp, nbytes: int) -> UOp:
  w = Words()
  for off, n in copy_chunks(nbytes):
    at = w.add(pb.incr(pb.SUBCH_COPY, pb.D_OFFSET_IN_UPPER, 0, 0, 0, 0))
    s, d = _plus(getaddr(src), off), _plus(getaddr(dest), off)
    w.set(at + 1, hi32(s), 4)
    w.set(at + 2, lo32(s), 4)
    w.set(at + 3, hi32(d), 4)
    w.set(at + 4, lo32(d), 4)
    w.add(pb.incr(pb.SUBCH_COPY, pb.D_LINE_LENGTH_IN, n, 1))
    w.add(pb.incr(pb.SUBCH_COPY, pb.D_LAUNCH_DMA, pb.D_LAUNCH_DMA_COPY_1D))
  return w.ins()

def lower_copy_barrier() -> UOp:
  w = Words()
  w.add(pb.incr(pb.SUBCH_COPY, pb.D_NOP, 0))
  return w.ins()

# *** one command, the matcher ***

def lower_command(cmd: UOp, queue: str, arch: str) -> UOp:
  """The INS for one queue command on `queue` ("COMPUTE:n" or "COPY:n") of an `arch` device."""
  kind = queue.split(":")[0]
  if cmd.op is Ops.INS: return cmd
  if kind not in ("COMPUTE", "COPY"): raise ValueError(f"unknown queue {queue!r}: NV has COMPUTE:n and COPY:n channels")
  compute = kind == "COMPUTE"
  if cmd.op is Ops.WAIT: return lower_wait(cmd.src[0], cmd.src[1])
  if cmd.op is Ops.SIGNAL: return lower_signal(cmd.src[0], cmd.src[1])
  if cmd.op is Ops.TIMESTAMP: return lower_timestamp(cmd.src[0])
  if cmd.op is Ops.BARRIER: return lower_compute_barrier() if compute else lower_copy_barrier()
  if cmd.op is Ops.LAUNCH:
    if not compute: raise ValueError(f"kernel launch on copy queue {queue}: launches go to a COMPUTE channel")
    return lower_launch(arch, cmd)
  if cmd.op is Ops.COPY:
    if compute: raise ValueError(f"copy on compute queue {queue}: NV copies go to a COPY channel (the copy engine)")
    return lower_copy(cmd.src[0], cmd.src[1], cmd.arg)
  raise ValueError(f"NV pm_lower: no lowering for {cmd.op.name} (arg {cmd.arg!r}) on {queue}")

def _lower(ctx: EncodeCtx, cmd: UOp) -> UOp:
  # core's encode stage names the submit's queue; the arch is the device's own
  if not isinstance(ctx.hcq, NVHCQ): raise TypeError(f"NV pm_lower for {ctx.device}: its HCQ object is a {type(ctx.hcq).__name__}, not an NVHCQ")
  return lower_command(cmd, ctx.queue, ctx.hcq.arch)

# the HCQ contract's pm_lower (ctx: core.device.hcq.EncodeCtx)
pm_lower = lower_each_command(_lower, "lower NV queue commands")
