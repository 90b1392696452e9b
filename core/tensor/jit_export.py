"""A captured Jit as a CompiledGraph (core/engine/export.py): its kernels' binaries and its buffers, to save and replay later
without compiling."""
from __future__ import annotations
from typing import Any
from core.engine.export import CompiledFileError, CompiledGraph, export_items
from core.schedule.realize_points import contiguous_buffer
from core.tensor.jit import Jit, JitError

def export_jit(jit: Jit, meta: dict[str, Any] | None = None) -> CompiledGraph:
  """The kernels `jit` captured: its Tensor inputs in call order are the graph's inputs, the buffers of the Tensors it returns its
  outputs, and every other buffer a kernel reads before writing is a weight saved with its bytes. Needs a capture (two calls)
  with fixed shapes and no random draws (a saved program can't refill the random counter)."""
  if jit.cnt < 2: raise JitError("export_jit needs a captured Jit: call it twice first")
  if jit.rng_draws: raise JitError("export_jit: the function draws random numbers, which a saved program can't refill")
  outs = []
  for u in jit.ret_uops:
    if (cb := contiguous_buffer(u)) is None or cb[1] != cb[0].arg:
      raise CompiledFileError(f"export_jit: a returned Tensor is a view ({u.op.name}), not a whole buffer: return .contiguous()")
    outs.append(cb[0])
  return export_items(jit.items, jit.input_bufs, outs, meta)
