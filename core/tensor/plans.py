"""Built graphs replayed per signature: a builder's nodes recorded once as (op, dtype, sources, arg, tag) steps over its
input nodes, then rebuilt for the next inputs of the same signature without the builder's shape algebra and checks."""
from __future__ import annotations
from typing import Any, Callable, Sequence
from core.ir.ops import Ops, UOp, rebuild
from core.engine import realize_module
from core.engine.state import facts
from core.device.registry import Device

# at most this many plans (a few small tuples each and the constant nodes they make), all dropped when full
PLANS = 512
# the steps (op, dtype, sources, arg, arg's hash key, tag), the output's index, the nodes made from no input (constants, their
# device and broadcasts: kept, not remade), the output's (dtype, shape): a function of the key, as every step is
_Plan = tuple[tuple[tuple[Ops, Any, tuple[int, ...], Any, Any, Any], ...], int, tuple[UOp, ...], tuple[Any, Any]]
# an output's eager op cache key, its input BUFFER nodes and the nodes the key holds as themselves (core.engine.realize._op_key)
OpKey = tuple[tuple, list[UOp], list[UOp]]
_plans: dict[Any, _Plan | None] = {}   # None: the builder's graph can't be replayed, always built
# a builder may read its device's renderer (conv._pad_in_place: Renderer.large_conv_in_place), which a device name may change
Device.on_change(_plans.clear)

_NAMES_DATA = frozenset({Ops.BUFFER, Ops.UNIQUE})

# a replayable plan's output node is noted in the engine's facts with (key, inputs): an eager realize then keys its graph by
# the plan instead of walking its nodes (core/engine/realize.py: _walk_graph)
NOTE_PLANS = True

def _noted(key: Any, inputs: Sequence[UOp], out: UOp, plan: _Plan, op_key: OpKey | None) -> UOp:
  """out, noted as `key`'s plan over `inputs` (with its op key when made: pending) when it is made from them (not an input
  itself, as an identity move's output is, nor a constant)."""
  if NOTE_PLANS and plan[1] >= len(inputs) + len(plan[2]): facts.of(out).plan = (key, tuple(inputs), op_key)
  return out

def replayable(inputs: Sequence[UOp]) -> bool:
  """Whether the inputs are buffers (or reshapes of one, as a realized tensor is) of distinct buffers: then no input is a node
  built from another, so each node the builder made from them is rebuilt from the same inputs, whatever their values. (A
  weight that is x.detach() would be the builder's own DETACH of x: a plan recorded then would read the weight for it.)"""
  seen: list[UOp] = []
  for u in inputs:
    b = u.src[0] if u.op is Ops.RESHAPE else u
    if b.op is not Ops.BUFFER or b in seen: return False   # `in` compares by identity: UOp keeps object's __eq__
    seen.append(b)
  return True

def _record(out: UOp, inputs: Sequence[UOp]) -> _Plan | None:
  """out's nodes above the inputs as steps, sources before users, each source as its index in inputs + constants + steps;
  out's index (an input's where the builder returned it: an identity move); the constants: the nodes no input is below
  (they are the same nodes for every input). None where a node names a buffer (a builder that reached below an input, or
  made one): a replay would read this call's buffer for the next call's."""
  n = len(inputs)
  found: list[UOp] = []   # post-order
  seen = {id(u) for u in inputs}
  stack: list[tuple[UOp, bool]] = [(out, False)]
  while stack:
    u, ready = stack.pop()
    if ready:
      if u.op in _NAMES_DATA: return None
      found.append(u)
      continue
    if id(u) in seen: continue
    seen.add(id(u))
    stack.append((u, True))
    stack.extend((s, False) for s in reversed(u.src) if id(s) not in seen)
  const: set[int] = set()
  for u in found:
    if all(id(s) in const for s in u.src): const.add(id(u))
  consts = [u for u in found if id(u) in const]
  index = {id(u): i for i, u in enumerate([*inputs, *consts])}
  steps: list[tuple[Ops, Any, tuple[int, ...], Any, Any, Any]] = []
  for u in found:
    if id(u) in const: continue
    index[id(u)] = n + len(consts) + len(steps)
    steps.append((u.op, u.dtype, tuple(index[id(s)] for s in u.src), u.arg, u._key[3], u.tag))
  return tuple(steps), index[id(out)], tuple(consts), (out.dtype, out.shape)

_UNSEEN: Any = object()

def replayed(key: Any, inputs: Sequence[UOp], build: Callable[[], UOp], op_key: OpKey | None = None) -> UOp:
  """build()'s node for these inputs: replayed from the plan recorded under `key` (everything besides the inputs that build
  reads: shapes, dtypes, arguments) when the inputs are apart, else built (and recorded). build must make its nodes from
  the inputs and the key alone: no fresh buffers (a replay would share their unique ids) and no symbolic dims (nodes in args).
  `op_key`: the output's op key (core.engine.realize.plan_op_key), noted beside the plan where the caller made it."""
  if not replayable(inputs): return build()
  if (plan := _plans.get(key, _UNSEEN)) is _UNSEEN:
    out = build()
    if len(_plans) >= PLANS: _plans.clear()   # one step: safe while other threads build
    _plans[key] = rec = _record(out, inputs)
    return out if rec is None else _noted(key, inputs, out, rec, op_key)
  return build() if plan is None else _replay(key, inputs, plan, op_key)

def _replay(key: Any, inputs: Sequence[UOp], plan: _Plan, op_key: OpKey | None) -> UOp:
  """plan's output rebuilt over the inputs, noted, with its recorded shape: the general op a pending result meets next asks it
  (a node's first .shape walks its sources' first, ~2 us for a sum's nodes)."""
  nodes = [*inputs, *plan[2]]
  rebuild(nodes, plan[0])
  if "shape" not in (d := (out := nodes[plan[1]]).__dict__): d["shape"] = plan[3][1]
  return _noted(key, inputs, out, plan, op_key)

class PendingPlan(tuple):
  """(op key, its input BUFFER nodes, plan key, inputs, builder, the output's (dtype, shape), the op key's held nodes): the output
  of replayed(plan key, inputs, builder) whose node is not built yet, made where the plan is recorded or the eager op cache holds
  the output's op key (core.engine.realize.plan_op_key); an elementwise op may extend it (core.tensor.elementwise._plan_op). As
  PendingOp (core.tensor.elementwise) for x + 1: an eager realize runs the cache's plan from the op key alone (no nodes rebuilt,
  no op key made from them, no memo check, none torn down), and anything else that asks the tensor for its uop gets build()'s,
  the node replayed() would have made. Nothing can hold that node before it is built, so no graph, memo or gradient tells the
  difference."""
  __slots__ = ()
  scalar = False
  def build(self) -> UOp:
    # its inputs were found replayable when it was made; its plan is kept unless the table was cleared since
    if (plan := _plans.get(self[2])) is None: return replayed(self[2], self[3], self[4], (self[0], self[1], self[6]))
    return _replay(self[2], self[3], plan, (self[0], self[1], self[6]))   # its op key noted

def pending(key: Any, inputs: tuple[UOp, ...], build: Callable[[], UOp]) -> PendingPlan | UOp:
  """replayed(key, inputs, build)'s output: left unbuilt (PendingPlan) when the plan is recorded (recorded first if new: its
  (dtype, shape) is then known, so `x.layernorm(-1) * w + b` extends it before anything realizes) or the eager op cache holds
  its op key; built where the builder's graph can't be replayed."""
  if not NOTE_PLANS or not replayable(inputs): return replayed(key, inputs, build)
  return _pending(key, inputs, build, realize_module().plan_op_key(key, inputs))

def extended(p: PendingPlan, key: Any, y: UOp, build: Callable[[], UOp]) -> PendingPlan | UOp | None:
  """pending(key, (*p's inputs, y), build) for a plan over p's inputs and one more, y (a BUFFER or a RESHAPE of one), its op key
  made from p's: plan_op_key keys each input on its own, so p's parts are its prefix and only y's buffer needs the test that
  it is none of p's (replayable's). None where it is one of them."""
  b = y.src[0] if y.op is Ops.RESHAPE else y
  if b in p[1]: return None
  part = (b.dtype, b.arg, b.src[1]) if b is y else (y._key[3], b.dtype, b.arg, b.src[1])
  return _pending(key, (*p[3], y), build, ((p[0][0], key, *p[0][2:], part), [*p[1], b], p[6]))

def scaled(p: PendingPlan, key: Any, build: Callable[[], UOp]) -> PendingPlan | UOp:
  """pending(key, p's inputs, build) for a plan over p's inputs alone (p's output and a scalar), its op key made from p's."""
  return _pending(key, p[3], build, ((p[0][0], key, *p[0][2:]), p[1], p[6]))

def _pending(key: Any, inputs: tuple[UOp, ...], build: Callable[[], UOp], ok: OpKey) -> PendingPlan | UOp:
  """pending()'s answer for replayable inputs whose op key is ok."""
  if (plan := _plans.get(key, _UNSEEN)) is _UNSEEN:
    # recorded now, the node dropped (a replay remakes it): the first call's graph is then the one every later call's is, so
    # their schedule and op key are one from the start
    out = replayed(key, inputs, build, ok)
    if (plan := _plans.get(key)) is None: return out
  elif plan is None and ok[0] not in realize_module().eager_ops.table: return build()
  return PendingPlan((ok[0], ok[1], key, inputs, build, None if plan is None else plan[3], ok[2]))

# A tensor's latest pending results by call: `x.sum()` makes the same PendingPlan for the same node every time (its realize reads
# the buffers as they are then, so an in-place write changes nothing; where the plan tables changed since, its realize and its
# node fall back to building, as any PendingPlan's do), so a repeat takes it from the tensor instead of remaking the reduction's
# key and checks: after a big kernel has flushed the caches those were ~30 us of a 64 MiB sum's ~80 us of Python, the repeat
# ~10 us. Kept as (the node, {call: PendingPlan}), at most AGAIN calls, dropped once the tensor holds another node.
AGAIN = 4

def again(t: Any, call: tuple) -> Any:
  """A new tensor over the PendingPlan that `call` made last from t's current node (kept by keep), or None."""
  if (kept := (d := t.__dict__).get("_again")) is None: return None
  if kept[0] is not d.get("uop"):   # another node now (to_, replace): the old one is not kept alive
    del d["_again"]
    return None
  return None if (p := kept[1].get(call)) is None or (rg := t._requires_grad) is True else type(t)(p, None, None, rg)

def keep(t: Any, call: tuple, out: Any) -> Any:
  """out, `call` on t, kept on t for again() when it is pending (a PendingPlan over t's realized node)."""
  if type(p := out.__dict__.get("_pending")) is PendingPlan and (u := (d := t.__dict__).get("uop")) is not None:
    if (kept := d.get("_again")) is None or kept[0] is not u or len(kept[1]) >= AGAIN: d["_again"] = (u, {call: p})
    else: kept[1][call] = p
  return out

def forget(t: Any) -> None:
  """Drops what t keeps for again(): its node is being replaced."""
  t.__dict__.pop("_again", None)
