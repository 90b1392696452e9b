"""realize(): schedule tensor graphs, run the kernels, and remember which nodes now live in buffers."""
from __future__ import annotations
import collections, weakref
from core.ir.dtype import DType
from core.ir.ops import UOp, Ops, GroupOp, sym_val
from core.schedule.kernelize import create_schedule, ScheduleItem
from core.schedule.memory import plan_memory
from core.schedule.realize_points import contiguous_buffer
from core.engine.run import buffer_of
from core.helpers import prod

# tensor node -> (the uop over the buffer holding its value, that buffer's version); dies with the node.
# A buffer's version goes up when something is assigned into it, which retires every memo entry pointing at it.
_realized: weakref.WeakKeyDictionary[UOp, tuple[UOp, int]] = weakref.WeakKeyDictionary()
_version: weakref.WeakKeyDictionary[UOp, int] = weakref.WeakKeyDictionary()

def _base(u: UOp) -> UOp:
  while u.op in GroupOp.Movement: u = u.src[0]
  return u

def _memo(u: UOp) -> UOp | None:
  if (e := _realized.get(u)) is None: return None
  res, ver = e
  return res if _version.get(_base(res), 0) == ver else None

# an ASSIGN that has run is its target from then on, whatever is assigned to that buffer later: it must never run twice
_assigned: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()

def _substitute_realized(roots: list[UOp]) -> list[UOp]:
  """Reuse buffers of already computed subgraphs. The roots themselves always get fresh buffers, so two tensors built the
  same way never share storage that one of them may later assign into (assigns that ran are reused everywhere)."""
  rootset = set(roots)
  sink = UOp(Ops.SINK, src=tuple(roots))
  known = {}
  for u in sink.toposort(gate=lambda u: u not in _assigned and (u in rootset or _memo(u) is None)):
    if (a := _assigned.get(u)) is not None: known[u] = a
    elif u not in rootset and (m := _memo(u)) is not None: known[u] = m
  return list(sink.substitute(known).src) if known else roots

def is_realized(u: UOp) -> bool:
  """A BUFFER, or a reshape of one: its bytes are already in row-major order in memory."""
  return contiguous_buffer(u) is not None

def run_schedule(items: list[ScheduleItem], var_vals: dict[UOp, int] | None = None) -> None:
  from core.engine.run import run_items   # HCQ devices run whole schedules through core/hcq
  run_items(items, var_vals)

# *** schedule cache: a graph that differs only in which buffers it reads reuses the schedule (eager ops repeat) ***

# structural key -> (planned items over placeholders, each root's result, variable values)
_schedule_cache: collections.OrderedDict[tuple, tuple[list[ScheduleItem], list[UOp], dict[UOp, int], list[UOp]]] = collections.OrderedDict()
SCHEDULE_CACHE_SIZE = 2048

def _placeholder(b: UOp, i: int) -> UOp: return UOp(Ops.BUFFER, b.dtype, (UOp(Ops.UNIQUE, arg=("input", i)), b.src[1]), b.arg)

def _walk(roots: list[UOp], check_memo: bool) -> tuple[tuple, list[UOp], bool, bool] | None:
  """One pass over the graphs: (structural key, input buffers in order, has ASSIGN, has BIND); None when part of it is
  already computed (a memo hit or an ASSIGN that ran) and must be substituted first. The key is the graph with its
  buffers numbered, so two graphs with equal keys differ only in which buffers they read."""
  rootset = set(roots)
  stop = False
  def gate(u: UOp) -> bool:
    nonlocal stop
    if u.op is Ops.BUFFER: return False
    if check_memo and (u in _assigned or (u not in rootset and _memo(u) is not None)):
      stop = True
      return False
    return True
  order = UOp(Ops.SINK, src=tuple(roots)).toposort(gate=gate)
  if stop: return None
  idx: dict[UOp, int] = {}
  key: list[tuple] = []
  inputs: list[UOp] = []
  has_assign = has_bind = False
  for u in order:
    idx[u] = len(key)
    if u.op is Ops.BUFFER:
      key.append((Ops.BUFFER, u.dtype, u.arg, u.src[1].arg, len(inputs)))
      inputs.append(u)
      continue
    if u.op is Ops.ASSIGN: has_assign = True
    elif u.op is Ops.BIND: has_bind = True
    key.append((u.op, u.dtype, u._key[3], u.tag, tuple([idx[x] for x in u.src])))
  return tuple(key), inputs, has_assign, has_bind

def _scheduled(todo: list[UOp], key: tuple, inputs: list[UOp]) -> tuple[list[ScheduleItem], list[UOp], dict[UOp, int]]:
  """(planned items, each root's result, variable values) for `todo`, from the cache when possible."""
  if (hit := _schedule_cache.get(key)) is None:
    to_ph = {b: _placeholder(b, i) for i, b in enumerate(inputs)}
    ph_sink = UOp(Ops.SINK, src=tuple(todo)).substitute(to_ph)
    items, results, var_vals = create_schedule(list(ph_sink.src))
    res = [results[r] for r in ph_sink.src]
    items = plan_memory(items, set(to_ph.values()) | {_base(r) for r in res})
    hit = _schedule_cache[key] = (items, res, var_vals, list(to_ph.values()))
    if len(_schedule_cache) > SCHEDULE_CACHE_SIZE: _schedule_cache.popitem(last=False)
  else: _schedule_cache.move_to_end(key)
  items, res, var_vals, phs = hit
  # placeholders back to this call's buffers; buffers the schedule creates are fresh for every call
  back: dict[UOp, UOp] = dict(zip(phs, inputs))
  new_items = []
  for it in items:
    for b in it.bufs:
      if b not in back: back[b] = UOp.new_buffer(b.src[1].arg, b.arg, b.dtype)
    new_items.append(ScheduleItem(it.ast, tuple([back[b] for b in it.bufs])))
  return new_items, [r.substitute(back) for r in res], var_vals

def realize(*roots: UOp) -> list[UOp]:
  """Compute the graphs `roots`; return for each an equivalent uop over a realized buffer."""
  from core.engine.jit import capturing
  todo, substituted = list(roots), False
  if (w := _walk(todo, check_memo=True)) is None:
    todo, substituted = _substitute_realized(todo), True
    w = _walk(todo, check_memo=False)
    assert w is not None
  key, inputs, has_assign, _ = w
  items, res_list, var_vals = _scheduled(todo, key, inputs)
  if capturing is not None: capturing.add(items)
  run_schedule(items, var_vals)
  if has_assign or substituted:
    inset = set(inputs)
    for it in items:
      if it.bufs and it.bufs[0] in inset: _version[it.bufs[0]] = _version.get(it.bufs[0], 0) + 1
    # the caller's graphs (before memo substitution) hold the ASSIGN nodes other tensors may still reference
    for u in UOp(Ops.SINK, src=tuple(roots) + tuple(todo)).toposort(gate=lambda u: u.op is not Ops.BUFFER and u not in _assigned):
      if u.op is Ops.ASSIGN and u not in _assigned: _assigned[u] = u.src[0]
  out = []
  for r, res in zip(roots, res_list):
    if r is not res and not is_realized(r): _realized[r] = (res, _version.get(_base(res), 0))
    out.append(res)
  return out

def from_host(data: memoryview | bytes | bytearray, dtype: DType, device: str, shape: tuple[int, ...]) -> UOp:
  """A realized uop holding a copy of `data` (row-major bytes of `shape`)."""
  n = prod(shape)
  mv = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" or data.ndim != 1 else data
  if mv.nbytes != n * dtype.itemsize: raise ValueError(f"from_host: {mv.nbytes} bytes given for shape {shape} of {dtype}")
  u = UOp.new_buffer(device, n, dtype)
  buf = buffer_of(u).allocate()
  if n: buf.copyin(mv)
  return u.reshape(shape)

def to_host(u: UOp) -> memoryview:
  """Realize `u` and return its bytes, row-major and contiguous."""
  r = realize(u)[0]
  if (cb := contiguous_buffer(r)) is None: raise RuntimeError(f"to_host: {r.op.name} did not realize to a buffer")
  buf = buffer_of(cb[0])
  out = memoryview(bytearray(buf.nbytes))
  if buf.nbytes:
    if not buf.is_allocated(): buf.allocate()
    buf.copyout(out)
  # symbolic shapes use the start of a buffer sized for the largest value their variables allow
  return out[:sym_val(cb[1]) * buf.dtype.itemsize]

