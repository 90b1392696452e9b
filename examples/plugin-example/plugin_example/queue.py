"""EXAMPLE's command queues: the packet format, and the three HCQ rule sets core's pipeline asks this plugin for.

Core lowers a whole schedule into abstract queue commands (core/hcq/README.md); this file says what they become for EXAMPLE:
  pm_prep_program  a compiled kernel -> the loaded program: ProgramData (kernarg layout) and the image bytes
  pm_lower         each abstract command -> packet words, plus patches for values known only later (addresses, timelines)
  pm_bufferize     each placeholder buffer (rings, doorbells, signals, command buffers, ...) -> a real EXAMPLE buffer
iface_sim.py is the simulated driver whose command processor reads these packets from the rings and runs them.

Packet format: little-endian uint64 words. A packet is one header word, `opcode | nwords << 8` (nwords counts the header),
then its fields, one word each:
  LAUNCH    (1, 4 words): image address, kernargs address, nbufs | nvars << 32
  COPY      (2, 4 words): destination address, source address, nbytes
  WAIT      (3, 3 words): signal address, value   the queue stops here until the uint64 *signal >= value
  SIGNAL    (4, 3 words): signal address, value   *signal = value, once everything before it has completed
  TIMESTAMP (5, 2 words): address                 *address = a monotonic clock in nanoseconds
  BARRIER   (6, 1 word)                           nothing to do: this processor finishes each packet before the next
A LAUNCH's image is 8 bytes, the handle of a kernel the SIM driver loaded (`SimHCQ.load_program`); its kernargs are one
8-byte slot per kernel argument: the buffers' addresses, then the int32 variables in the low half of their slot.
"""
from __future__ import annotations
import enum, struct
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.hcq.queue_ir import ProgramData, getaddr, ins, ring_bufferize, word_packet_rules
from core.device.word_packets import WordPackets
from core.codegen.program import compiled_program

if TYPE_CHECKING:
  from core.device.hcq import EncodeCtx
  from plugin_example.iface_sim import SimHCQ

# *** the packet format ***

class Op(enum.IntEnum):
  LAUNCH = 1
  COPY = 2
  WAIT = 3
  SIGNAL = 4
  TIMESTAMP = 5
  BARRIER = 6

WORDS = {Op.LAUNCH: 4, Op.COPY: 4, Op.WAIT: 3, Op.SIGNAL: 3, Op.TIMESTAMP: 2, Op.BARRIER: 1}

# core's WordPackets is this format over WORDS: packet(Op.WAIT, signal, value) encodes one, field(i) is the byte offset of field i
# (where a patch goes), decode(words) reads packets back (the command processor runs what it returns; tests compare with it)
PACKETS = WordPackets(WORDS)
packet, field, decode = PACKETS.packet, PACKETS.field, PACKETS.decode

# *** pm_prep_program (ctx: the device's SimHCQ): load the kernel, describe its arguments ***

@dataclass(frozen=True)
class ExampleProgramData(ProgramData):
  """A kernel the SIM driver loaded: its handle (the image), and its number of buffer and int32 arguments."""
  handle: int = 0
  nbufs: int = 0
  nvars: int = 0
  program: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)   # keeps the program the handle names loaded

def prep_program(ctx: SimHCQ, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  spec = p.arg
  nbufs, nvars = sum(1 for u in linear.src if u.op is Ops.PARAM), len(spec.vars)
  prg = ctx.load_program(spec.name, binary.arg)
  nargs = nbufs + nvars
  data = ExampleProgramData(spec.name, 8 * nargs, 8, tuple(range(0, 8 * nargs, 8)), handle=prg.handle, nbufs=nbufs, nvars=nvars, program=prg)
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=struct.pack("<Q", prg.handle))), arg=data)

pm_prep_program = PatternMatcher([(compiled_program, prep_program)], name="example prep program")

# *** pm_lower (ctx: EncodeCtx): abstract commands -> INS(packet words, patches) ***
# A patch is (byte offset in the packet, value): a constant is written into the words now, an address when the buffer has one,
# a timeline value by the submit program when it copies the words into the ring.

def lower_launch(ctx: EncodeCtx, cmd: UOp, prog: UOp, kernargs: UOp) -> UOp:
  data: ExampleProgramData = prog.arg
  if any(g != 1 for g in cmd.arg[0]):
    raise RuntimeError(f"{ctx.device}: kernel {data.name} has global size {cmd.arg[0]}; EXAMPLE kernels loop over every axis (global size 1)")
  image = prog.src[1]   # the program placeholder the image bytes were put in
  return ins(packet(Op.LAUNCH, 0, 0, data.nbufs | data.nvars << 32), [(field(0), getaddr(image)), (field(1), getaddr(kernargs))])

pm_lower = PatternMatcher([
  # LAUNCH(prepared PROGRAM, kernargs buffer) arg=(global size, local size)
  (UPat(Ops.LAUNCH, src=(UPat(Ops.PROGRAM, name="prog"), UPat(name="kernargs")), name="cmd"), lower_launch),
  # the other commands are one packet each, their fields as the format above says (core's rules for any WordPackets format)
  *word_packet_rules(PACKETS, {Ops.COPY: Op.COPY, Ops.WAIT: Op.WAIT, Ops.SIGNAL: Op.SIGNAL, Ops.TIMESTAMP: Op.TIMESTAMP,
                               Ops.BARRIER: Op.BARRIER}),
], name="example lower")

# *** pm_bufferize (ctx: the device's SimHCQ): placeholders -> real buffers ***

# tag (kind, queue): a queue's ring, wptr, doorbell or timeline signal, the same buffer for every schedule (SimHCQ.queue);
# any other kind (program, kernargs, cmdbuf, scratch, staging): a fresh buffer of the placeholder's size
pm_bufferize = ring_bufferize("example bufferize")
