"""Decide which tensor-level nodes become buffers (kernel boundaries)."""
from __future__ import annotations
from core.ir.ops import UOp, Ops, GroupOp

def _expands_through_movement(u: UOp, users: dict[UOp, list[UOp]]) -> bool:
  """True if some path of movement ops from u reaches an EXPAND that grows a dimension."""
  stack = list(users.get(u, []))
  while stack:
    x = stack.pop()
    if x.op is Ops.EXPAND and x.src[0].shape != x.shape: return True
    if x.op in GroupOp.Movement: stack.extend(users.get(x, []))
  return False

def find_realize_points(sink: UOp) -> set[UOp]:
  """Nodes whose values must live in a buffer: the outputs, explicit CONTIGUOUS, copies, assigns, and reductions
  that would otherwise be recomputed (used twice, or broadcast into a bigger shape)."""
  users: dict[UOp, list[UOp]] = {}
  nodes = list(sink.toposort(gate=lambda u: u.op is not Ops.BUFFER))
  for u in nodes:
    for s in u.src: users.setdefault(s, []).append(u)
  points: set[UOp] = set()
  for s in sink.src:
    if s.base.op is not Ops.BUFFER or any(x.op is not Ops.RESHAPE for x in _movement_chain(s)): points.add(s)
  for u in nodes:
    if u.op in (Ops.CONTIGUOUS, Ops.ASSIGN, Ops.COPY): points.add(u)
    if u.op is Ops.COPY and u.src[0].base.op is not Ops.BUFFER: points.add(u.src[0])
    if u.op is Ops.REDUCE_AXIS and (len(set(users.get(u, []))) > 1 or _expands_through_movement(u, users)): points.add(u)
  return points

def _movement_chain(u: UOp) -> list[UOp]:
  out = []
  while u.op in GroupOp.Movement:
    out.append(u)
    u = u.src[0]
  return out
