"""Replay a captured schedule with the least work per kernel: runners, buffers and argument slots resolved once."""
from __future__ import annotations
from typing import Any
from core.ir.ops import UOp, Ops
from core.device.buffer import Buffer
from core.device.counters import tallies
from core.engine.run import buffer_of, get_runner, run_item, _ensure
from core.codegen.program import launch_vals
from core.device import profiler

class DirectReplay:
  """The items of a Jit capture on direct-path devices. `inputs[i]` replaces the captured buffer `input_bufs[i]`."""
  def __init__(self, items: list[Any], input_bufs: list[UOp]):
    pos = {b: i for i, b in enumerate(input_bufs)}
    self.items = items
    # per item: argument slots (index into the inputs, or -1: the captured buffer in `fixed`), and for kernels the runner
    # and its variable names; copies (runner None) go through run_item
    self.slots = [[pos.get(b, -1) for b in it.bufs] for it in items]
    self.fixed = [[None if b in pos else _ensure(buffer_of(b)) for b in it.bufs] for it in items]
    self.runners: list[Any] = []
    for it, slots in zip(items, self.slots):
      if it.ast.op is Ops.COPY or not it.bufs: self.runners.append(None)
      else: self.runners.append(get_runner(it.ast, it.bufs[0].src[1].arg))

  def __call__(self, inputs: list[Buffer], var_vals: dict[UOp, int]) -> None:
    for b in inputs: _ensure(b)
    by_arg = {v.arg: val for v, val in var_vals.items()}
    for it, runner, slots, fixed in zip(self.items, self.runners, self.slots, self.fixed):
      bufs: list[Buffer] = [inputs[s] if s >= 0 else f for s, f in zip(slots, fixed)]  # type: ignore[misc]
      if runner is None or profiler.timing():
        run_item(it.ast, bufs, var_vals)
        continue
      if bufs[0].size == 0: continue
      spec = runner.spec
      runner.prg(*[b._buf for b in bufs], global_size=spec.global_size, local_size=spec.local_size, vals=launch_vals(spec, by_arg))
      tallies.kernel_count += 1
      tallies.global_ops += spec.estimates.get("ops", 0)
      tallies.global_mem += spec.estimates.get("mem", 0)
