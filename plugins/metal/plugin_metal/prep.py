"""pm_prep_program (ctx: the device's MetalHCQ): a compiled kernel (its MSL) -> the pipeline the interface built for it; the image is
the pipeline's 8-byte handle, the kernargs one 8-byte slot per argument (buffer addresses, then int32 variables)."""
from __future__ import annotations
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher
from core.hcq.queue_ir import ProgramData
from core.codegen.program import compiled_program

if TYPE_CHECKING:
  from plugin_metal.queues import MetalHCQ

@dataclass(frozen=True)
class MetalProgramData(ProgramData):
  """A kernel as a pipeline state: its handle (the image), its buffer count (arguments past it are variables)."""
  handle: int = 0
  nbufs: int = 0
  program: Any = field(default=None, compare=False, hash=False, repr=False)   # keeps the program the handle names loaded

def prep_program(ctx: MetalHCQ, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  spec = p.arg
  nbufs = sum(1 for u in linear.src if u.op is Ops.PARAM)
  nargs = nbufs + len(spec.vars)
  handle, prg = ctx.load_program(spec.name, binary.arg)
  data = MetalProgramData(spec.name, 8 * nargs, 8, tuple(range(0, 8 * nargs, 8)), handle=handle, nbufs=nbufs, program=prg)
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=struct.pack("<Q", handle))), arg=data)

pm_prep_program = PatternMatcher([(compiled_program, prep_program)], name="metal prep program")
