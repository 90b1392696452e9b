"""Core's plain command format, for a software command processor that runs each queue command as it comes (EXAMPLE's SIM,
WEBGPU): PLAIN, its packets, and handle_program, the loaded program its LAUNCH names."""
from __future__ import annotations
import dataclasses, enum, struct
from typing import Any
from core.helpers import frozen_record
from core.ir.ops import UOp, Ops
from core.device.word_packets import WordPackets
from core.hcq.queue_ir import ProgramData

class PlainOp(enum.IntEnum):
  """PLAIN's opcodes, a packet per queue command. LAUNCH: image address (8 bytes there: the handle of a loaded program),
  kernargs address, nbufs | nvars << 32. COPY: destination address, source address, nbytes. WAIT: signal address, value (the
  queue stops until the uint64 *signal >= value). SIGNAL: signal address, value (*signal = value once everything before it
  completed). TIMESTAMP: address (*address = a monotonic clock in ns). BARRIER: none."""
  LAUNCH = 1
  COPY = 2
  WAIT = 3
  SIGNAL = 4
  TIMESTAMP = 5
  BARRIER = 6

PLAIN = WordPackets({PlainOp.LAUNCH: 4, PlainOp.COPY: 4, PlainOp.WAIT: 3, PlainOp.SIGNAL: 3, PlainOp.TIMESTAMP: 2, PlainOp.BARRIER: 1})

@frozen_record
class HandleProgramData(ProgramData):
  """A kernel the processor loaded: the `handle` its image holds, its numbers of buffer and int32 arguments, and what was
  loaded (`program`): cached and captured submissions hold their ProgramData, so the program lives exactly as long as
  something can launch it."""
  handle: int = 0
  nbufs: int = 0
  nvars: int = 0
  program: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)

def handle_program(device: UOp, name: str, program: Any, nbufs: int, nvars: int) -> UOp:
  """pm_prep_program's loadable PROGRAM(DEVICE, BINARY(image)) for `program`, a kernel the device loaded under `program.handle`:
  the image is that handle (8 bytes), the kernargs one 8-byte slot per argument, the buffers' addresses then the variables."""
  n = 8 * (nbufs + nvars)
  data = HandleProgramData(name, n, 8, tuple(range(0, n, 8)), handle=program.handle, nbufs=nbufs, nvars=nvars, program=program)
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=struct.pack("<Q", program.handle))), arg=data)
