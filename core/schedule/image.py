"""IMAGE=1/2 in the schedule: mark the kernel parameters that may be read (and with IMAGE=2 written) as 2-D images.

The schedule knows where a buffer comes from, codegen knows what the device can do: here a parameter is only marked (tag
`image` on its PARAM); core.codegen.image makes it an image where the renderer has images and the buffer fits their limits,
and demotes it to a plain buffer otherwise. IMAGE=1 marks the weights: float buffers a kernel reads that no kernel of this
schedule writes (realized inputs). IMAGE=2 also marks the buffers the schedule itself creates and writes. The memory stays a
row-major buffer either way (an image of (h, w) pixels has the same bytes), so one kernel may read as an image what another
wrote as a plain buffer."""
from __future__ import annotations
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops

IMAGE_CANDIDATE = "image"   # the PARAM tag core.codegen.image reads (the same string: schedule and codegen don't import each other)

def mark_images(ast: UOp, bufs: tuple[UOp, ...], written: set[UOp], level: int) -> UOp:
  """The kernel `ast` (PARAM i reads or writes bufs[i]) with its image candidates tagged."""
  if ast.op is not Ops.SINK or level <= 0: return ast
  sub = {}
  for p in ast.toposort():
    if p.op is not Ops.PARAM or p.tag is not None or p.arg >= len(bufs): continue
    b = bufs[p.arg]
    if b.dtype not in (dtypes.float32, dtypes.float16): continue
    if b not in written or level >= 2: sub[p] = p.replace(tag=IMAGE_CANDIDATE)
  return ast.substitute(sub) if sub else ast
