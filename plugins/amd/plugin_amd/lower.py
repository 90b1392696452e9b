"""pm_lower for AMD: queue IR commands -> INS (PM4 words on COMPUTE queues, SDMA words on COPY queues) with patches."""
from __future__ import annotations
import struct
from typing import Any, Callable
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from plugin_amd import pm4, sdma
from plugin_amd.regs import gen_of, sh_offset, NUM_USER_DATA, DISPATCH_INITIATOR_COMPUTE_SHADER_EN, \
  DISPATCH_INITIATOR_FORCE_START_AT_000, DISPATCH_INITIATOR_CS_W32_EN

# Patch values follow the HCQ contract (CONST, GETADDR(buf)+c, timeline value + k) plus two forms the hardware needs:
# SHR by a constant (COMPUTE_PGM_LO/HI and the scratch base hold address >> 8, written as one 64-bit patch over the
# LO/HI register pair) and CAST to uint32 (the 32-bit reference of a wait, the halves of an SDMA 64-bit signal).
# Waits compare the low 32 bits of a signal (WAIT_REG_MEM/POLL_REGMEM are 32-bit compares): timeline values must stay
# below 2**32, which a per-submit increment reaches after four billion submits.

# kernel_code_properties bits (AMDGPU kernel descriptor, LLVM AMDGPUUsage) -> user SGPRs each enabled input takes,
# in the order the hardware loads them into COMPUTE_USER_DATA_*
USER_SGPRS = ((0, "private_segment_buffer", 4), (1, "dispatch_ptr", 2), (2, "queue_ptr", 2), (3, "kernarg_segment_ptr", 2),
              (4, "dispatch_id", 2), (5, "flat_scratch_init", 2), (6, "private_segment_size", 1))
KERNARG_ONLY = 1 << 3

class _Words:
  """Command dwords plus (byte offset, value UOp) patches for what is known only later."""
  def __init__(self) -> None:
    self.words: list[int] = []
    self.patches: list[tuple[int, UOp]] = []
  def add(self, words: list[int]) -> int:
    start = len(self.words)
    self.words.extend(words)
    return start
  def set(self, dw: int, value: Any, width: int) -> None:
    """Fill `width` bytes at dword `dw`: an int (or CONST) is written now, anything else becomes a patch."""
    if isinstance(value, UOp) and value.op is Ops.CONST: value = value.arg
    if isinstance(value, int):
      if not 0 <= value < 1 << (8 * width): raise ValueError(f"value {value:#x} does not fit in {width} bytes")
      self.words[dw] = value & 0xFFFFFFFF
      if width == 8: self.words[dw + 1] = value >> 32
      return
    self.patches.append((4 * dw, value.cast(dtypes.uint64 if width == 8 else dtypes.uint32)))
  def ins(self) -> UOp:
    data = struct.pack(f"<{len(self.words)}I", *self.words)
    return UOp(Ops.INS, dtypes.void, tuple(v for _, v in self.patches), (data, tuple(o for o, _ in self.patches)))

def getaddr(buf: UOp) -> UOp: return buf if buf.op is Ops.GETADDR else UOp(Ops.GETADDR, dtypes.uint64, (buf,))
def _lo32(v: Any) -> Any: return v & 0xFFFFFFFF if isinstance(v, int) else v.cast(dtypes.uint32)
def _hi32(v: Any) -> Any: return v >> 32 if isinstance(v, int) else (v.cast(dtypes.uint64) >> 32).cast(dtypes.uint32)
def _const_value(v: UOp) -> Any: return v.arg if v.op is Ops.CONST else v

def _check_wait_value(v: Any) -> None:
  if isinstance(v, int) and not 0 <= v < 1 << 32:
    raise ValueError(f"wait value {v:#x}: AMD waits compare 32 bits, so timeline values must stay below 2**32")

# *** compute queue (PM4) ***

def _field(data: Any, *names: str, default: Any = None) -> Any:
  for n in names:
    if hasattr(data, n): return getattr(data, n)
  if default is None: raise AttributeError(f"AMD program data {type(data).__name__} lacks {names[0]!r}")
  return default

def _user_sgprs(props: int, kernargs: UOp, w: _Words) -> tuple[list[int], Callable[[int], None]]:
  """The COMPUTE_USER_DATA values for the enabled kernel inputs, and a hook placing the kernarg patch once emitted."""
  values: list[int] = []
  kernarg_index = -1
  for bit, name, n in USER_SGPRS:
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

def lower_launch(gen: str, cmd: UOp, ctx: Any = None) -> UOp:
  """PROGRAM(prog, kernargs) -> cache invalidate, program/resource/thread/user registers, DISPATCH_DIRECT."""
  prog, kernargs = cmd.src[0], cmd.src[1]
  global_size, local_size = (tuple(x) + (1,) * (3 - len(x)) for x in cmd.arg)
  data, image = prog.arg, prog.src[1]
  entry = _field(data, "entry_offset", "kernel_code_entry_byte_offset", default=0)
  rsrc1, rsrc2, rsrc3 = _field(data, "rsrc1"), _field(data, "rsrc2"), _field(data, "rsrc3", default=0)
  wave32 = bool(_field(data, "wave32", default=False))
  scratch = _field(data, "scratch_size", "private_segment_size", default=0)
  props = _field(data, "kernel_code_properties", default=KERNARG_ONLY)
  if wave32 and gen == "gfx9": raise ValueError(f"{getattr(data, 'name', '?')}: wave32 program on gfx9, which runs wave64 only")
  if not all(isinstance(x, int) and x > 0 for x in local_size): raise ValueError(f"local size {local_size} must be positive ints")
  w = _Words()
  w.add(pm4.acquire_mem(gen))
  pgm = w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_PGM_LO"), [0, 0]))
  w.set(pgm + pm4.SET_SH_REG_VALUES_DW, ((getaddr(image) + entry) if entry else getaddr(image)) >> 8, 8)   # PGM_LO/HI = code address >> 8
  w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_PGM_RSRC1"), [rsrc1, rsrc2]))
  w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_PGM_RSRC3"), [rsrc3]))
  if scratch:
    tmpring, scratch_buf = getattr(ctx, "tmpring_size", None), getattr(ctx, "scratch", None)
    if tmpring is None or scratch_buf is None:
      raise NotImplementedError(f"{getattr(data, 'name', '?')} needs {scratch} bytes of scratch; this AMD HCQ object has no scratch setup")
    w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_TMPRING_SIZE"), [tmpring(scratch)]))
    sb = w.add(pm4.set_sh_reg(sh_offset(gen, "COMPUTE_DISPATCH_SCRATCH_BASE_LO"), [0, 0]))
    w.set(sb + pm4.SET_SH_REG_VALUES_DW, getaddr(scratch_buf) >> 8, 8)
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
  w = _Words()
  at = w.add(packet)
  _check_wait_value(v := _const_value(value))
  w.set(at + addr_dw, getaddr(signal), 8)
  w.set(at + ref_dw, _lo32(v), 4)
  return w.ins()

def lower_compute_wait(gen: str, signal: UOp, value: UOp) -> UOp:
  return _lower_wait(pm4.wait_reg_mem(0, 0), pm4.WAIT_ADDR_DW, pm4.WAIT_REF_DW, signal, value)

def lower_compute_signal(gen: str, signal: UOp, value: UOp) -> UOp:
  w = _Words()
  at = w.add(pm4.release_mem(gen, 0, 0, data_sel=pm4.DATA_SEL_64))
  w.set(at + pm4.RELEASE_ADDR_DW, getaddr(signal), 8)
  w.set(at + pm4.RELEASE_DATA_DW, _const_value(value), 8)
  return w.ins()

def lower_compute_timestamp(gen: str, buf: UOp) -> UOp:
  w = _Words()
  at = w.add(pm4.release_mem(gen, 0, data_sel=pm4.DATA_SEL_GPU_CLOCK, event_type=pm4.BOTTOM_OF_PIPE_TS, cache_flush=False))
  w.set(at + pm4.RELEASE_ADDR_DW, getaddr(buf), 8)
  return w.ins()

def lower_compute_barrier(gen: str) -> UOp:
  """Wait for earlier dispatches (CS_PARTIAL_FLUSH), then invalidate caches so later ones see their writes."""
  w = _Words()
  w.add(pm4.event_write(pm4.CS_PARTIAL_FLUSH, pm4.EVENT_INDEX_CS_PARTIAL_FLUSH))
  w.add(pm4.acquire_mem(gen))
  return w.ins()

# *** copy queue (SDMA) ***

def lower_copy(gen: str, dest: UOp, src: UOp, nbytes: int) -> UOp:
  w = _Words()
  for off, n in sdma.copy_chunks(gen, nbytes):
    at = w.add(sdma.copy_linear_one(gen, 0, 0, n))
    w.set(at + sdma.COPY_SRC_DW, getaddr(src) + off if off else getaddr(src), 8)
    w.set(at + sdma.COPY_DST_DW, getaddr(dest) + off if off else getaddr(dest), 8)
  return w.ins()

def lower_sdma_wait(gen: str, signal: UOp, value: UOp) -> UOp:
  return _lower_wait(sdma.poll_regmem(0, 0), sdma.POLL_ADDR_DW, sdma.POLL_VALUE_DW, signal, value)

def lower_sdma_signal(gen: str, signal: UOp, value: UOp) -> UOp:
  """Two FENCEs, high dword first (sdma.fence64 says why)."""
  w = _Words()
  v = _const_value(value)
  hi, lo = w.add(sdma.fence(0, 0)), w.add(sdma.fence(0, 0))
  w.set(hi + sdma.FENCE_ADDR_DW, getaddr(signal) + 4, 8)
  w.set(hi + sdma.FENCE_DATA_DW, _hi32(v), 4)
  w.set(lo + sdma.FENCE_ADDR_DW, getaddr(signal), 8)
  w.set(lo + sdma.FENCE_DATA_DW, _lo32(v), 4)
  return w.ins()

def lower_sdma_timestamp(gen: str, buf: UOp) -> UOp:
  w = _Words()
  at = w.add(sdma.timestamp(0))
  w.set(at + sdma.TIMESTAMP_ADDR_DW, getaddr(buf), 8)
  return w.ins()

def lower_sdma_barrier(gen: str) -> UOp:
  """The SDMA engine runs packets in order and each copy completes before the next packet; a NOP keeps one INS."""
  w = _Words()
  w.add(sdma.nop(1))
  return w.ins()

# *** one command, one submit, the matcher ***

def _is_launch(cmd: UOp) -> bool: return cmd.op is Ops.PROGRAM and len(cmd.src) == 2 and cmd.src[0].op is Ops.PROGRAM

def lower_command(cmd: UOp, queue: str, arch: str, ctx: Any = None) -> UOp:
  """The INS for one queue command on `queue` ("COMPUTE:n" or "COPY:n") of an `arch` device."""
  gen, kind = gen_of(arch), queue.split(":")[0]
  if cmd.op is Ops.INS: return cmd
  if kind not in ("COMPUTE", "COPY"): raise ValueError(f"unknown queue {queue!r}: AMD has COMPUTE:n and COPY:n queues")
  compute = kind == "COMPUTE"
  if cmd.op is Ops.WAIT: return (lower_compute_wait if compute else lower_sdma_wait)(gen, cmd.src[0], cmd.src[1])
  if cmd.op is Ops.STORE: return (lower_compute_signal if compute else lower_sdma_signal)(gen, cmd.src[0], cmd.src[1])
  if cmd.op is Ops.BARRIER: return (lower_compute_barrier if compute else lower_sdma_barrier)(gen)
  if cmd.op is Ops.CUSTOM and cmd.arg == "timestamp": return (lower_compute_timestamp if compute else lower_sdma_timestamp)(gen, cmd.src[0])
  if _is_launch(cmd):
    if not compute: raise ValueError(f"kernel launch on copy queue {queue}: launches go to a COMPUTE queue")
    return lower_launch(gen, cmd, ctx)
  if cmd.op is Ops.COPY:
    if compute: raise ValueError(f"copy on compute queue {queue}: AMD copies go to a COPY (SDMA) queue")
    return lower_copy(gen, cmd.src[0], cmd.src[1], cmd.arg)
  raise ValueError(f"AMD pm_lower: no lowering for {cmd.op.name} (arg {cmd.arg!r}) on {queue}")

def arch_of(ctx: Any, cmd: UOp | None = None) -> str:
  """The arch of the device being encoded: the HCQ object's `arch` (or `target`), else a launched program's data."""
  for a in ("arch", "target"):
    if isinstance(v := getattr(ctx, a, None), str) and v: return v
  if cmd is not None and _is_launch(cmd) and isinstance(v := getattr(cmd.src[0].arg, "arch", None), str) and v: return v
  raise ValueError("AMD pm_lower: the HCQ object (ctx) names no arch (expected ctx.arch such as 'gfx1100')")

def queue_of(ctx: Any, cmd: UOp) -> str | None:
  """Which queue a command is encoded for, or None when nothing says. Core's encode stage rewrites one command at a
  time, so the queue comes from the HCQ object (`ctx.queue`, set while a submit is encoded) when it has one; otherwise
  from the command: launches run on COMPUTE and copies on COPY queues, a signal STORE targets its own queue's timeline
  signal, and with one compute and one copy queue a WAIT on one queue's timeline runs on the other."""
  if isinstance(q := getattr(ctx, "queue", None), str) and q: return q
  if _is_launch(cmd): return "COMPUTE:0"
  if cmd.op is Ops.COPY: return "COPY:0"
  tag = cmd.src[0].tag if cmd.src and cmd.src[0].op is Ops.BUFFER else None
  if isinstance(tag, tuple) and tag[0] == "timeline_signal":
    if cmd.op is Ops.STORE: return tag[1]
    queues = tuple(getattr(ctx, "queues", ()))
    # a wait on another device's signal comes from a copy between the devices, which this device runs on its COPY queue
    # (wrong only for a kernel overwriting a buffer another device's queue read earlier in the same schedule)
    if cmd.op is Ops.WAIT and isinstance(dev := getattr(ctx, "device", None), str) and cmd.src[0].src[1].arg != dev:
      if (copyq := next((q for q in queues if q.startswith("COPY")), None)) is not None: return copyq
    if cmd.op is Ops.WAIT and len(queues) == 2 and tag[1] in queues: return next(q for q in queues if q != tag[1])
  return None

def _lower_one(ctx: Any, cmd: UOp) -> UOp | None:
  # a command whose queue is unknown here is left alone: a whole-submit rewrite (lower_submit) knows the queue
  return None if (q := queue_of(ctx, cmd)) is None else lower_command(cmd, q, arch_of(ctx, cmd), ctx)

def lower_submit(sub: UOp, ctx: Any = None) -> UOp | None:
  """CUSTOM_FUNCTION("submit", queue)(LINEAR(cmds), DEVICE) -> the same submit with every command an INS (for a caller
  that rewrites whole submits: the queue is the submit's)."""
  if not (isinstance(sub.arg, tuple) and len(sub.arg) == 2 and sub.arg[0] == "submit") or sub.src[0].op is not Ops.LINEAR: return None
  cmds = sub.src[0].src
  if all(c.op is Ops.INS for c in cmds): return None
  new = tuple(lower_command(c, sub.arg[1], arch_of(ctx, next((c for c in cmds if _is_launch(c)), None)), ctx) for c in cmds)
  return sub.replace(src=(sub.src[0].replace(src=new), *sub.src[1:]))

pm_lower_amd = PatternMatcher([
  (UPat(Ops.CUSTOM_FUNCTION, name="sub"), lower_submit),
  (UPat(Ops.PROGRAM, src=(UPat(Ops.PROGRAM), UPat()), name="cmd"), _lower_one),
  (UPat(Ops.COPY, src=(UPat(), UPat()), name="cmd"), _lower_one),
  (UPat(Ops.WAIT, src=(UPat(), UPat()), name="cmd"), _lower_one),
  (UPat(Ops.STORE, src=(UPat(Ops.BUFFER), UPat()), name="cmd", custom=lambda u: u.arg is None), _lower_one),
  (UPat(Ops.BARRIER, src=(), name="cmd"), _lower_one),
  (UPat(Ops.CUSTOM, src=(UPat(),), arg="timestamp", name="cmd"), _lower_one),
], name="lower AMD queue commands")

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
