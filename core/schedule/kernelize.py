"""Cut a tensor graph into kernels and emit the linear schedule: a `LINEAR` of `CALL(kernel, *buffers)`."""
from __future__ import annotations
import functools
from typing import Callable, cast
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, GroupOp, arg_uops, map_arg
from core.ir.pattern import graph_rewrite, PatternMatcher, UPat
from core.schedule.realize_points import find_realize_points, contiguous_buffer
from core.schedule.indexing import pm_index, KernelCtx, push, flat_index, output_ranges, TRUE
from core.schedule.split_reduce import pm_split_reduce
from core.helpers import LRUCache, mutable_record, prod, SPEC, NOOPT, IMAGE

@mutable_record
class ScheduleItem:
  """One step of the schedule: a kernel (SINK) or a COPY, and the BUFFER uops it touches, output first."""
  ast: UOp
  bufs: tuple[UOp, ...]

def _no_elements(x: UOp) -> bool:
  """x is a tensor-level value with a zero-size dim that is not already a constant."""
  if x.op in (Ops.CONST, Ops.DEVICE, Ops.UNIQUE, Ops.SINK) or not isinstance(x.device, str) or not any(type(d) is int and d == 0 for d in x.shape or ()):
    return False
  return x.base.op is not Ops.CONST

# gradient markers have no runtime meaning; a value with no elements is any constant, so no kernel reads an empty buffer
# (its memory is a null pointer, which some devices refuse as a kernel argument) and none computes one
pm_strip_markers = PatternMatcher([
  (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), name="x"), lambda x: x.src[0]),
  (UPat(name="x", custom=_no_elements), lambda x: UOp.const(x.dtype, 0, cast(str, x.device), x.shape)),
], name="strip markers")

def _kernel_name(ast: UOp, shape: tuple) -> str:
  has_reduce = any(u.op is Ops.REDUCE for u in ast.toposort())
  dims = [str(d) if isinstance(d, int) else "_".join(v.arg[0] for v in d.variables()) or "s" for d in shape if not (isinstance(d, int) and d == 1)]
  return ("r_" if has_reduce else "E_") + "_".join(dims) if shape else ("r" if has_reduce else "E")

# *** symbolic shapes: variables are bound in the tensor graph, unbound (plain DEFINE_VAR) in kernels ***

def _bind_map(sink: UOp) -> dict[UOp, UOp]:
  """{BIND: its variable} for every bound variable in the graph, in sources or inside movement args."""
  out: dict[UOp, UOp] = {}
  for u in sink.toposort():
    for x in [u] + [y for a in arg_uops(u.arg) for y in a.toposort()]:
      if x.op is Ops.BIND: out[x] = x.src[0]
  return out

def _unbind(sink: UOp, binds: dict[UOp, UOp]) -> UOp:
  pm = PatternMatcher([
    (UPat(Ops.BIND, name="b"), lambda b: b.src[0]),
    (UPat(GroupOp.Movement, name="x", custom=lambda x: bool(arg_uops(x.arg))),
     lambda x: None if (na := map_arg(x.arg, lambda a: a.substitute(binds))) == x.arg else x.replace(arg=na)),
  ])
  return graph_rewrite(sink, pm, name="unbind")

def rebind(u: UOp, var_vals: dict[UOp, int]) -> UOp:
  """Bind the variables in u's symbolic shapes to `var_vals` (replacing any earlier binding)."""
  if not var_vals: return u
  sub = {v: v.bind(val) for v, val in var_vals.items()}
  def bind(a: UOp) -> UOp:
    unbound = a.substitute({y: y.src[0] for y in a.toposort() if y.op is Ops.BIND})
    return unbound.substitute({v: b for v, b in sub.items() if v in unbound.toposort()}) if unbound is not a or any(
      v in a.toposort() for v in sub) else a
  pm = PatternMatcher([(UPat(GroupOp.Movement, name="x", custom=lambda x: bool(arg_uops(x.arg))),
                        lambda x: None if (na := map_arg(x.arg, bind)) == x.arg else x.replace(arg=na))])
  return graph_rewrite(u, pm, name="rebind")

def _new_output(device: str, shape: tuple, dtype) -> tuple[UOp, UOp]:
  """A fresh buffer for a value of `shape` and the view of it with that shape. A symbolic shape gets room for the
  largest value its variables allow, and the view covers the part in use."""
  n = prod(shape)
  if isinstance(n, int):
    out = UOp.new_buffer(device, n, dtype)
    return out, out.reshape(shape)
  out = UOp.new_buffer(device, int(n.vmax), dtype)
  return out, out.shrink(((0, n),)).reshape(shape)

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

def create_schedule(roots: list[UOp], fuse_rows: Callable[[str], bool] = lambda device: True) -> tuple[list[ScheduleItem], dict[UOp, UOp], dict[UOp, int]]:
  """Kernels to run, in order; a map from each root to the UOp over its realized buffer; the values of the variables
  the kernels take (symbolic shapes are unbound in kernels so one compiled kernel serves every value). `fuse_rows`: see
  find_realize_points."""
  # results are keyed by the caller's roots, which may still hold DETACH/CONTIGUOUS_BACKWARD markers and bound variables
  orig_roots = list(roots)
  sink = graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(roots)), pm_strip_markers, name="strip markers")
  binds = _bind_map(sink)
  var_vals = {v: b.src[1].arg for b, v in binds.items()}
  if binds: sink = _unbind(sink, binds)
  if not NOOPT: sink = graph_rewrite(sink, pm_split_reduce, name="split reduce")
  roots = list(sink.src)
  if SPEC:
    from core.ir.spec import type_verify, tensor_spec
    type_verify(sink, tensor_spec)
  points = find_realize_points(sink, fuse_rows)
  items: list[ScheduleItem] = []
  done: dict[UOp, UOp] = {}   # realize point -> its result (a BUFFER, reshaped to the point's shape)
  order, cyclic = _order_points(sink, points)
  saved: dict[UOp, UOp] = {}   # assign in a cycle -> its value, computed into a temporary before the cycle's writes
  for u in order:
    # everything below that was realized already is read from its buffer
    val = u.substitute(done) if done else u   # (u itself is not done yet)
    shape = u.shape
    assert shape is not None, f"{u.op.name} has no shape"
    if u.op is Ops.COPY:
      if (cb := contiguous_buffer(val.src[0])) is None: raise RuntimeError("COPY source must be realized contiguous")
      src_buf = cb[0]
      out, view = _new_output(cast(str, u.device), shape, u.dtype)  # tensor-level nodes always have a device
      items.append(ScheduleItem(UOp(Ops.COPY, u.dtype, (src_buf, UOp(Ops.DEVICE, arg=u.device))), (out, src_buf)))
      done[u] = view
      continue
    ctx = KernelCtx()
    if u.op is Ops.ASSIGN:
      target, value = val.src
      out_buf = target.base
      if out_buf.op is not Ops.BUFFER: raise RuntimeError("ASSIGN target must be a realized buffer")
      if u in cyclic and not saved:
        for c in [c for c in order if c in cyclic and not any(d in cyclic and d is not c for d in c.src[1].toposort())]:
          saved[c] = _to_temporary(items, c.src[1].substitute(done) if done else c.src[1], cast(tuple, c.shape))
      value = saved.get(u, value)
      # reading the target elsewhere than at the stored element would race with the writes: compute into a temp first
      if _unsafe_self_read(value, target, out_buf):
        value = _to_temporary(items, value, shape)
      ctx.param_for(out_buf)
      plain = target is out_buf or (target.op is Ops.RESHAPE and target.src[0] is out_buf)
      ast = _store_kernel(ctx, out_buf, None if plain else target, value, shape)
      items.append(_item(ast, ctx, shape))
      done[u] = target
      continue
    out, view = _new_output(cast(str, u.device), shape, u.dtype)  # tensor-level nodes always have a device
    ctx.param_for(out)
    body = val.src[0] if val.op is Ops.CONTIGUOUS else val
    if (split := _padded_split(body)) is not None:
      # zeros first (the whole grid, or only where the copy doesn't write), then the copy: no load is gated by its row
      keep, value, zeros = split
      for z in zeros:
        zctx = KernelCtx()
        zctx.param_for(out)
        zshape, zview = tuple(e - b for b, e in z), view.shrink(z)
        zero = UOp.const(u.dtype, 0, cast(str, u.device), zshape)
        items.append(_item(_store_kernel(zctx, out, None if zview is view else zview, zero, zshape), zctx, zshape))
      ictx = KernelCtx()
      ictx.param_for(out)
      inner = cast(tuple, value.shape)
      items.append(_item(_store_kernel(ictx, out, view.shrink(keep), value, inner), ictx, inner))
    else: items.append(_item(_store_kernel(ctx, out, None, body, shape), ctx, shape))
    done[u] = view
  results = {o: rebind(done.get(r, r), var_vals) for o, r in zip(orig_roots, roots)}
  # a zero-size output has nothing to compute (and an empty launch is a fault on some command processors): no item
  items = [it for it in items if not (it.bufs and it.bufs[0].op is Ops.BUFFER and it.bufs[0].arg == 0)]
  if IMAGE:
    from core.schedule.image import mark_images
    written = {it.bufs[0] for it in items if it.bufs}
    items = [ScheduleItem(mark_images(it.ast, it.bufs, written, IMAGE.value), it.bufs) for it in items]
  return items, results, var_vals

# a padded copy with at least this many elements is written in two steps: zeros, then the value into its part of the grid.
# One kernel over the padded grid gates every load by position, and lanes that straddle a border become masked vector loads
# and stores (a conv's padded input, 8x64x58x58, ran at 1/5 of a copy's speed); below it, the second launch costs more than
# the masks
PAD_SPLIT_MIN = 1 << 14
# a padded grid of at least this many bytes has the value's rows stored whole, their own (last axis) pad kept as masked lanes,
# and zeros stored only into the border slabs of the other axes (a conv's top and bottom rows), not into the whole grid that
# the copy then writes again. It saves memory traffic, which pays where the grid is beyond the caches: 32x64x58x58 float32
# (27.5 MB), two threads 1.13 -> 0.94 ms (one thread 1.67 either way); smaller grids, written within the caches, lose more
# to the masked row lanes and the extra launches than they save (two threads 8x64x58x58 0.32 -> 0.38 ms, 8x512x9x9 0.18 ->
# 0.26, 32x64x30x30 0.39 -> 0.55)
PAD_WHOLE_ROWS_MIN_BYTES = 16 << 20

Slices = tuple[tuple[int, int], ...]

def _padded_split(body: UOp) -> tuple[Slices, UOp, tuple[Slices, ...]] | None:
  """For a large enough PAD of a value read without gates: the part of the padded grid the copy writes (SHRINK arguments),
  the value it stores there, and the parts zeros are stored into first; else None."""
  if body.op is not Ops.PAD or body.shape is None or not all(isinstance(d, int) for d in body.shape): return None
  if prod(body.shape) < PAD_SPLIT_MIN or not all(isinstance(b, int) and isinstance(a, int) for b, a in body.arg): return None
  # a value that is itself padded (a strided conv's gradient, dilated with zeros) keeps its gates: the zeros would be one more pass
  if any(u.op is Ops.PAD for u in body.src[0].toposort(gate=lambda x: x.op is not Ops.BUFFER)): return None
  shape, pads = cast(tuple[int, ...], body.shape), cast(Slices, body.arg)
  full = tuple((0, d) for d in shape)
  interior = tuple((b, d - a) for (b, a), d in zip(pads, shape))
  if prod(shape) * body.dtype.itemsize < PAD_WHOLE_ROWS_MIN_BYTES: return interior, body.src[0], (full,)
  keep = interior[:-1] + (full[-1],)
  value = body.src[0].pad(((0, 0),) * (len(shape) - 1) + (pads[-1],))
  # the border of axis i: the interior of the axes before it, all of the axes after it
  zeros = tuple(interior[:i] + (side,) + full[i + 1:] for i, ((b, a), d) in enumerate(zip(pads[:-1], shape[:-1]))
                for side in ((0, b), (d - a, d)) if side[1] > side[0])
  return keep, value, zeros

def _to_temporary(items: list[ScheduleItem], value: UOp, shape: tuple) -> UOp:
  """Schedule a kernel computing `value` into a new buffer; returns the view of it with `shape`."""
  tmp, view = _new_output(cast(str, value.device), shape, value.dtype)
  ctx = KernelCtx()
  ctx.param_for(tmp)
  items.append(_item(_store_kernel(ctx, tmp, None, value, shape), ctx, shape))
  return view

def _order_points(sink: UOp, points: set[UOp]) -> tuple[list[UOp], set[UOp]]:
  """Realize points in dependency order, with every ASSIGN as late as possible: kernels that read a buffer's old value
  run before the kernel that overwrites it, unless they need the new value."""
  nodes = sink.toposort(gate=lambda u: u.op is not Ops.BUFFER)
  topo = [u for u in nodes if u in points]
  if not (assigns := [u for u in topo if u.op is Ops.ASSIGN]): return topo, set()
  bits, below = _assigns_below(nodes, assigns)
  order: list[UOp] = []
  pending: list[UOp] = []
  def emit_pending_needed_by(u: UOp) -> None:
    deps = below[u]
    for a in [p for p in pending if deps & bits[p] and p is not u]:
      if a in pending:
        pending.remove(a)
        emit_pending_needed_by(a)  # noqa: F821  (deleted after the loop, to break the cycle)
        order.append(a)
  for u in topo:
    if pending: emit_pending_needed_by(u)
    if u.op is Ops.ASSIGN: pending.append(u)
    else: order.append(u)
  del emit_pending_needed_by   # a recursive closure is a reference cycle: without this, every call leaves garbage for the gc
  # the remaining assigns: one that reads another's target (old value) or needs its result goes first. Each waits for the pending
  # assigns it conflicts with: the relation is found once, and each assign emitted unblocks its waiters
  waiters: dict[UOp, list[UOp]] = {a: [] for a in pending}
  blocked: dict[UOp, int] = {}
  for a in pending:
    blocked[a], target = 0, bits[a.src[0].base]
    for b in pending:
      if b is not a and (below[b.src[1]] & target or below[a.src[1]] & bits[b]):
        blocked[a] += 1
        waiters[b].append(a)
  cyclic: set[UOp] = set()
  while pending:
    if (nxt := next((a for a in pending if not blocked[a]), None)) is None:
      cyclic.update(pending)   # e.g. a swap: their values are saved to temporaries before any write
      nxt = pending[0]
    pending.remove(nxt)
    order.append(nxt)
    for a in waiters[nxt]: blocked[a] -= 1
  return order, cyclic

def _assigns_below(nodes: dict[UOp, None], assigns: list[UOp]) -> tuple[dict[UOp, int], dict[UOp, int]]:
  """A bit for each of `assigns` and of their targets' bases, and per node of `nodes` (a walk that stops at buffers, sources
  first) the bits of those its own such walk reaches. _order_points asks which pending assigns a kernel needs and which assigns
  read another's buffer: they were a walk of every kernel's graph each (a training step's parameter updates: ~15% of its
  scheduling)."""
  bits: dict[UOp, int] = {}
  for a in assigns:
    for x in (a, a.src[0].base):
      if x not in bits: bits[x] = 1 << len(bits)
  below: dict[UOp, int] = {}
  for x in nodes:
    m = 0
    if x.op is not Ops.BUFFER:
      for s in x.src: m |= below[s]
    below[x] = m | bits[x] if x in bits else m
  return bits, below

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
  from core.schedule.count_fold import pm_count_fold
  return pm_index + symbolic + pm_count_fold

# kernel before indexing, over numbered placeholder buffers -> (indexed kernel, the placeholders in PARAM order, the next
# loop id). Training builds the same kernels for every layer of equal shape and again for every step before a Jit
# captures: the index pass (movement ops to index arithmetic, then symbolic simplification) is most of scheduling, so it
# runs once per structure.
_indexed: LRUCache = LRUCache("indexed_kernels", 4096)

def placeholder(b: UOp, i: int, kind: str) -> UOp:
  """A stand-in for BUFFER `b` with the same device, size and dtype, numbered `i`: graphs over placeholders are keys of
  caches that hold for any buffers in those places (`kind` keeps different caches' placeholders apart)."""
  return UOp(Ops.BUFFER, b.dtype, (UOp(Ops.UNIQUE, arg=(kind, i)), b.src[1]), b.arg)

def _item(ast: UOp, ctx: KernelCtx, shape: tuple) -> ScheduleItem:
  # buffers that already have a PARAM (the output) first, then the ones the kernel reads, in a deterministic order
  bufs = list(dict.fromkeys([*ctx.params, *(u for u in ast.toposort() if u.op is Ops.BUFFER)]))
  ph = {b: placeholder(b, i, "kernel") for i, b in enumerate(bufs)}
  key = (ast.substitute(ph), tuple(ph[b] for b in ctx.params), ctx.next_axis, shape)
  if (hit := _indexed.get(key)) is None:
    pctx = KernelCtx({ph[b]: p for b, p in ctx.params.items()}, ctx.next_axis)
    out = graph_rewrite(key[0], _pm_index_symbolic(), pctx, name="index")
    out = out.replace(arg=_kernel_name(out, shape))
    if SPEC:
      from core.ir.spec import type_verify, kernel_spec
      type_verify(out, kernel_spec)
    hit = _indexed[key] = (out, tuple(sorted(pctx.params, key=lambda b: pctx.params[b].arg)), pctx.next_axis)
  out, order, ctx.next_axis = hit
  real = {v: k for k, v in ph.items()}
  for b in order:
    if b not in ctx.params: ctx.param_for(real[b])   # the caller's ctx ends as if the pass had run on it
  return ScheduleItem(out, tuple(real[b] for b in order))
