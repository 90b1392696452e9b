"""Decide which tensor-level nodes become buffers (kernel boundaries)."""
from __future__ import annotations
from typing import Callable, cast
from core.ir.ops import UOp, Ops, GroupOp, sint
from core.helpers import prod
from core.ir.dtype import dtypes
from core.schedule.indexing import strides_for
from core.schedule.split_reduce import MAX_OUTPUTS

# more ALU ops than this, recomputed for every broadcast copy, costs more than a buffer round trip
RECOMPUTE_LIMIT = 10
_EXPENSIVE = 1 << 30
# a value computed from indices and constants only (an arange, a causal mask from two of them) reads no memory recomputed,
# where its buffer is one read per element: recomputed up to this many ALU ops (a hash of a counter, ~100 ops, is not)
INDEX_RECOMPUTE_LIMIT = 40
# a PAD of data under an ALU op is a gated load (the bounds compared, the value selected) recomputed at every broadcast read,
# and a gate that changes along the reduced axis splits the reduction's loop. A concatenation (cat and its gradient: a sum of
# padded parts) broadcast into a matmul then costs 3 gates and 2 adds, over the limit: it is realized once, instead of
# recomputed with its gates in the matmul's inner loop (GPT-2's q, k, v gradients read by dx and dW of the qkv projection)
GATE_COST = 4
# reduced elements per output from which a reduction is "wide" (a conv's or a matmul's): one that shares its kernel with a
# reduction over other loops gets a kernel of its own (_wide_siblings); its output's round trip costs about one of its MACs
SIBLING_WIDE = 64
# ...and only with at least this many reduced elements in all: below, the kernel the split adds costs a launch (~10 us on
# a CPU), about what the shared tiles lose (ONNX test ResNet's 2x32x8x8 downsample block: 354 -> 364 us per call when split)
SIBLING_MIN_WORK = 1 << 22

def contiguous_buffer(u: UOp) -> tuple[UOp, sint] | None:
  """(BUFFER, number of elements used) when u is a row-major view of the start of a buffer: reshapes, and for
  symbolic shapes one SHRINK to the part in use. None for any other view."""
  while u.op is Ops.RESHAPE: u = u.src[0]
  if u.op is Ops.SHRINK and len(u.arg) == 1 and isinstance(u.arg[0][0], int) and u.arg[0][0] == 0 and u.src[0].op is Ops.BUFFER:
    return u.src[0], u.arg[0][1]
  return (u, u.arg) if u.op is Ops.BUFFER else None

def _grows(e: UOp) -> bool: return e.op is Ops.EXPAND and e.src[0].shape != e.shape

# a row reduction broadcast back over its own row stays in its consumer's kernel when the row is at most this many bytes:
# the kernel reduces each row and then runs the elementwise loop over the same row, which is still in L1/L2 (32 KiB is
# L1 on most cores and 8K float32s; a pass over one row a few times from L2 costs less than a buffer round trip)
ROW_FUSE_BYTES = 32 * 1024

def row_fusable(e: UOp, s: UOp, points: set[UOp], counts: frozenset[UOp] = frozenset(),
                assigned: frozenset[UOp] = frozenset()) -> set[UOp] | None:
  """Whether `s`, broadcast by the EXPAND `e`, can be computed once per row in e's consumer: every reduction in s (down to
  buffers and realize points) reduces exactly the axes e grows, over an input of e's shape, and a row fits ROW_FUSE_BYTES.
  The consumer then loops over the other axes, and each row's reductions need not depend on the position in the row.
  Returns the reductions to realize first (None: not fusable): the kernel reads a row's input once per pass (each
  reduction and the elementwise loop), so a reduction computing each input element (attention's q @ k^T before its
  softmax) gets a buffer instead of being recomputed in every pass. A reduction reading a buffer that the graph assigns to
  is not fused: the kernel's threads would write parts of it while others still reduce over them (LAMB's norm of the
  weight it updates)."""
  view = e.src[0]
  if e.shape is None or view.shape is None or len(view.shape) != len(e.shape): return None
  grown = tuple(i for i, (a, b) in enumerate(zip(view.shape, e.shape)) if a != b)
  if not grown or not all(isinstance(e.shape[i], int) for i in grown): return None
  # between the reductions and the EXPAND only size-1 dims may come and go (keepdim=False and back), elementwise
  row = tuple(d for d in view.shape if d != 1)
  inner: set[UOp] = set()
  found = False
  data: dict[UOp, bool] = {}   # whether a node reads a buffer or a reduction (else it is a constant, broadcast at will)
  # reductions inside a reduction's input are broadcast by EXPANDs of their own, which are checked on their own
  for u in s.toposort(gate=lambda x: x not in points and x.op not in (Ops.BUFFER, Ops.REDUCE_AXIS)):
    data[u] = u in points or u.op in (Ops.BUFFER, Ops.REDUCE_AXIS) or any(data.get(x, False) for x in u.src)
    if u in points or u.op is Ops.BUFFER or not data[u]: continue
    if (u.op in GroupOp.ALU or u.op in (Ops.RESHAPE, Ops.REDUCE_AXIS)) and tuple(d for d in (u.shape or ()) if d != 1) != row: return None
    if u.op is Ops.REDUCE_AXIS:
      if u.shape != view.shape or u.src[0].shape != e.shape or tuple(sorted(u.arg[1])) != grown: return None
      if prod(e.shape[i] for i in grown) * u.src[0].dtype.itemsize > ROW_FUSE_BYTES: return None
      found = True
      below = list(u.src[0].toposort(gate=lambda x: x not in points and x.op is not Ops.BUFFER))
      if any(x in assigned for x in below): return None
      inner |= {x for x in u.src[0].toposort(gate=lambda x: x not in points and x.op is not Ops.BUFFER and not _grows(x))
                if x.op is Ops.REDUCE_AXIS and x not in points and x not in counts}
    elif u.op in GroupOp.Movement and u.op is not Ops.RESHAPE and u is not s: return None
  return inner if found else None

def find_realize_points(sink: UOp, fuse_rows: Callable[[str], bool] = lambda device: True) -> set[UOp]:
  """Nodes whose values must live in a buffer: the outputs, explicit CONTIGUOUS, copies and assigns, reductions used
  twice, any value that an EXPAND broadcasts when it is expensive to compute (a reduction, or a long chain of ALU
  ops): fusing those into the consumer would recompute them once per broadcast element, and a reduction two kernels
  would each recompute (a matmul whose output feeds both relu and, in the backward pass, relu's mask), and a wide
  reduction that a kernel would compute beside another reduction (_wide_siblings). `fuse_rows(device)`:
  whether row reductions on that device may stay in their consumer's kernel (row_fusable)."""
  users: dict[UOp, list[UOp]] = {}
  nodes = list(sink.toposort(gate=lambda u: u.op is not Ops.BUFFER))
  data = _reads_data(nodes)
  counts = _counts(nodes, data)
  assigned = frozenset(_base(u.src[0]) for u in nodes if u.op is Ops.ASSIGN)
  for u in nodes:
    for s in u.src: users.setdefault(s, []).append(u)
  points: set[UOp] = set()
  for s in sink.src:
    if contiguous_buffer(s) is None: points.add(s)
  for u in nodes:
    if u.op in (Ops.CONTIGUOUS, Ops.ASSIGN, Ops.COPY): points.add(u)
    # a copy moves whole row-major buffers: any other view of a buffer (transposed, shrunk, flipped) is made contiguous first
    if u.op is Ops.COPY and contiguous_buffer(u.src[0]) is None: points.add(u.src[0])
    if u.op is Ops.REDUCE_AXIS and u not in counts and len(set(users.get(u, []))) > 1: points.add(u)
  cost: dict[UOp, int] = {}
  def cost_of(u: UOp) -> int:
    # iterative: graphs can be deep
    for x in u.toposort(gate=lambda x: x not in cost and x not in points and x.op is not Ops.BUFFER):
      if x in cost: continue
      if x in points or x.op in (Ops.BUFFER, Ops.CONST, Ops.DEVICE, Ops.UNIQUE): cost[x] = 0
      elif x.op is Ops.REDUCE_AXIS: cost[x] = 1 if x in counts else _EXPENSIVE
      elif x.op is Ops.PAD and data[x]: cost[x] = min(_EXPENSIVE, cost[x.src[0]] + GATE_COST)
      else: cost[x] = min(_EXPENSIVE, sum(cost[s] for s in x.src) + (1 if x.op in GroupOp.ALU else 0))
    return cost[u]
  # a reduction read through a PAD is realized first: fused, the reduction runs over the padded grid too, and its window index math
  # composed with the pad's offset and validity no longer simplifies (a conv followed by a padded pool or conv ran ~1000x slower)
  for e in nodes:
    if e.op is not Ops.PAD: continue
    s = e.src[0]
    while s.op in GroupOp.Movement: s = s.src[0]
    if s not in points and s.op not in (Ops.BUFFER, Ops.CONST) and cost_of(s) >= _EXPENSIVE:
      _realize(s, points, cost, users)
  for e in nodes:
    if not _grows(e): continue
    s = e.src[0]
    while s.op in GroupOp.Movement: s = s.src[0]
    if s in points or s.op in (Ops.BUFFER, Ops.CONST): continue
    if isinstance(e.device, str) and fuse_rows(e.device) and (inner := row_fusable(e, s, points, counts, assigned)) is not None:
      points |= inner
      if inner: cost.clear()
      continue
    if cost_of(s) > (INDEX_RECOMPUTE_LIMIT if not data[s] else RECOMPUTE_LIMIT):
      _realize(s, points, cost, users)
  def add_recomputed() -> None:
    # the nodes two kernels compute, found once: realizing one changes no answer from the next search's start on (see below)
    start, shared = 0, _shared_nodes(nodes, users, points)
    while (found := _recomputed_reduce(nodes, users, points, cost_of, start, shared)) is not None:
      red, start = found
      _realize(red, points, cost, users)
  add_recomputed()
  if wide := _wide_siblings(nodes, points):
    points |= wide
    cost.clear()
    add_recomputed()   # the wide ones' realization changes which reductions two kernels would recompute
  # a realized value broadcast (read many times: a matmul's operand) through a flattening of transposed axes is copied first
  for e in nodes:
    if not _grows(e): continue
    s = _base(e.src[0])
    if (s in points or s.op is Ops.BUFFER) and (m := strided_merge(e.src[0], s)) is not None: points.add(m)
  return points

def _realize(p: UOp, points: set[UOp], cost: dict[UOp, int], users: dict[UOp, list[UOp]]) -> None:
  """p becomes a point, and the costs known above it (find_realize_points' cost_of) are forgotten: only those change. A cost is
  known only where its sources' are, so the walk up stops at the first node without one (a training step realizes ~200 points
  one at a time: forgetting every cost each time was ~5% of its scheduling)."""
  points.add(p)
  todo = [p]
  while todo:
    if cost.pop(x := todo.pop(), None) is not None: todo.extend(users.get(x, ()))

def _nocopy_strides(shape: tuple[int, ...], strides: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...] | None:
  """The strides of `shape` (with `strides`) reshaped to `new` without a copy, or None when the reshape merges axes whose
  strides don't line up (numpy's no-copy reshape)."""
  old = [(d, st) for d, st in zip(shape, strides) if d != 1]
  res, oi, ni = [0] * len(new), 0, 0
  while ni < len(new) and oi < len(old):
    if new[ni] == 1:
      ni += 1
      continue
    nj, oj, nprod, oprod = ni + 1, oi + 1, new[ni], old[oi][0]
    while nprod != oprod:
      if nprod < oprod: nprod, nj = nprod * new[nj], nj + 1
      else: oprod, oj = oprod * old[oj][0], oj + 1
    if any(old[k][1] != old[k + 1][1] * old[k + 1][0] for k in range(oi, oj - 1)): return None
    st = old[oj - 1][1]
    for k in range(nj - 1, ni - 1, -1): res[k], st = st, st * new[k]
    ni, oi = nj, oj
  return tuple(res)

def strided_merge(view: UOp, base: UOp) -> UOp | None:
  """The RESHAPE, among the PERMUTEs and RESHAPEs right above the realized `base` in `view`'s movement chain, that merges
  axes whose strides don't line up (attention's heads, transposed back and flattened into the model width): read through a
  broadcast (a matmul's operand), every load's address takes a division and a modulo and the kernel optimizer can't tile the
  merged axis (GPT-2's dW of the output projection ran at 1/3 the speed of the same matmul on a contiguous copy). That
  RESHAPE is realized: one copy, then the reduction reads a plain buffer."""
  chain: list[UOp] = []
  u = view
  while u is not base and u.op in GroupOp.Movement: chain, u = [u] + chain, u.src[0]
  if u is not base or base.shape is None or not all(isinstance(d, int) and d > 0 for d in base.shape): return None
  shape: tuple[int, ...] = cast(tuple, base.shape)
  strides = tuple(cast(int, st) for st in strides_for(shape))
  for m in chain:
    if m.op not in (Ops.RESHAPE, Ops.PERMUTE) or m.shape is None or not all(isinstance(d, int) for d in m.shape): return None
    if m.op is Ops.PERMUTE: shape, strides = tuple(shape[i] for i in m.arg), tuple(strides[i] for i in m.arg)
    else:
      if (st := _nocopy_strides(shape, strides, cast(tuple, m.shape))) is None: return m
      shape, strides = cast(tuple, m.shape), st
  return None

def _base(u: UOp) -> UOp:
  while u.op in GroupOp.Movement: u = u.src[0]
  return u

def _reads_data(nodes: list[UOp]) -> dict[UOp, bool]:
  """Per node (sources first): whether its value depends on memory or a variable, not only on indices and constants."""
  data: dict[UOp, bool] = {}
  for u in nodes:
    data[u] = u.op in (Ops.BUFFER, Ops.DEFINE_VAR, Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN) or any(data.get(x, True) for x in u.src)
  return data

def _counts(nodes: list[UOp], data: dict[UOp, bool]) -> frozenset[UOp]:
  """Integer sums over one axis of constants only (arange's running sums of ones): count_fold turns them into index
  arithmetic in the kernel, so they cost no more than an ALU op and are recomputed where used (a causal mask from
  indices is a comparison in the attention kernel, not a buffer)."""
  return frozenset(u for u in nodes if u.op is Ops.REDUCE_AXIS and u.arg[0] is Ops.ADD and len(u.arg[1]) == 1 and
                   dtypes.is_int(u.dtype) and not data[u])

def _shared_nodes(nodes: list[UOp], users: dict[UOp, list[UOp]], points: set[UOp]) -> set[UOp]:
  """The nodes (not points) that more than one kernel computes: each kernel (realize point) computes everything below it down to
  buffers and other points, so these are the nodes reached from two points through their users without passing another."""
  bit = {p: 1 << i for i, p in enumerate(points)}
  kernels: dict[UOp, int] = {}
  shared: set[UOp] = set()
  for u in reversed(nodes):
    if u in points: kernels[u] = bit[u]
    else:
      k = 0
      for v in users.get(u, ()): k |= kernels.get(v, 0)
      kernels[u] = k
      if k & (k - 1): shared.add(u)
  return shared

def _recomputed_reduce(nodes: list[UOp], users: dict[UOp, list[UOp]], points: set[UOp], cost_of, start: int = 0,
                       shared: set[UOp] | None = None) -> tuple[UOp, int] | None:
  """The first node (sources first) from nodes[start] on holding an unrealized reduction that more than one kernel computes, and
  the index after it; the lowest such node is the cheapest buffer: what sits above it stays fused. `shared`: _shared_nodes of
  `points` as they were at an earlier search, where only nodes before `start` have been realized since.
  Realizing a node changes no node before it: those below it were reached from two kernels already and were not taken (their
  cost is unchanged), the others are untouched, so the next search starts after it (find_realize_points' add_recomputed). Nor
  does it change which nodes after it two kernels compute: a node's kernels are found through its users, all after it."""
  if shared is None: shared = _shared_nodes(nodes, users, points)
  for i in range(start, len(nodes)):
    u = nodes[i]
    if u in shared and u not in points and u.op not in GroupOp.Movement and cost_of(u) >= _EXPENSIVE: return u, i + 1
  return None

def _wide_siblings(nodes: list[UOp], points: set[UOp]) -> set[UOp]:
  """Wide reductions (SIBLING_WIDE) that a kernel computes next to another reduction over other loops, both at the kernel's
  own shape (not broadcast: those are row_fusable's rows). The optimizer picks one set of loop orders and tiles per kernel,
  and the conv's register tile applied to the other reduction too: ResNet's max-pool gradient (a 3x3 window count over the
  stem's output) in the kernel of the conv's input gradient took 66 ms on one thread, where the conv alone takes 24 and the
  count with its elementwise consumer 6. Siblings over the same loops (two sums of one input) stay together."""
  wide: set[UOp] = set()
  for p in (u for u in nodes if u in points or u.op is Ops.REDUCE_AXIS):
    tops = [x for x in p.toposort(gate=lambda x: (x is p or (x not in points and x.op is not Ops.REDUCE_AXIS)) and
                                  x.op is not Ops.BUFFER and not _grows(x)) if x is not p and x.op is Ops.REDUCE_AXIS and x not in points]
    # a reduction over a wide one (ResNet's mean pool over its last conv) makes the wide one's output loops reduce loops,
    # which the optimizer doesn't tile: 8x512x7x7 conv + mean 48 ms on one thread, the conv alone 26
    if len({(r.src[0].shape, r.arg[1]) for r in tops}) < (1 if p.op is Ops.REDUCE_AXIS else 2): continue
    for r in tops:
      n, out = prod(r.src[0].shape or ()), prod(r.shape or ())
      # few outputs (a split reduction's total and its tail) leave no output loops to tile: those stay together
      if isinstance(n, int) and isinstance(out, int) and out >= MAX_OUTPUTS and n // out >= SIBLING_WIDE and n >= SIBLING_MIN_WORK \
         and _broadcasts(r, points): wide.add(r)
  return wide

def _broadcasts(r: UOp, points: set[UOp]) -> bool:
  """Whether reduction r multiplies a broadcast operand (a matmul's, a conv's weights): a MAC loop with output tiles to pick,
  unlike a plain sum of its input (the Tensor layer's partial sums stay with their total)."""
  return any(_grows(x) for x in r.src[0].toposort(gate=lambda x: x not in points and x.op not in (Ops.BUFFER, Ops.REDUCE_AXIS)))
