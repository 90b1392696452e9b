"""Memory planner: intermediate buffers whose lifetimes don't overlap share one allocation."""
from __future__ import annotations
from core.ir.ops import UOp, Ops
from core.schedule.kernelize import ScheduleItem

def plan_memory(items: list[ScheduleItem], keep: set[UOp]) -> list[ScheduleItem]:
  """Rewrite `items` so that a buffer created by the schedule and dead after step i is reused by a later one of the same
  device, size and dtype. Buffers in `keep` (outputs, inputs) are never shared."""
  first: dict[UOp, int] = {}
  last: dict[UOp, int] = {}
  for i, it in enumerate(items):
    for b in it.bufs:
      first.setdefault(b, i)
      last[b] = i
  # only buffers this schedule creates (written first, by its own step) are candidates
  temps = [b for b in first if b not in keep and items[first[b]].bufs[0] is b and b.op is Ops.BUFFER]
  free: dict[tuple, list[UOp]] = {}
  assign: dict[UOp, UOp] = {}
  events = sorted([(first[b], 1, b) for b in temps] + [(last[b], 0, b) for b in temps], key=lambda e: (e[0], -e[1]))
  # allocate at first use, release after last use (a buffer read and written in one step is not released early)
  released: list[tuple[int, UOp]] = []
  for step, kind, b in events:
    for rs, rb in list(released):
      if rs < step:
        free.setdefault((rb.src[1].arg, rb.arg, rb.dtype), []).append(assign.get(rb, rb))
        released.remove((rs, rb))
    if kind == 1:
      pool = free.get((b.src[1].arg, b.arg, b.dtype))
      if pool: assign[b] = pool.pop()
    else: released.append((step, b))
  if not assign: return items
  return [ScheduleItem(it.ast, tuple(assign.get(b, b) for b in it.bufs)) for it in items]
