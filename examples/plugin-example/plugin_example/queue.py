"""EXAMPLE's command queues: the packet format, and the three HCQ rule sets core's pipeline asks this plugin for.

Core lowers a whole schedule into abstract queue commands (core/hcq/README.md); this file says what they become for EXAMPLE:
  pm_prep_program  a compiled kernel -> the loaded program: ProgramData (kernarg layout) and the image bytes
  pm_lower         each abstract command -> packet words, plus patches for values known only later (addresses, timelines)
  pm_bufferize     each placeholder buffer (rings, doorbells, signals, command buffers, ...) -> a real EXAMPLE buffer
iface_sim.py is the simulated driver whose command processor reads these packets from the rings and runs them.

Packet format (core's PLAIN, core.hcq.plain; WEBGPU runs it too): little-endian uint64 words. A packet is one header word,
`opcode | nwords << 8` (nwords counts the header), then its fields, one word each:
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
from typing import TYPE_CHECKING
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.hcq.queue_ir import getaddr, ins, ring_bufferize, word_packet_rules
from core.hcq.plain import PLAIN, HandleProgramData, PlainOp as Op, handle_program
from core.codegen.program import compiled_program

if TYPE_CHECKING:
  from core.device.hcq import EncodeCtx
  from plugin_example.iface_sim import SimHCQ

# *** the packet format: core's PLAIN (a device with packets of its own makes a WordPackets of its opcodes: METAL's cmdbuf.py) ***

# packet(Op.WAIT, signal, value) encodes one, field(i) is the byte offset of field i (where a patch goes), decode(words) reads
# packets back (the command processor runs what it returns; tests compare with it)
PACKETS = PLAIN
packet, field, decode = PACKETS.packet, PACKETS.field, PACKETS.decode

# *** pm_prep_program (ctx: the device's SimHCQ): load the kernel, describe its arguments ***

def prep_program(ctx: SimHCQ, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  # the image is the handle the SIM driver loaded the kernel under; core's HandleProgramData holds the loaded kernel
  nbufs, nvars = sum(1 for u in linear.src if u.op is Ops.PARAM), len(p.arg.vars)
  return handle_program(device, p.arg.name, ctx.load_program(p.arg.name, binary.arg), nbufs, nvars)

pm_prep_program = PatternMatcher([(compiled_program, prep_program)], name="example prep program")

# *** pm_lower (ctx: EncodeCtx): abstract commands -> INS(packet words, patches) ***
# A patch is (byte offset in the packet, value): a constant is written into the words now, an address when the buffer has one,
# a timeline value by the submit program when it copies the words into the ring.

def lower_launch(ctx: EncodeCtx, cmd: UOp, prog: UOp, kernargs: UOp) -> UOp:
  data: HandleProgramData = prog.arg
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
