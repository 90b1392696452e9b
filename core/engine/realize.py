"""realize(): schedule tensor graphs, run the kernels, and remember which nodes now live in buffers."""
from __future__ import annotations
import weakref
from core.ir.dtype import DType
from core.ir.ops import UOp, Ops, GroupOp, sym_val
from core.schedule.kernelize import create_schedule, ScheduleItem
from core.schedule.memory import plan_memory
from core.schedule.realize_points import contiguous_buffer
from core.engine.run import buffer_of, run_item
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

def _substitute_realized(roots: list[UOp]) -> list[UOp]:
  """Reuse buffers of already computed subgraphs. The roots themselves always get fresh buffers, so two tensors built the
  same way never share storage that one of them may later assign into."""
  rootset = set(roots)
  sink = UOp(Ops.SINK, src=tuple(roots))
  known = {}
  for u in sink.toposort(gate=lambda u: u in rootset or _memo(u) is None):
    if u not in rootset and (m := _memo(u)) is not None: known[u] = m
  return list(sink.substitute(known).src) if known else roots

def is_realized(u: UOp) -> bool:
  """A BUFFER, or a reshape of one: its bytes are already in row-major order in memory."""
  return contiguous_buffer(u) is not None

def run_schedule(items: list[ScheduleItem], var_vals: dict[UOp, int] | None = None) -> None:
  for it in items: run_item(it.ast, [buffer_of(b) for b in it.bufs], var_vals)

def realize(*roots: UOp) -> list[UOp]:
  """Compute the graphs `roots`; return for each an equivalent uop over a realized buffer."""
  from core.engine.jit import capturing
  todo = _substitute_realized(list(roots))
  items, results, var_vals = create_schedule(todo)
  inputs = {b for r in todo for b in r.toposort() if b.op is Ops.BUFFER}
  items = plan_memory(items, inputs | {_base(r) for r in results.values()})
  if capturing is not None: capturing.add(items)
  run_schedule(items, var_vals)
  for it in items:
    if it.bufs and it.bufs[0] in inputs: _version[it.bufs[0]] = _version.get(it.bufs[0], 0) + 1
  out = []
  for r, t in zip(roots, todo):
    res = results[t]
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

_ = GroupOp
