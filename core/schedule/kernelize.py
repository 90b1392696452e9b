"""Cut a tensor graph into kernels and emit the linear schedule: a `LINEAR` of `CALL(kernel, *buffers)`."""
from __future__ import annotations
import functools
from dataclasses import dataclass
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, GroupOp
from core.ir.pattern import graph_rewrite, PatternMatcher, UPat
from core.schedule.realize_points import find_realize_points
from core.schedule.indexing import pm_index, KernelCtx, push, flat_index, output_ranges, TRUE
from core.helpers import prod

@dataclass
class ScheduleItem:
  """One step of the schedule: a kernel (SINK) or a COPY, and the BUFFER uops it touches, output first."""
  ast: UOp
  bufs: tuple[UOp, ...]

# gradient markers have no runtime meaning
pm_strip_markers = PatternMatcher([
  (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), name="x"), lambda x: x.src[0]),
], name="strip markers")

def _kernel_name(ast: UOp, shape: tuple) -> str:
  has_reduce = any(u.op is Ops.REDUCE for u in ast.toposort())
  return ("r_" if has_reduce else "E_") + "_".join(str(d) for d in shape if d != 1) if shape else ("r" if has_reduce else "E")

def _store_kernel(ctx: KernelCtx, out_buf: UOp, out_view: UOp | None, value: UOp, shape: tuple) -> UOp:
  """SINK(STORE(INDEX(out, idx), value at idx).end(ranges)); `out_view` is a movement chain over out_buf (for ASSIGN)."""
  ranges = output_ranges(ctx, shape)
  out_param = ctx.param_for(out_buf)
  if out_view is None: target = UOp(Ops.INDEX, out_param.dtype, (out_param, flat_index(tuple(ranges), shape)))
  else:
    # the store location is found the same way as a load: push the index through the view to the buffer
    target = graph_rewrite(push(out_view, TRUE, tuple(ranges)), _pm_index_symbolic(), ctx, name="index store")
    # a PAD inside the view only marks elements that are never stored; its gate stays on the INDEX
    while target.op is Ops.WHERE: target = target.src[1]
    if target.op is not Ops.LOAD: raise RuntimeError(f"can't assign through this view of the buffer ({out_view.op.name})")
    target = target.src[0]
  st = target.store(push(value, TRUE, tuple(ranges)))
  for r in reversed([r for r in ranges if r.op is Ops.RANGE]): st = st.end(r)
  return UOp(Ops.SINK, dtypes.void, (st,))

def create_schedule(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Kernels to run, in order, and a map from each root to the UOp over its realized buffer."""
  sink = graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(roots)), pm_strip_markers, name="strip markers")
  # results are keyed by the caller's roots, which may still hold DETACH/CONTIGUOUS_BACKWARD markers
  orig_roots, roots = list(roots), list(sink.src)
  points = find_realize_points(sink)
  items: list[ScheduleItem] = []
  done: dict[UOp, UOp] = {}   # realize point -> its result (a BUFFER, reshaped to the point's shape)
  for u in sink.toposort(gate=lambda u: u.op is not Ops.BUFFER):
    if u not in points: continue
    # everything below that was realized already is read from its buffer
    val = u.substitute({k: v for k, v in done.items() if k is not u}) if done else u
    shape = u.shape
    assert shape is not None, f"{u.op.name} has no shape"
    if u.op is Ops.COPY:
      src = val.src[0]
      src_buf = src.base
      if src_buf.op is not Ops.BUFFER or any(x.op is not Ops.RESHAPE for x in _chain(src)):
        raise RuntimeError("COPY source must be realized contiguous")
      out = UOp.new_buffer(u.device, prod(shape), u.dtype)
      items.append(ScheduleItem(UOp(Ops.COPY, u.dtype, (src_buf, UOp(Ops.DEVICE, arg=u.device))), (out, src_buf)))
      done[u] = out.reshape(shape)
      continue
    ctx = KernelCtx()
    if u.op is Ops.ASSIGN:
      target, value = val.src
      out_buf = target.base
      if out_buf.op is not Ops.BUFFER: raise RuntimeError("ASSIGN target must be a realized buffer")
      # reading the target elsewhere than at the stored element would race with the writes: compute into a temp first
      if _unsafe_self_read(value, target, out_buf):
        tmp = UOp.new_buffer(u.device, prod(shape), u.dtype)
        tctx = KernelCtx()
        tctx.param_for(tmp)
        items.append(_item(_store_kernel(tctx, tmp, None, value, shape), tctx, shape))
        value = tmp.reshape(shape)
      ctx.param_for(out_buf)
      plain = target is out_buf or (target.op is Ops.RESHAPE and target.src[0] is out_buf)
      ast = _store_kernel(ctx, out_buf, None if plain else target, value, shape)
      items.append(_item(ast, ctx, shape))
      done[u] = target
      continue
    out = UOp.new_buffer(u.device, prod(shape), u.dtype)
    ctx.param_for(out)
    body = val.src[0] if val.op is Ops.CONTIGUOUS else val
    items.append(_item(_store_kernel(ctx, out, None, body, shape), ctx, shape))
    done[u] = out.reshape(shape)
  results = {}
  for o, r in zip(orig_roots, roots): results[o] = done.get(r, r)
  return items, results

def _chain(u: UOp) -> list[UOp]:
  out = []
  while u.op in GroupOp.Movement:
    out.append(u)
    u = u.src[0]
  return out

def _unsafe_self_read(value: UOp, target: UOp, buf: UOp) -> bool:
  """Whether `value` reads the assigned buffer anywhere but at the element being written."""
  for x in value.toposort(gate=lambda x: x is not target):
    if x is target: continue
    if target in x.src and x.op not in GroupOp.Elementwise: return True
    if buf in x.src and (target is not buf or x.op not in GroupOp.Elementwise): return True
  return False

@functools.cache
def _pm_index_symbolic() -> PatternMatcher:
  from core.ir.symbolic import symbolic
  return pm_index + symbolic

def _item(ast: UOp, ctx: KernelCtx, shape: tuple) -> ScheduleItem:
  ast = graph_rewrite(ast, _pm_index_symbolic(), ctx, name="index")
  ast = ast.replace(arg=_kernel_name(ast, shape))
  bufs = tuple(sorted(ctx.params, key=lambda b: ctx.params[b].arg))
  return ScheduleItem(ast, bufs)
