"""realize(): schedule tensor graphs, run the kernels, and remember which nodes now live in buffers."""
from __future__ import annotations
import math, sys, threading
from typing import Any, Callable
from core.ir.dtype import DType
from core.ir.ops import UOp, Ops, GroupOp, sym_val
from core.schedule.kernelize import create_schedule, ScheduleItem, placeholder
from core.schedule.memory import plan_memory
from core.schedule.realize_points import contiguous_buffer
from core.engine.run import buffer_of, _item_hcq, hcq_replay_for
from core.engine.replay import DirectReplay
from core.engine.schedule_cache import ScheduleCache, CachedSchedule
from core.engine.state import facts, NodeFacts
from core.device.buffer import Buffer
from core.device.allocator import oom_hooks
from core.device.registry import Device
from core.engine import capture as _capture
from core.engine.lock import engine_lock
from core.device import profiler
from core.helpers import IMAGE, NOOPT, LIFT_CONSTS, gc_paused
from core.ir.dtype import dtypes
from core.codegen.program import liftable, lit_bits, MAX_LIFTED

# The memo (core.engine.state's NodeFacts): a computed node's `realized` is (the uop over the buffer holding its value, that
# buffer's version, the assign epoch). A buffer's version goes up when something is assigned into it, which retires every memo
# entry pointing at it. The assign epoch goes up whenever an assign runs, which retires every memo entry made before: the
# node may read the buffer assigned into (x * w memoized, then w assigned: x * w built again is the same node, and must not
# give the old product). A node lives on while any tensor holds it, so this was a silent wrong answer also on one thread
# (tests/engine/test_assign_memo.py). An ASSIGN that has run is its target from then on (`assigned`): it never runs twice.
_assign_epoch = 0

# _walk marks an inner node whose subgraph reads no buffer, holds no ASSIGN, BIND or result and no memo entry by setting its
# `plain` to _plain_epoch; a later walk takes such a node as one leaf. A memo entry or a run ASSIGN set on a marked node moves
# the epoch on, which retires every mark (a version bump only retires memo entries: marks stay true).
_plain_epoch = 0
_fget = facts.get_id

def _base(u: UOp) -> UOp:
  while u.op in GroupOp.Movement: u = u.src[0]
  return u

def _memo_of(f: NodeFacts | None) -> UOp | None:
  if f is None or (e := f.realized) is None: return None
  res, ver, epoch = e
  return res if epoch == _assign_epoch and ((b := _fget(id(_base(res)))) is not None and b.version or 0) == ver else None

def _assigned(u: UOp) -> UOp | None: return None if (f := _fget(id(u))) is None else f.assigned

def _retire_marks(f: NodeFacts) -> None:
  global _plain_epoch
  if f.plain == _plain_epoch: _plain_epoch += 1

def _bump_version(u: UOp) -> None: facts.of(u).version += 1

def _substitute_realized(roots: list[UOp]) -> list[UOp]:
  """Reuse buffers of already computed subgraphs. The roots themselves always get fresh buffers, so two tensors built the
  same way never share storage that one of them may later assign into (assigns that ran are reused everywhere)."""
  rootset = set(roots)
  sink = UOp(Ops.SINK, src=tuple(roots))
  known = {}
  for u in sink.toposort(gate=lambda u: _assigned(u) is None and (u in rootset or _memo_of(_fget(id(u))) is None)):
    if (a := _assigned(u)) is not None: known[u] = a
    elif u not in rootset and (m := _memo_of(_fget(id(u)))) is not None: known[u] = m
  return list(sink.substitute(known).src) if known else roots

def run_schedule(items: list[ScheduleItem], var_vals: dict[UOp, int] | None = None) -> None:
  from core.engine.run import run_items   # HCQ devices run whole schedules through core/hcq
  run_items(items, var_vals)

# *** schedule cache: a graph that differs only in which buffers it reads reuses the schedule (eager ops repeat) ***

schedules = ScheduleCache()
Device.on_change(schedules.clear)

_NO_FAST = object()
Walk = tuple[tuple, list[UOp], bool, bool, tuple[UOp, ...]]
_PLAN = "plan"   # a key entry's op for a plan's output (core.tensor.plans), its arg the plan's key
_LIT = "lit"   # a key entry's arg for a scalar that is an input (its position in the walk's literals follows its sources)
LIT_VAR = "_scalar"   # the scheduled scalars' variables: _scalar0, _scalar1, ... in walk order (reserved names)
_unique_ids = UOp.unique_ids

def _scalar_chain(x: UOp) -> list[UOp] | None:
  """[the liftable tensor-level literal, then the movement ops over it, bottom up] when `x` is a broadcast scalar (x * 2.5's
  EXPAND(RESHAPE(CONST))), else None."""
  chain: list[UOp] = []
  while x.op in GroupOp.Movement and len(x.src) == 1: chain, x = [x] + chain, x.src[0]
  return [x] + chain if x.op is Ops.CONST and len(x.src) == 1 and liftable(x) else None

def _walk_one(u: UOp) -> Walk | None | object:
  """_walk of one root whose sources are all leaves (buffers or marked subgraphs) or broadcast scalars: x + 1, a * b, x * 2.5.
  The same key, inputs and answers as the general walk with literals numbered (it emits the sources in order, then the
  root), built without its stack; _NO_FAST otherwise."""
  op = u.op
  if op is Ops.BUFFER or op is Ops.ASSIGN or op is Ops.BIND: return _NO_FAST
  f = _fget(id(u))
  epoch = _plain_epoch
  if f is not None:
    if f.plain == epoch or f.plan is not None: return _NO_FAST   # a plan's output: the general walk keys it as its plan
    if f.assigned is not None: return None
  key: list[tuple] = []
  inputs: list[UOp] = []
  idx: list[int] = []
  lits: list[UOp] = []
  pos: dict[UOp, int] = {}   # a node given twice (a + a) is one entry
  for x in u.src:
    if (j := pos.get(x)) is not None: idx.append(j)
    elif x.op is Ops.BUFFER:
      pos[x] = j = len(key)
      idx.append(j)
      key.append((Ops.BUFFER, x.dtype, x.arg, x.src[1].arg, len(inputs)))
      inputs.append(x)
    elif (fx := _fget(id(x))) is not None and fx.plain == epoch:
      pos[x] = j = len(key)
      idx.append(j)
      key.append((None, x))
    elif LIFT_CONSTS and (chain := _scalar_chain(x)) is not None:
      for n in chain:
        if n in pos: continue
        # a node with facts (a memo, a mark) is one the general walk may key otherwise: it decides
        if _fget(id(n)) is not None: return _NO_FAST
        if n.op is Ops.CONST:
          if (jd := pos.get(dev := n.src[0])) is None:
            pos[dev] = jd = len(key)
            key.append((Ops.DEVICE, dev.arg))
          pos[n] = len(key)
          key.append((Ops.CONST, n.dtype, _LIT, n.tag, (jd, len(lits))))
          lits.append(n)
        else:
          pos[n] = len(key)
          key.append((n.op, n.dtype, n._key[3], n.tag, (pos[n.src[0]],)))
      idx.append(pos[x])
    else: return _NO_FAST
  key.append((op, u.dtype, u._key[3], u.tag, tuple(idx)))
  key.append((Ops.SINK, (len(key) - 1,)))
  return tuple(key), inputs, False, False, tuple(lits)

def _walk(roots: list[UOp], check_memo: bool, lift: bool = True) -> Walk | None:
  """One pass over the graphs: (structural key, input buffers in order, has ASSIGN, has BIND, float literals); None when
  part of it is already computed (a memo hit or an ASSIGN that ran) and must be substituted first. The key is the graph
  with its buffers numbered and, with `lift`, its float literals (codegen's liftable ones) numbered too: two graphs with
  equal keys differ only in which buffers they read and which scalars they use (x * 2.5, x * 3.5), and share a schedule
  whose kernels take those scalars as variables. (The hot path of every eager op: a post-order walk that builds the key as
  it goes, memo entries read from the engine's node table.)"""
  if len(roots) == 1 and check_memo and lift and (w := _walk_one(roots[0])) is not _NO_FAST: return w   # type: ignore[return-value]
  lift = lift and bool(LIFT_CONSTS)
  try: w = _walk_graph(roots, check_memo, lift)
  except _Computed: return None
  # more scalars than a kernel takes as arguments: math with fixed coefficients, keyed (and compiled) with its values
  if len(w[4]) > MAX_LIFTED: return _walk(roots, check_memo, lift=False)
  return w

class _Computed(Exception):
  """_walk_graph met a node with a memo entry or an ASSIGN that ran."""

# How _walk keys a node: a BUFFER is a leaf whose sources (UNIQUE, DEVICE) are its identity, not structure; a DEVICE a leaf
# keyed by its name (never marked, so the first walk's key is every later walk's); a marked subgraph is keyed as the node
# itself (hash-consing makes it its structure, and the key keeps it alive); a liftable CONST's value is an input of the
# schedule, not structure (never marked: a marked subgraph must hold no literal); an ASSIGN's arg only makes it a node of its
# own (Tensor.assign). Only walks that number literals mark: a marked node is keyed as itself, so one marked by a walk that
# keeps them would hold its literals' values in every later key.

def _walk_graph(roots: list[UOp], check_memo: bool, lift: bool) -> Walk:
  """_walk's pass: a post-order walk by nested calls (one call per node, no revisits: half the time per node of a walk with an
  explicit stack), which a graph deeper than the interpreter's stack finishes from where it stopped (_visit_rest). Raises
  _Computed where _walk answers None."""
  BUFFER, DEVICE, CONST, ASSIGN, BIND = Ops.BUFFER, Ops.DEVICE, Ops.CONST, Ops.ASSIGN, Ops.BIND
  fget, epoch, mark = _fget, _plain_epoch, check_memo and lift
  idx: dict[UOp, int] = {}
  key: list[tuple] = []
  inputs: list[UOp] = []
  lits: list[UOp] = []
  plains: set[UOp] = set()   # the emitted nodes that are markable (see _plain_epoch)
  flags = [False, False]   # has ASSIGN, has BIND
  # A node's visit records it (its idx entry, then its key entry: nothing between them can fail) after every call that can
  # raise a RecursionError: a Python call, a hash or a comparison of a node (C calls through a node's type), so that a walk cut
  # short leaves each node either recorded or not, and can go on from there. `plains` may hold a node not yet recorded: only
  # recorded ones are asked about
  def visit(u: UOp) -> int:
    if (j := idx.get(u)) is not None: return j
    op = u.op
    if op is BUFFER:
      idx[u] = j = len(key)
      key.append((BUFFER, u.dtype, u.arg, u.src[1].arg, len(inputs)))
      inputs.append(u)
      return j
    if op is DEVICE:
      plains.add(u)
      idx[u] = j = len(key)
      key.append((DEVICE, u.arg))
      return j
    if (f := fget(id(u))) is not None:
      if f.plain == epoch:
        plains.add(u)
        idx[u] = j = len(key)
        key.append((None, u))
        return j
      if check_memo and (f.assigned is not None or (u not in roots and _memo_of(f) is not None)): raise _Computed
      if (p := f.plan) is not None:
        # a plan's output: its graph is the plan's over its inputs (neither a memo nor an ASSIGN, BIND or literal to find
        # below: a plan's nodes hold no buffer of their own, and a rebuild of one from inputs is a fresh computation)
        pi = tuple([visit(x) for x in p[1]])
        idx[u] = j = len(key)
        key.append((_PLAN, p[0], pi))
        return j
    src = u.src
    # direct calls for the usual one or two sources: a comprehension is a frame of its own per node (Python 3.11), and map would
    # recurse through C (the C stack, not the interpreter's limit, would bound the depth)
    if (n := len(src)) == 1: si: tuple[int, ...] = (visit(src[0]),)
    elif n == 2: si = (visit(src[0]), visit(src[1]))
    else: si = tuple([visit(x) for x in src])
    if op is CONST and lift and src and liftable(u):
      idx[u] = j = len(key)
      key.append((CONST, u.dtype, _LIT, u.tag, (si[0], len(lits))))
      lits.append(u)
      return j
    if op is ASSIGN or op is BIND:
      flags[op is BIND] = True
      entry = (op, u.dtype, None if op is ASSIGN else u._key[3], u.tag, si)
    else:
      entry = (op, u.dtype, u._key[3], u.tag, si)
      if plains.issuperset(src) and u not in roots:
        if mark: facts.of(u).plain = epoch
        plains.add(u)
    idx[u] = j = len(key)
    key.append(entry)
    return j
  # visit refers to itself through this frame's cell: a cycle that would keep idx (every node of the graph) alive until the
  # cyclic GC runs, raising the nodes' refcounts, which the engine reads (a realized node held elsewhere gets a memo)
  try:
    try: res = tuple(map(visit, roots))
    except RecursionError: res = _visit_rest(roots, idx, visit, fget, epoch)
  finally: visit = None   # type: ignore[assignment]
  key.append((Ops.SINK, res))   # which nodes are the results, in order
  return tuple(key), inputs, flags[0], flags[1], tuple(lits)

def _visit_rest(roots: list[UOp], idx: dict[UOp, int], visit: Callable[[UOp], int], fget: Callable, epoch: int) -> tuple[int, ...]:
  """The roots' key positions after a RecursionError: visit called on the nodes not yet recorded in the order the nested calls
  would have reached them (post-order, sources in order, not below visit's leaves), so that no call goes deeper than one
  level. The key is the one an unbounded stack would have made."""
  expanded: set[UOp] = set()
  for r in roots:
    stack = [r]
    while stack:
      u = stack.pop()
      if u in idx: continue
      # visit's leaves: it records them without looking at their sources
      if u in expanded or u.op is Ops.BUFFER or u.op is Ops.DEVICE or ((f := fget(id(u))) is not None and f.plain == epoch): visit(u)
      else:
        expanded.add(u)
        stack.append(u)
        # a plan's output is visited as a node over the plan's inputs
        stack.extend([x for x in reversed(u.src if f is None or f.plan is None else f.plan[1]) if x not in idx])
  return tuple([idx[r] for r in roots])

def fuse_rows(device: str) -> bool:
  """Row reductions stay in their consumer's kernel only where one thread runs a row's passes well: a renderer without
  workgroups (a CPU). A GPU's row kernel would give a whole row to one work-item, untuned against its group reductions."""
  return not Device[device].renderer.has_local

def _lit_var(i: int) -> UOp: return UOp.variable(f"{LIT_VAR}{i}", -2**31, 2**31 - 1, dtypes.int32)

def _lit_value(c: UOp, v: UOp) -> UOp:
  """The tensor-level stand-in of literal `c`: 0 + v's bits read as float, v bound to c's. The 0 keeps c's DEVICE source (a
  tensor-level node finds its device through its sources, and a bound variable loses its value's when it is unbound). It
  costs one scalar add per kernel and is exact: a liftable literal is never -0.0 or nan."""
  bits = UOp(Ops.BIND, dtypes.int32, (v, UOp.const(dtypes.int32, lit_bits(c.arg)))).bitcast(dtypes.float32)
  return UOp(Ops.ADD, dtypes.float32, (UOp.const(dtypes.float32, 0.0, c.src[0].arg), bits))

def _with_lits(hit: CachedSchedule, lits: tuple[UOp, ...]) -> dict[UOp, int]:
  """The cached schedule's variable values with its scalar variables set to this call's literals."""
  if not lits: return hit.var_vals
  out = dict(hit.var_vals) if hit.var_vals else {}
  for v, c in zip(hit.lit_vars, lits): out[v] = lit_bits(c.arg)
  return out

def _scheduled(todo: list[UOp], key: tuple, inputs: list[UOp], lits: tuple[UOp, ...] = ()) -> tuple[list[ScheduleItem], list[UOp], dict[UOp, int]]:
  """(planned items, each root's result, variable values) for `todo`, from the cache when possible. `lits`: the walk's float
  literals, scheduled as bound int32 variables read as float bits (the form codegen lifts literals to), so the schedule and
  its kernels serve every value and each call binds its own."""
  if (hit := schedules.get(key)) is None:
    to_ph = {b: placeholder(b, i, "input") for i, b in enumerate(inputs)}
    lit_vars = [_lit_var(i) for i in range(len(lits))]
    sub = {**to_ph, **{c: _lit_value(c, v) for c, v in zip(lits, lit_vars)}}
    ph_sink = UOp(Ops.SINK, src=tuple(todo)).substitute(sub)
    items, results, var_vals = create_schedule(list(ph_sink.src), fuse_rows)
    res = [results[r] for r in ph_sink.src]
    items = plan_memory(items, set(to_ph.values()) | {_base(r) for r in res})
    hit = schedules.put(key, CachedSchedule(items, res, var_vals, list(to_ph.values()), lit_vars))
  items, res, var_vals, phs = hit.items, hit.results, _with_lits(hit, lits), hit.inputs
  # placeholders back to this call's buffers; buffers the schedule creates are fresh for every call
  back: dict[UOp, UOp] = dict(zip(phs, inputs))
  new_items = []
  for it in items:
    for b in it.bufs:
      if b not in back: back[b] = UOp.new_buffer(b.src[1].arg, b.arg, b.dtype)
    new_items.append(ScheduleItem(it.ast, tuple([back[b] for b in it.bufs])))
  return new_items, [r.substitute(back) for r in res], var_vals

# *** eager fast path: a cached schedule run again with only its buffers bound (no schedule items, no submission lookup) ***

# An eager plan keeps the Buffers it created for a small slot (POOL_DEPTH of them) and hands one out again once nothing else
# holds it: its result, every view, numpy array and node fact over it are gone, so its memory is as free as a block in the
# allocator's cache, and a repeat skips making, allocating and freeing a Buffer. Small buffers only: a cached plan must not
# keep much memory alive. Two per slot: `y = (x + 1).realize()` in a loop runs while the previous y is still alive.
POOL_BYTES = 4 << 10
POOL_DEPTH = 2
_refcount = sys.getrefcount

# Bigger buffers (a softmax's 16 MB result) go to one pool that every plan shares, keyed by (device, size, dtype, whether its
# node is kept, and the view of a kept result node: EagerPlan), holding at most SHARED_POOL_BYTES of Buffers in all (each at most 1/POOL_DEPTH of it; the key used longest
# ago lets its oldest go first), so that cached plans can't keep much memory alive. A repeat then skips the allocator, a new
# Buffer and node and their frees, which run slowly after a big kernel has flushed the caches: ~40 us of an eager a * b + 1
# on 16M floats (a 64 MiB result, the largest pooled; in a loop the allocator's cache would hold the dead one anyway).
SHARED_POOL_BYTES = 128 << 20
_shared: dict[tuple, list[tuple[Buffer, UOp | None, UOp | None]]] = {}   # used under the engine lock
_shared_bytes = 0

def _shared_clear() -> None:
  global _shared_bytes
  _shared.clear()
  _shared_bytes = 0
Device.on_change(_shared_clear)

def _shared_release() -> None:
  """Lets the pooled Buffers go when an allocation fails (allocator.oom_hooks): they return to their allocator's cache, which it
  flushes next. Only where this thread may take the engine lock: another thread inside the engine may be reading the pool."""
  if not engine_lock.acquire(blocking=False): return
  try: _shared_clear()
  finally: engine_lock.release()
oom_hooks.append(_shared_release)

def _shared_keep(key: tuple, entry: tuple[Buffer, UOp | None, UOp | None]) -> None:
  """Pools `entry` (a new Buffer of `key`'s size) unless it is over the bound, letting the oldest entries go to stay under it."""
  global _shared_bytes
  if (nb := key[1] * key[2].itemsize) * POOL_DEPTH > SHARED_POOL_BYTES: return
  pool = _shared.pop(key, [])   # back in last: the key used latest lets go last
  if len(pool) >= POOL_DEPTH:
    del pool[0]
    _shared_bytes -= nb
  while _shared and _shared_bytes + nb > SHARED_POOL_BYTES:
    old = next(iter(_shared))
    del (entries := _shared[old])[0]
    _shared_bytes -= old[1] * old[2].itemsize
    if not entries: del _shared[old]
  pool.append(entry)
  _shared[key] = pool
  _shared_bytes += nb

def _free_refs() -> int:
  """getrefcount of an object that only a pool entry holds, as EagerPlan's loop over the pool (its (Buffer, BUFFER node)
  pairs) sees it (measured: interpreters count a loop variable and the call's argument differently)."""
  for p, _ in [(object(), None)]: return _refcount(p)
  raise AssertionError
_FREE_REFS = _free_refs()

class EagerPlan:
  """A cached schedule made runnable over slots: its input placeholders, then the buffers it creates (new memory for each
  result: a pooled Buffer only once nothing holds it any more). The replay (core.engine.run's HCQReplay or
  replay.DirectReplay) is bound to those slots once; each call gets the created buffers, runs the replay on this call's
  Buffers and rebuilds the results over them."""
  def __init__(self, items: list[ScheduleItem], res: list[UOp], phs: list[UOp], var_vals: dict[UOp, int]):
    phset = set(phs)
    created = list(dict.fromkeys(b for it in items for b in it.bufs if b not in phset))
    slots = phs + created
    self.var_vals, self.n_inputs = var_vals, len(phs)
    index = {b: i for i, b in enumerate(slots)}
    escaping = {_base(r) for r in res}
    # per created buffer: (DEVICE node, size, dtype, needs a uop: a result lives in it, the kept result's movement ops: below)
    self.created: list[tuple[UOp, Any, DType, bool, list[UOp] | None]] = [(b.src[1], b.arg, b.dtype, b in escaping, None) for b in created]
    # per created buffer: its pool of (Buffer, the BUFFER node over it or None for an intermediate, the result node over that
    # node when the pool keeps it: below), the shared pool's key of a bigger one, or None (a symbolic size: not pooled)
    self.pools: list[list[tuple[Buffer, UOp | None, UOp | None]] | tuple | None] = \
      [None if type(b.arg) is not int else [] if b.arg * b.dtype.itemsize <= POOL_BYTES else (b.src[1].arg, b.arg, b.dtype, b in escaping)
       for b in created]
    self.written = sorted({index[it.bufs[0]] for it in items if it.bufs and it.bufs[0] in phset})   # inputs assigned into
    # per result: (slot of its base buffer, movement ops over it from the bottom up), or (-1, the result over placeholders)
    self.results: list[tuple[int, Any]] = []
    for r in res:
      chain: list[UOp] = []
      u = r
      while u.op in GroupOp.Movement and len(u.src) == 1: chain, u = [u] + chain, u.src[0]
      self.results.append((index[u], chain) if u in index else (-1, r))
    # per created buffer: the movement ops of the one result over it (a sum's reshape to (), a@b's to (n, m)) when its pool (its
    # own, or the shared one) keeps that result's node with the Buffer, handed out again with it: a repeat makes no view node (and
    # frees none), which after a big kernel flushed the caches cost more than the rest of the rebuild (a 1024^3 a@b: ~12 us).
    # Only where every result is a view of a created buffer and no two share one (the pool's entry then stands for that one result)
    bases = [i for i, _ in self.results]
    if all(i >= len(phs) for i in bases) and len(set(bases)) == len(bases):
      for j, (i, chain) in enumerate(self.results):
        if chain and (pool := self.pools[c := i - len(phs)]) is not None:
          self.created[c], self.results[j] = (*self.created[c][:4], chain), (i, [])
          # the shared pool's entries of this key then hold such a view node: its key names the view (the nodes' fields)
          if isinstance(pool, tuple): self.pools[c] = (*pool, tuple((m.op, m.dtype, m.arg, m.tag) for m in chain))
    self.slots = slots
    hcq = [_item_hcq(it.ast, it.bufs) for it in items]
    self.replay: Any = None
    if items and all(hcq): self.replay = hcq_replay_for(items, slots)
    elif items and not any(hcq): self.replay = DirectReplay(items, slots)
    self.ok = not items or self.replay is not None   # a schedule mixing HCQ and direct items takes the general path

  def __call__(self, inputs: list[UOp], var_vals: dict[UOp, int]) -> list[UOp]:
    uops: list[UOp | None] = list(inputs)
    # a loop, not a comprehension: Python 3.11 makes a function and a frame per comprehension (1.6k of x + 1's 77k instructions)
    bufs: list[Buffer] = []
    for inp in inputs: bufs.append(f.buffer if (f := _fget(id(inp))) is not None and f.buffer is not None else buffer_of(inp))
    # the created buffers get their memory here, before the replay reads their addresses (its allocate-on-miss goes through
    # an AttributeError, about 0.7 us a buffer)
    for (dev, size, dtype, named, kept), pool in zip(self.created, self.pools):
      b: Buffer | None = None
      u: UOp | None = None
      if pool is not None:
        for p, pu, pr in (pool if isinstance(pool, list) else _shared.get(pool, ())):
          # only the pool holds it: for a result, its node too, which nothing else holds (no tensor, view, memo or graph: a
          # dead result, so no one can tell the node handed out again from a new one) and whose fact is the only other
          # reference to the Buffer; a kept result node (pr) likewise, then the BUFFER node's other holder is that node
          if pu is None:
            if _refcount(p) == _FREE_REFS:
              b = p
              break
          elif pr is None:
            if _refcount(pu) == _FREE_REFS and _refcount(p) == _FREE_REFS + 1:
              b, u = p, pu
              break
          elif _refcount(pr) == _FREE_REFS and _refcount(pu) == _FREE_REFS + 1 and _refcount(p) == _FREE_REFS + 1:
            b, u = p, pr
            break
      if b is None:
        b = Buffer(dev.arg, size, dtype).allocate()
        r: UOp | None = None
        if named:
          # UOp.new_buffer with the DEVICE node at hand, and buffer_of's entry set directly (the node is this thread's alone)
          u = UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, arg=next(_unique_ids)), dev), size)
          facts.of(u).buffer = b
          if kept is not None:
            r = u
            for m in kept: r = UOp(m.op, m.dtype, (r,), m.arg, m.tag)
        if isinstance(pool, list):
          # a full pool lets its oldest go: that Buffer (and node) is freed as usual when whatever holds it lets go
          if len(pool) >= POOL_DEPTH: del pool[0]
          pool.append((b, u, r))
        elif pool is not None: _shared_keep(pool, (b, u, r))
        if r is not None: u = r
      uops.append(u)   # None for an intermediate: only its memory is needed, for this run; a kept result's node for its result
      bufs.append(b)
    # the results' nodes before the run, not after: then the Python a big kernel's run leaves on cold caches is only the returns
    out = []
    for i, chain in self.results:
      if i < 0:
        out.append(chain.substitute({s: u for s, u in zip(self.slots, uops) if u is not None}))
        continue
      v = uops[i]
      assert v is not None, "a result's buffer is always created with a uop"
      for m in chain: v = UOp(m.op, m.dtype, (v,), m.arg, m.tag)
      out.append(v)
    if self.replay is not None: self.replay(bufs, var_vals)
    return out

def _run_eager(key: tuple, inputs: list[UOp], lits: tuple[UOp, ...] = ()) -> tuple[list[UOp], EagerPlan] | None:
  """The results of running the cached schedule of `key` on `inputs` and scalars `lits`, or None when the general path must run it."""
  if (hit := schedules.get(key)) is None or (e := hit.plan) is False: return None
  if e is None:
    e = EagerPlan(hit.items, hit.results, hit.inputs, hit.var_vals)
    hit.plan = e if e.ok else False
    if not e.ok: return None
  return e(inputs, _with_lits(hit, lits)), e

# *** the eager op cache: one op over buffers and scalars, run again straight from its node (no walk, no schedule lookup) ***

class EagerOps:
  """Op key -> (EagerPlan, its variable values) for the eager ops seen before whose sources are all input BUFFER nodes or
  nodes the walk keys as themselves (broadcast scalars, marked constant subgraphs): `(x + 1).realize()` in a loop. The key is
  the op (op, dtype, arg, tag) and per source either (dtype, size, DEVICE node) of a BUFFER, the index of an earlier source
  that is the same BUFFER (x + x reads one input, x + y two), or the node itself (hash-consed: its identity is its value, and
  the key keeps it alive). A view, a cast or any other graph under the op is none of these, so it misses; a changed shape,
  dtype, device or scalar is another key. Entries are made only from a schedule the general path planned under the same
  settings (_fill), and the whole table goes when the schedule cache does."""
  def __init__(self, max_entries: int = 512):
    self.table: dict[tuple, tuple[EagerPlan, dict[UOp, int]]] = {}
    # a PendingOp's key (op, dtype, length, DEVICE node, scalar) -> the entry of its node's op key: the key says everything
    # the node's op key does (the broadcast scalar node is made from the dtype, the scalar, the device and the shape)
    self.scalar: dict[tuple, tuple[EagerPlan, dict[UOp, int]]] = {}
    self.max_entries, self.hits, self.misses = max_entries, 0, 0
  def clear(self) -> None:
    self.table.clear()
    self.scalar.clear()
  def __len__(self) -> int: return len(self.table)

eager_ops = EagerOps()
Device.on_change(eager_ops.clear)

def _op_key(u: UOp) -> tuple[tuple, list[UOp], list[UOp]]:
  """(the eager op cache's key of root `u`, its input BUFFER nodes in order, the nodes it holds as themselves). A plan's output
  (core.tensor.plans) is keyed by the plan's key over the plan's inputs, as _walk keys it: its graph is the plan's."""
  if (f := _fget(id(u))) is not None and (p := f.plan) is not None:
    return _sources_key([_PLAN, p[0]], p[1]) if (ok := p[2]) is None else ok   # noted by plans.pending
  return _sources_key([u.op, u.dtype, u._key[3], u.tag], u.src)

def plan_op_key(plan_key: Any, inputs: tuple[UOp, ...]) -> tuple[tuple, list[UOp], list[UOp]]:
  """_op_key's answer for the output of plan `plan_key` (core.tensor.plans) over `inputs`, made without the output's node."""
  return _sources_key([_PLAN, plan_key], inputs)

def _sources_key(key: list, srcs: tuple[UOp, ...]) -> tuple[tuple, list[UOp], list[UOp]]:
  """_op_key from its root's part `key` and the root's sources `srcs`."""
  inputs: list[UOp] = []
  held: list[UOp] = []
  for x in srcs:
    if x.op is Ops.BUFFER:
      if x in inputs: key.append(inputs.index(x))
      else:
        key.append((x.dtype, x.arg, x.src[1]))
        inputs.append(x)
    elif x.op is Ops.RESHAPE and (b := x.src[0]).op is Ops.BUFFER and len(x.src) == 1:
      # a tensor of more than one dimension over its buffer (Tensor(ndarray) makes one): the shape is part of the key
      if b in inputs: key.append((x._key[3], inputs.index(b)))
      else:
        key.append((x._key[3], b.dtype, b.arg, b.src[1]))
        inputs.append(b)
    elif x.op is Ops.EXPAND and (y := x.src[0]).op is Ops.RESHAPE and y.src[0].op is Ops.CONST:
      key.append(x)   # x + 1's broadcast scalar, held as itself (_inner_key's last case) without its call
      held.append(x)
    else: key.append(_inner_key(x, inputs, held, [OP_KEY_NODES]))
  return tuple(key), inputs, held

# the most nodes below an op key's root that it keys by their structure (a layernorm's `* w + b`: 4), not as themselves
OP_KEY_NODES = 8

def _inner_key(x: UOp, inputs: list[UOp], held: list[UOp], left: list[int]) -> Any:
  """Source x's part of an op key: a buffer (or its reshape) as in _op_key; while `left` allows, a plan's output over the
  plan's inputs, an ALU op or a broadcast of a buffer (reshapes and expands down to one: a bias's EXPAND(RESHAPE(b))) by its op,
  dtype, arg, tag and its sources' parts; else x itself (held: _fill takes only pure ones)."""
  if x.op is Ops.BUFFER or (x.op is Ops.RESHAPE and x.src[0].op is Ops.BUFFER and len(x.src) == 1):
    b = x.src[0] if x.op is Ops.RESHAPE else x
    j = next((i for i, y in enumerate(inputs) if y is b), -1)
    if j < 0: inputs.append(b)
    return (x._key[3] if x is not b else None, j if j >= 0 else (b.dtype, b.arg, b.src[1]))
  # a computed node (a memo) is held: the general path reads it from its buffer (its walk substitutes it), which a key
  # over its structure would compute again
  if left[0] > 0 and ((f := _fget(id(x))) is None or f.realized is None):
    if f is not None and (p := f.plan) is not None:
      left[0] -= 1
      return (_PLAN, p[0], tuple([_inner_key(s, inputs, held, left) for s in p[1]]))
    if x.op in GroupOp.ALU or (x.op in _BROADCAST and _broadcast_of_buffer(x)):
      left[0] -= 1
      return (x.op, x.dtype, x._key[3], x.tag, tuple([_inner_key(s, inputs, held, left) for s in x.src]))
  held.append(x)
  return x

_BROADCAST = (Ops.RESHAPE, Ops.EXPAND)   # what broadcasting an operand makes (other movement ops are views: never keyed)
def _broadcast_of_buffer(x: UOp) -> bool:
  while x.op in _BROADCAST and len(x.src) == 1: x = x.src[0]
  return x.op is Ops.BUFFER

def _fill(u: UOp, walked: list[UOp] | None) -> None:
  """After the general path realized root `u`: an eager op cache entry for it when its walk is the one-op walk (buffers and
  broadcast scalars under one node, literals numbered) or its op key (_op_key: plans' outputs, ALU ops and broadcasts of
  buffers keyed by structure) holds only pure nodes as themselves, and its schedule has an eager plan (from its second use on).
  `walked`: the input buffers of the general path's walk of `u`, None when that walk met a memo entry."""
  if not isinstance(w := _walk_one(u), tuple):
    # the general walk's key, when it reads no memo entry. A node the key holds as itself must read no buffer and bind nothing
    # (its node alone then says what it computes). The walk's buffers must be the key's, which the general path's walk
    # already tells (a buffer under a held node: an op over a view), before the search of each held node (_pure) and a
    # second walk
    if w is None or walked is None or walked != (ok := _op_key(u))[1] or not all(_pure(x) for x in ok[2]) or \
       (w := _walk([u], check_memo=True)) is None or w[2] or w[3]: return
  key, inputs, _ = _op_key(u)
  # the plan's inputs must be the key's, in order (x + x reads one buffer, a view's buffer is its input)
  if not inputs or w[1] != inputs: return
  if (hit := schedules.get(w[0])) is None or not isinstance(e := hit.plan, EagerPlan) or e.written: return
  if len(eager_ops.table) >= eager_ops.max_entries: eager_ops.clear()
  entry = (e, _with_lits(hit, w[4]))
  # a PendingOp key may point to the entry it replaces
  if (old := eager_ops.table.get(key)) is not None and old != entry: eager_ops.scalar.clear()
  eager_ops.table[key] = entry

def _pure(x: UOp) -> bool:
  """Whether no node of x's graph is _IMPURE: a search that stops at the first one (a conv's ~40 nodes over its buffers, where
  a toposort of the whole graph to find one was a third of a small eager conv's engine time, on every call)."""
  stack, seen = [x], {x}
  while stack:
    u = stack.pop()
    if u.op in _IMPURE: return False
    for s in u.src:
      if s not in seen:
        seen.add(s)
        stack.append(s)
  return True

def _memoize(roots: tuple[UOp, ...] | list[UOp], res_list: list[UOp]) -> None:
  """The memo for every root (only views can be contiguous buffers already). Not for graphs that read no buffer
  (Tensor.ones(n) + 1): recomputing one is a fill, and its nodes are shared with the kernel's AST, which the compile caches
  keep: a memo there would keep the result's memory alive after its tensor is gone."""
  global _plain_epoch
  for r, res in zip(roots, res_list):
    if r is not res and (r.op not in _VIEWS or contiguous_buffer(r) is None):
      f = facts.of(r)
      if f.plain == _plain_epoch: _plain_epoch += 1
      b = res
      while b.op in GroupOp.Movement: b = b.src[0]
      f.realized = (res, (fb.version if (fb := _fget(id(b))) is not None else 0), _assign_epoch)

_VIEWS = (Ops.RESHAPE, Ops.SHRINK, Ops.BUFFER)   # the ops contiguous_buffer can answer something other than None for
_NO_OP_CACHE = (Ops.BUFFER, Ops.ASSIGN, Ops.BIND)
_IMPURE = (Ops.BUFFER, Ops.ASSIGN, Ops.BIND, Ops.DEFINE_VAR)
_SCALAR_OPS = (Ops.ADD, Ops.MUL)   # core.tensor.elementwise._scalar_op's

def _op_hit(u: UOp) -> list[UOp] | None:
  """The results of root `u` from the eager op cache without a memo (under the engine lock), or None: the general path runs it.
  Not in a Jit capture, under literal keeping, per-kernel timing or the IMAGE/NOOPT modes the schedule cache keys apart."""
  if u.op in _NO_OP_CACHE or not _capture.plain() or profiler.timing() or IMAGE.value or NOOPT.value: return None
  key, inputs, _ = _op_key(u)
  if (entry := eager_ops.table.get(key)) is None:
    eager_ops.misses += 1
    return None
  eager_ops.hits += 1
  return entry[0](inputs, entry[1])

def _is_realized(r: UOp) -> bool:
  """Already a buffer, or a static reshape of one: realize returns it as it is (a Jit's inputs, a second .realize())."""
  return r.op is Ops.BUFFER or (r.op is Ops.RESHAPE and r.src[0].op is Ops.BUFFER and len(r.src) == 1 and all(type(d) is int for d in r.arg))

def realize(*roots: UOp) -> list[UOp]:
  """Compute the graphs `roots`; return for each an equivalent uop over a realized buffer (under the engine lock)."""
  if all([_is_realized(r) for r in roots]): return list(roots)
  with engine_lock:
    if len(roots) == 1:
      if (res_list := _op_hit(roots[0])) is not None: _memoize(roots, res_list)
      else: res_list = _realize_one(roots[0])[0]
      return res_list
    return _realize_graphs(roots)[0]

def _realize_one(u: UOp, memo: bool = True) -> tuple[list[UOp], list[UOp] | None]:
  """The general path for one root, then its eager op cache entry when it can have one: (results, the walk's input buffers or
  None when it met a memo entry; see _realize_graphs)."""
  res_list, walked = _realize_graphs((u,), memo)
  _fill(u, walked)
  return res_list, walked

def realize_uop_of(holder: Any) -> None:
  """holder.uop = realize(holder.uop)[0] (Tensor.realize of one tensor), where an eager op cache hit makes the memo only when
  the node outlives the call: one only the holder held dies here, and nothing can build a graph over it any more (the memo
  was most of a repeated tiny op's engine time)."""
  if (p := holder.__dict__.get("_pending")) is not None:
    # a PendingOp (core.tensor.elementwise: keyed in eager_ops.scalar, over one buffer) or a PendingPlan (core.tensor.plans: its
    # op key, over its buffers): its plan run on its buffers, its node never built, when _op_hit would run the plan
    scalar = p.scalar
    with engine_lock:
      if (entry := (eager_ops.scalar if scalar else eager_ops.table).get(p[0])) is not None and _capture.plain() and \
         not (profiler.timing() or IMAGE.value or NOOPT.value):
        eager_ops.hits += 1
        holder.uop = entry[0]([p[1]] if scalar else p[1], entry[1])[0]
        holder._pending = None
        return
    u = holder.uop   # built now: the general path below
  elif (op := (u := holder.uop).op) is Ops.BUFFER or (op is Ops.RESHAPE and _is_realized(u)): return   # _is_realized, its usual miss inline
  with engine_lock:
    if (res_list := _op_hit(u)) is None:
      res_list, walked = _realize_one(u, memo=False)
      holder.uop = res_list[0]
      # the general path's memo likewise (_realize_graphs' rule: a graph that read a buffer), only for a node that outlives the call
      if _refcount(u) > 2 and (walked is None or walked): _memoize((u,), res_list)
    else:
      holder.uop = res_list[0]
      if _refcount(u) > 2: _memoize((u,), res_list)   # held elsewhere than in `u` and getrefcount's argument
    _note_scalar(u)

def _note_scalar(u: UOp) -> None:
  """After realizing root `u`: when u is a node a PendingOp builds (core.tensor.elementwise: ADD or MUL of a 1-d BUFFER and
  its dtype's nonzero Python scalar broadcast) and its op key has an entry, the PendingOp key that entry serves. The node
  rebuilt from the key must be u itself (hash-consed): then the key says all the op key does."""
  if len(s := u.src) != 2 or (b := s[0]).op is not Ops.BUFFER or (c := s[1]).op is not Ops.EXPAND or u.op not in _SCALAR_OPS: return
  if (c := c.src[0]).op is not Ops.RESHAPE or (c := c.src[0]).op is not Ops.CONST or type(y := c.arg) is not float or not y: return
  key = (u.op, b.dtype, b.arg, b.src[1], y)
  if key not in eager_ops.scalar and UOp(u.op, b.dtype, (b, UOp.const(b.dtype, y, b.src[1].arg, (b.arg,)))) is u and \
     (entry := eager_ops.table.get(_op_key(u)[0])) is not None: eager_ops.scalar[key] = entry

def _realize_graphs(roots: tuple[UOp, ...], memo: bool = True) -> tuple[list[UOp], list[UOp] | None]:
  """(each root's result, the walk's input buffers or None when the walk met a memo entry). `memo`: memoize the roots."""
  global _assign_epoch
  # a Jit capture keeps its scalars as literals: its replay binds only the variables of its inputs' shapes
  capturing, kept = _capture.state()
  todo, substituted, lift = list(roots), False, not kept
  if (w := _walk(todo, check_memo=True, lift=lift)) is None:
    todo, substituted = _substitute_realized(todo), True
    w = _walk(todo, check_memo=False, lift=lift)
    assert w is not None
  key, inputs, has_assign, _, lits = w
  # settings the schedule depends on (IMAGE marks image parameters, NOOPT leaves reductions unsplit): switching one in a process
  # must not reuse a schedule made under the other value
  if IMAGE.value or NOOPT.value: key = (key, IMAGE.value, NOOPT.value)
  # a Jit capture and DEBUG/PROFILE reports need the schedule items
  if capturing is None and not profiler.timing() and (fast := _run_eager(key, inputs, lits)) is not None:
    res_list, e = fast
    if has_assign or substituted:
      for i in e.written: _bump_version(inputs[i])
  else:
    # no collector inside: a first call's schedule, codegen and compiles build and drop graphs by the million, and the
    # collections they set off walk every live node again and again (a cold ResNet-18 training step: ~590, 5 of them full)
    with gc_paused():
      items, res_list, var_vals = _scheduled(todo, key, inputs, lits)
      if capturing is not None: capturing.add(items)
      run_schedule(items, var_vals)
    if has_assign or substituted:
      inset = set(inputs)
      for it in items:
        if it.bufs and it.bufs[0] in inset: _bump_version(it.bufs[0])
  if has_assign: _assign_epoch += 1
  if has_assign or substituted:
    # the caller's graphs (before memo substitution) hold the ASSIGN nodes other tensors may still reference
    for u in UOp(Ops.SINK, src=tuple(roots) + tuple(todo)).toposort(gate=lambda u: u.op is not Ops.BUFFER and _assigned(u) is None):
      if u.op is Ops.ASSIGN and (f := facts.of(u)).assigned is None:
        _retire_marks(f)
        f.assigned = u.src[0]
  if memo and inputs: _memoize(roots, res_list)
  return res_list, None if substituted else inputs

# from_host keeps the last nodes it made for a small (device, dtype, shape) and hands one out again once nothing else holds it,
# as EagerPlan's pool does for results: `step(Tensor(x))` in a loop then skips making three nodes and a Buffer and freeing them
# (most of a Tensor(ndarray)'s cost). Two per shape: the previous input may still be alive while the next one is made.
HOST_POOL_BYTES = 64 << 10
HOST_POOL_DEPTH = 2
HOST_POOL_SHAPES = 8
# (device, dtype, shape) -> [(Buffer, BUFFER node, its RESHAPE or None for 1-d)], oldest first; taken under its own lock (Tensor
# creation runs outside the engine lock)
_host_pool: dict[tuple, list[tuple[Buffer, UOp, UOp | None]]] = {}
_host_pool_lock = threading.Lock()
Device.on_change(_host_pool.clear)

def _free_host_node(pool: list[tuple[Buffer, UOp, UOp | None]]) -> tuple[Buffer, UOp] | None:
  """(Buffer, the node to return) of a pool entry that only the pool holds (its node, the BUFFER node under a RESHAPE, and the
  Buffer, held besides by its node's fact), or None."""
  for b, u, top in pool:
    if top is None:
      if _refcount(u) == _FREE_REFS and _refcount(b) == _FREE_REFS + 1: return b, u
    elif _refcount(top) == _FREE_REFS and _refcount(u) == _FREE_REFS + 1 and _refcount(b) == _FREE_REFS + 1: return b, top
  return None

def from_host(data: memoryview | bytes | bytearray, dtype: DType, device: str, shape: tuple[int, ...]) -> UOp:
  """A realized uop holding a copy of `data` (row-major bytes of `shape`)."""
  n = math.prod(shape)   # ints only here: in C, without helpers.prod's call per dimension
  mv = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" or data.ndim != 1 else data
  if mv.nbytes != n * dtype.itemsize: raise ValueError(f"from_host: {mv.nbytes} bytes given for shape {shape} of {dtype}")
  pool = None
  if 0 < mv.nbytes <= HOST_POOL_BYTES:
    with _host_pool_lock:
      if (pool := _host_pool.get(key := (device, dtype, shape))) is None:
        if len(_host_pool) >= HOST_POOL_SHAPES: del _host_pool[next(iter(_host_pool))]
        pool = _host_pool[key] = []
      elif (hit := _free_host_node(pool)) is not None:
        # nothing else holds the entry, so no one can tell its node from a new one: only the copy is left to do (taken here,
        # under the lock: no other thread can find it free meanwhile, its returned node now holds it)
        hit[0]._allocator._copyin(hit[0]._buf, mv)
        return hit[1]
  u = UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, arg=next(_unique_ids)), _device_node(device)), n)   # UOp.new_buffer
  # a node made just now: no other thread knows it, so its Buffer is set without buffer_of's checks and lock
  facts.of(u).buffer = buf = Buffer(device, n, dtype).allocate()
  # straight to the allocator that gave the memory (Buffer.copyin's checks are the ones above): Tensor(ndarray) passes here per call
  if n: buf._allocator._copyin(buf._buf, mv)
  top = None if len(shape) == 1 else UOp(Ops.RESHAPE, dtype, (u,), shape)   # u.reshape(shape) without u's shape worked out
  if pool is not None:
    with _host_pool_lock:
      if len(pool) >= HOST_POOL_DEPTH: del pool[0]
      pool.append((buf, u, top))
  return u if top is None else top

_device_nodes: dict[str, UOp] = {}
def _device_node(device: str) -> UOp:
  if (d := _device_nodes.get(device)) is None: d = _device_nodes[device] = UOp(Ops.DEVICE, arg=device)
  return d

def realized_buffer(u: UOp) -> tuple[Buffer, int]:
  """Realize `u`: the Buffer holding its elements row-major from its start (allocated), and how many of them it uses (symbolic
  shapes use the start of a buffer sized for the largest value their variables allow)."""
  r = realize(u)[0]
  if (cb := contiguous_buffer(r)) is None: raise RuntimeError(f"{r.op.name} did not realize to a buffer")
  buf = buffer_of(cb[0])
  if buf.nbytes and not buf.is_allocated(): buf.allocate()
  return buf, sym_val(cb[1])

def to_host(u: UOp) -> memoryview:
  """Realize `u` and return a copy of its bytes, row-major and contiguous."""
  with engine_lock:   # the buffer may be a Jit's, which another thread's replay writes
    buf, n = realized_buffer(u)
    out = memoryview(bytearray(buf.nbytes))
    if buf.nbytes: buf.copyout(out)
  return out[:n * buf.dtype.itemsize]

def adopt_buffer(buf: Buffer, shape: tuple[int, ...]) -> UOp:
  """A realized uop over an existing (allocated) Buffer: foreign memory wrapped without a copy (Tensor.from_blob)."""
  u = UOp.new_buffer(buf.device, buf.size, buf.dtype)
  facts.of(u).buffer = buf
  return u.reshape(shape)

