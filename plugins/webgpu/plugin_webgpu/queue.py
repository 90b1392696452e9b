"""WEBGPU's command format and the three HCQ rule sets core's pipeline asks for (pm_prep_program, pm_lower, pm_bufferize).

The API owns WebGPU's queues, so the "command processor" is software (iface_hcq.py): it reads these packets from a ring in
host memory and replays them as command-encoder calls (a compute pass with pipeline, bind group and dispatch_workgroups per
LAUNCH; copy_buffer_to_buffer or a queue write/read per COPY), submitting at each SIGNAL so a signal is written only once
the work before it completed.

Packets (core's PLAIN, core.hcq.plain): little-endian uint64 words, a header `opcode | nwords << 8` then one word per field:
  LAUNCH    (1, 4 words): image address (8 bytes there: the program's handle), kernargs address, nbufs | nvars << 32
  COPY      (2, 4 words): destination address, source address, nbytes
  WAIT      (3, 3 words): signal address, value   the queue stops here until the uint64 *signal >= value
  SIGNAL    (4, 3 words): signal address, value   *signal = value once everything before it has completed on the GPU
  TIMESTAMP (5, 2 words): address                 *address = host monotonic ns once the work before it completed
  BARRIER   (6, 1 word)                           nothing: WebGPU orders the passes of one queue
Addresses: host memory (rings, signals, kernargs, staging) by its address; a GPU buffer as DEVICE_BIT | slot << 32 | offset
(iface_hcq.py's table of GPU buffers). Kernel arguments: one 8-byte slot per argument, buffer addresses then int32 variables."""
from __future__ import annotations
from typing import TYPE_CHECKING
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher, UPat
from core.hcq.queue_ir import getaddr, ins, ring_bufferize, word_packet_rules
from core.hcq.plain import PLAIN, HandleProgramData, PlainOp as Op, handle_program
from core.codegen.program import compiled_program

if TYPE_CHECKING:
  from core.device.hcq import EncodeCtx
  from plugin_webgpu.iface_hcq import WebGPUHCQ

DEVICE_BIT = 1 << 63   # never set in a user-space host address

PACKETS = PLAIN
packet, field, decode = PACKETS.packet, PACKETS.field, PACKETS.decode

# *** pm_prep_program (ctx: the device's WebGPUHCQ): the pipeline made once, its handle is the image ***

def prep_program(ctx: WebGPUHCQ, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  # one slot per call buffer up to the highest the kernel binds: a kernel may leave one of its call's buffers unused
  nbufs, nvars = max((u.arg + 1 for u in linear.src if u.op is Ops.PARAM), default=0), len(p.arg.vars)
  return handle_program(device, p.arg.name, ctx.load_program(p.arg.name, binary.arg), nbufs, nvars)

pm_prep_program = PatternMatcher([(compiled_program, prep_program)], name="webgpu prep program")

# *** pm_lower (ctx: EncodeCtx): abstract commands -> INS(packet words, patches) ***

def lower_launch(ctx: EncodeCtx, cmd: UOp, prog: UOp, kernargs: UOp) -> UOp:
  data: HandleProgramData = prog.arg
  return ins(packet(Op.LAUNCH, 0, 0, data.nbufs | data.nvars << 32), [(field(0), getaddr(prog.src[1])), (field(1), getaddr(kernargs))])

pm_lower = PatternMatcher([
  (UPat(Ops.LAUNCH, src=(UPat(Ops.PROGRAM, name="prog"), UPat(name="kernargs")), name="cmd"), lower_launch),
  *word_packet_rules(PACKETS, {Ops.COPY: Op.COPY, Ops.WAIT: Op.WAIT, Ops.SIGNAL: Op.SIGNAL, Ops.TIMESTAMP: Op.TIMESTAMP,
                               Ops.BARRIER: Op.BARRIER}),
], name="webgpu lower")

# *** pm_bufferize (ctx: the device's WebGPUHCQ): every placeholder is host memory the processor and the host both read ***

# (WebGPUHCQ.buffer_spec): a queue's buffers once, every other kind fresh
pm_bufferize = ring_bufferize("webgpu bufferize")
