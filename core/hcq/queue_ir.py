"""Queue IR: builders for placeholders, GETADDR, timeline values, the abstract commands, submits and encoded INS."""
from __future__ import annotations
import functools, itertools, struct
from typing import TYPE_CHECKING, Any, Callable
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat, Rule
from core.helpers import frozen_record

from core.device.hcq import QUEUE_KINDS
if TYPE_CHECKING:
  import enum
  from core.device.hcq import RingHCQ
  from core.device.word_packets import WordPackets

@frozen_record
class ProgramData:
  """A prepared kernel as the device sees it. `arg_offsets`: byte offset in the kernarg buffer of each argument, buffers
  first (uint64 addresses), then variables (int32, in ProgramSpec.vars order). Plugins subclass it to add fields."""
  name: str
  kernarg_size: int
  kernarg_align: int
  arg_offsets: tuple[int, ...]

# the host copy of a queue's timeline value: core owns it (host memory), it never reaches a plugin
HOST_KINDS = ("timeline_value",)
# the per-device placeholder of a timed submission's timestamps (core/hcq/timestamps.py): named here so that bufferize knows it
# without importing the timestamps stage, which untimed submissions never run
TIMESTAMPS_KIND = "timestamps"
# kinds of placeholder buffers per schedule
SCHEDULE_KINDS = ("program", "kernargs", "cmdbuf", "scratch", "staging", TIMESTAMPS_KIND)

_counter = itertools.count()

def placeholder(kind: Any, device: str, size: int, dtype: DType = dtypes.uint8) -> UOp:
  """A fresh placeholder buffer of `size` elements; `kind` is its tag (a string, or (kind, queue) for per-queue ones)."""
  return UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, arg=next(_counter)), UOp(Ops.DEVICE, arg=device)), size, tag=kind)

@functools.cache
def queue_buffer(kind: str, queue: str, device: str) -> UOp:
  """The one placeholder of a per-queue buffer (cached: equal for every schedule, so submissions of one queue share it)."""
  if kind not in QUEUE_KINDS + HOST_KINDS: raise ValueError(f"unknown per-queue buffer kind {kind!r}")
  return placeholder((kind, queue), device, 1 if kind != "ring" else 0, dtypes.uint64 if kind != "ring" else dtypes.uint32)

def kind_of(buf: UOp) -> str | None:
  """'program', 'ring', ... for a placeholder; None for a real buffer."""
  if buf.op is not Ops.BUFFER or buf.tag is None: return None
  return buf.tag if isinstance(buf.tag, str) else buf.tag[0]

def queue_of(buf: UOp) -> str | None: return buf.tag[1] if isinstance(buf.tag, tuple) else None
def device_of(buf: UOp) -> str: return buf.src[1].arg

def getaddr(buf: UOp, offset: int = 0, device: str | None = None) -> UOp:
  """The address of `buf` (+ offset bytes) as `device` sees it: GETADDR(buf, DEVICE). A plugin's pm_lower leaves `device`
  out (GETADDR(buf): the address as the device running the command sees it) and core's encode stage binds it."""
  a = UOp(Ops.GETADDR, dtypes.uint64, (buf,) if device is None else (buf, UOp(Ops.DEVICE, arg=device)))
  return a if offset == 0 else a + UOp.const(dtypes.uint64, offset)

def timeline(queue: str, device: str) -> UOp:
  """The value of a queue's timeline when the schedule is submitted (known only then)."""
  return UOp(Ops.DEFINE_VAR, dtypes.uint64, arg=("timeline", queue, device))

def timeline_value(queue: str, device: str, k: int) -> UOp:
  tv = timeline(queue, device)
  return tv if k == 0 else tv + UOp.const(dtypes.uint64, k)

def u64(v: int) -> UOp: return UOp.const(dtypes.uint64, v)

# *** commands ***

def prepared_program(device: str, image_buf: UOp, data: ProgramData) -> UOp:
  return UOp(Ops.PROGRAM, src=(UOp(Ops.DEVICE, arg=device), image_buf), arg=data)

def launch(prog: UOp, kernargs: UOp, global_size: tuple[int, ...], local_size: tuple[int, ...]) -> UOp:
  return UOp(Ops.LAUNCH, src=(prog, kernargs), arg=(tuple(global_size), tuple(local_size)))

def copy(dest: UOp, src: UOp, nbytes: int) -> UOp: return UOp(Ops.COPY, src=(dest, src), arg=nbytes)
def wait(signal: UOp, value: UOp) -> UOp: return UOp(Ops.WAIT, src=(signal, value))
def signal(signal_buf: UOp, value: UOp) -> UOp: return UOp(Ops.SIGNAL, src=(signal_buf, value))
def barrier() -> UOp: return UOp(Ops.BARRIER)
def timestamp(buf: UOp) -> UOp: return UOp(Ops.TIMESTAMP, src=(buf,))

def submit(cmds: list[UOp] | tuple[UOp, ...], device: str, queue: str, *extra: UOp) -> UOp:
  """CUSTOM_FUNCTION("submit", queue) of a LINEAR of commands; `extra` sources carry stage-private data."""
  return UOp(Ops.CUSTOM_FUNCTION, src=(UOp(Ops.LINEAR, src=tuple(cmds)), UOp(Ops.DEVICE, arg=device)) + extra, arg=("submit", queue))

def is_submit(u: UOp) -> bool: return u.op is Ops.CUSTOM_FUNCTION and isinstance(u.arg, tuple) and u.arg[0] == "submit"
def submit_queue(u: UOp) -> str: return u.arg[1]
def submit_device(u: UOp) -> str: return u.src[1].arg

def ins(words: bytes, patches: list[tuple[int, UOp]] | tuple[tuple[int, UOp], ...] = ()) -> UOp:
  """An encoded command: `words` with each (byte offset, value) patched in later (value dtype gives the width)."""
  return UOp(Ops.INS, src=tuple(v for _, v in patches), arg=(bytes(words), tuple(o for o, _ in patches)))

class Words:
  """What a plugin's pm_lower builds a command from: 32-bit words, plus (byte offset, value) patches for the fields known only
  later (an address, a timeline value); `ins()` is the encoded INS."""
  def __init__(self) -> None:
    self.words: list[int] = []
    self.patches: list[tuple[int, UOp]] = []
  def add(self, words: list[int]) -> int:
    """Appends `words`; returns the index of the first."""
    start = len(self.words)
    self.words.extend(words)
    return start
  def set(self, dw: int, value: Any, width: int) -> None:
    """Fills `width` bytes (4 or 8) at word `dw`: an int (or CONST) is written now, anything else becomes a patch."""
    if isinstance(value, UOp) and value.op is Ops.CONST: value = value.arg
    if isinstance(value, int):
      if not 0 <= value < 1 << (8 * width): raise ValueError(f"value {value:#x} does not fit in {width} bytes")
      self.words[dw] = value & 0xFFFFFFFF
      if width == 8: self.words[dw + 1] = value >> 32
      return
    self.patches.append((4 * dw, value.cast(dtypes.uint64 if width == 8 else dtypes.uint32)))
  def ins(self) -> UOp: return ins(struct.pack(f"<{len(self.words)}I", *self.words), self.patches)

def const_value(v: UOp) -> Any:
  """A command operand as an int when it is a constant (encoded now), else the UOp (a patch)."""
  return v.arg if v.op is Ops.CONST else v
def lo32(v: Any) -> Any:
  """The low 32 bits of an int or a 64-bit value UOp."""
  return v & 0xFFFFFFFF if isinstance(v, int) else v.cast(dtypes.uint32)
def hi32(v: Any) -> Any:
  """The high 32 bits of an int or a 64-bit value UOp."""
  return v >> 32 if isinstance(v, int) else (v.cast(dtypes.uint64) >> UOp.const(dtypes.uint64, 32)).cast(dtypes.uint32)

def host_patch(buf: UOp, offset: int, value: UOp) -> UOp:
  """A write the host does before submitting: `value` (its dtype gives the width) at byte `offset` of `buf`."""
  return UOp(Ops.HOST_PATCH, src=(buf, value), arg=offset)

def ring_patch(offset: int, value: UOp) -> UOp:
  """A value the submit program writes into the ring copy of a command buffer, `offset` bytes into the submit (a value
  known only at submit time: a timeline value)."""
  return UOp(Ops.RING_PATCH, src=(value,), arg=offset)

def advance(queue: str, device: str, value: UOp) -> UOp:
  """The end of a schedule: the host copy of the queue's timeline becomes `value` (what its last signal wrote)."""
  return UOp(Ops.ADVANCE, src=(queue_buffer("timeline_value", queue, device), value))

def command_kind(cmd: UOp) -> str:
  """A short human name of an abstract command, for errors and DEBUG output."""
  if cmd.op is Ops.LAUNCH: return f"launch {cmd.src[0].arg.name}"
  return {Ops.COPY: "copy", Ops.WAIT: "wait", Ops.SIGNAL: "signal", Ops.BARRIER: "barrier", Ops.TIMESTAMP: "timestamp"}.get(cmd.op, cmd.op.name)

def lower_each_command(lower: Callable[[Any, UOp], UOp], name: str) -> PatternMatcher:
  """A pm_lower that hands every abstract command (the shapes core builds above: launch, copy, wait, signal, barrier,
  timestamp) to one function `lower(ctx, cmd)`, for a device that picks a command's encoding by its queue in plain code."""
  return PatternMatcher([(UPat(Ops.LAUNCH, src=(UPat(Ops.PROGRAM), UPat()), name="cmd"), lower),
                         (UPat((Ops.COPY, Ops.WAIT), src=(UPat(), UPat()), name="cmd"), lower),
                         (UPat(Ops.SIGNAL, src=(UPat(Ops.BUFFER), UPat()), name="cmd"), lower),
                         (UPat(Ops.BARRIER, src=(), name="cmd"), lower),
                         (UPat(Ops.TIMESTAMP, src=(UPat(),), name="cmd"), lower)], name=name)

def word_packet_rules(packets: WordPackets[Any], opcodes: dict[Ops, enum.IntEnum]) -> list[Rule]:
  """pm_lower's rules for COPY, WAIT, SIGNAL, TIMESTAMP and BARRIER in a WordPackets format (the software command
  processors: EXAMPLE's SIM, METAL, WEBGPU): each command is one packet of opcode `opcodes[command]`, its fields patched
  later: COPY (destination address, source address, nbytes), WAIT and SIGNAL (signal address, uint64 value), TIMESTAMP
  (address), BARRIER (none). The device adds its own LAUNCH rule."""
  def u64(v: UOp) -> UOp: return v if v.dtype == dtypes.uint64 else v.cast(dtypes.uint64)
  def signal_op(op: enum.IntEnum, sig: UOp, value: UOp) -> UOp:
    return ins(packets.packet(op, 0, 0), [(packets.field(0), getaddr(sig)), (packets.field(1), u64(value))])
  return [
    (UPat(Ops.COPY, src=(UPat(name="dst"), UPat(name="src")), name="cmd"), lambda ctx, cmd, dst, src:
     ins(packets.packet(opcodes[Ops.COPY], 0, 0, cmd.arg), [(packets.field(0), getaddr(dst)), (packets.field(1), getaddr(src))])),
    (UPat(Ops.WAIT, src=(UPat(name="sig"), UPat(name="value"))), lambda ctx, sig, value: signal_op(opcodes[Ops.WAIT], sig, value)),
    (UPat(Ops.SIGNAL, src=(UPat(Ops.BUFFER, name="sig"), UPat(name="value"))),
     lambda ctx, sig, value: signal_op(opcodes[Ops.SIGNAL], sig, value)),
    (UPat(Ops.TIMESTAMP, src=(UPat(name="buf"),)),
     lambda ctx, buf: ins(packets.packet(opcodes[Ops.TIMESTAMP], 0), [(packets.field(0), getaddr(buf))])),
    (UPat(Ops.BARRIER, src=()), lambda ctx: ins(packets.packet(opcodes[Ops.BARRIER])))]

def ring_bufferize(name: str) -> PatternMatcher:
  """A pm_bufferize for a RingHCQ device (ctx: its HCQ object): a per-queue placeholder becomes that queue's one buffer, a
  per-schedule one a fresh allocation of its size (RingHCQ.buffer_uop). Any other tag, or a queue the device lacks, is a
  ValueError naming the device."""
  def bufferize(ctx: RingHCQ, b: UOp) -> UOp:
    t, kinds = b.tag, SCHEDULE_KINDS + QUEUE_KINDS
    k = t if isinstance(t, str) else t[0] if isinstance(t, tuple) and len(t) == 2 else None
    if k not in kinds: raise ValueError(f"{ctx.device}: no buffer for placeholder tag {t!r} (kinds: {', '.join(kinds)})")
    if k in QUEUE_KINDS and t[1] not in ctx.queues:
      raise ValueError(f"{ctx.device}: placeholder {t!r} names a queue this device lacks (it has {', '.join(ctx.queues)})")
    return ctx.buffer_uop(t, b.dtype, b.arg)
  return PatternMatcher([(UPat(Ops.BUFFER, name="b", custom=lambda b: b.tag is not None), bufferize)], name=name)
