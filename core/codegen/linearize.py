"""Order a kernel graph into a list: loops stay contiguous, everything is emitted in the outermost loop it can live in."""
from __future__ import annotations
import heapq
from functools import reduce
from operator import or_
from core.ir.ops import UOp, Ops, intern_uop
from core.codegen.lowerer import RangeScopes

def is_shuffle(u: UOp) -> bool:
  """A vector made of lanes of other vectors (GEPs): one stage of a transposing tile's shuffle network (opt/shuffle.py)."""
  return u.op is Ops.VECTORIZE and all(s.op is Ops.GEP for s in u.src)

def has_shuffle_network(uops: list[UOp]) -> bool:
  """A shuffle of shuffles among `uops`: a transposing tile's network (opt/shuffle.py)."""
  return any(is_shuffle(u) and any(is_shuffle(g.src[0]) for g in u.src) for u in uops)

def tile_keys(items: list[UOp], deps: dict[UOp, set[UOp]], users: dict[UOp, list[UOp]], order: dict[UOp, int],
              shuffles: set[UOp] | None = None) -> dict[UOp, tuple[int, int, int, int]] | None:
  """Emission keys for a block holding a shuffle network (a shuffle of shuffles: a transposing tile, opt/shuffle.py) whose stores
  fall into groups that share no load (a split row's squares), else None (the graph's order). Key: (the first group whose stores
  need the item, the graph position of the last load it needs, its shuffle stage for loads and shuffles, else -1, graph
  position): each group square by square, a square's shuffles as soon as its rows are loaded, stores as soon as their values
  are ready.
  In the graph's depth-first order every output row pulled in the first stages of all its squares, which stayed live until
  the last row was stored (AVX2 4096^2: 72-80 ymm spills per tile). A group's loads, then each of its shuffle stages across
  all its squares (16 rows of 8 floats on AVX2: two 8x8 squares) held the 16 rows and their first stages at once: 12 ymm
  spill references per tile, 4 square by square, and a step's stores waited on all 16 loads. AVX2 code (znver3) on a Zen 5,
  4096^2, A/B in one process, GB/s: one thread (thread time) 29.1 -> 31.3; 2 threads (wall, real-time priority) 68.5 -> 74.3
  where the copy ran at 120, even (0.994x) where it ran at 66 (the memory the limit)"""
  if shuffles is None: shuffles = {it for it in items if is_shuffle(it)}
  if not shuffles: return None
  # what each item needs, one int: bit i for the i-th load in graph order (the highest set, the last load), and above the loads'
  # bits its shuffle stage as the highest of one-hot bits (a dep's bits OR-ed in, shifted one up at a shuffle: max + 1)
  loads = sorted([it for it in items if it.op is Ops.LOAD], key=order.__getitem__)
  n = len(loads)
  top, low = 1 << n, (1 << n) - 1
  seed = {ld: top | 1 << i for i, ld in enumerate(loads)}
  # each one's needs from its deps' (`deps` has none for an item that waits on nothing) in an order that puts each after its deps:
  # the graph's, where each node waits only on its own sources, which come before it, but a loop's item waits on its block's
  # items that its loop reads, which may come after it (a register tile's stores), and so do the items using the loop: those
  # wait for a pass over the late ones once the first is done (no second pass without a loop among the items)
  needs: dict[UOp, int] = {}
  get, pending = needs.__getitem__, items
  while pending:
    late: dict[UOp, None] = {}
    for it in pending:
      ds = deps.get(it, ())
      if late and not late.keys().isdisjoint(ds):   # (a dep late: no exception for each item after a loop's item)
        late[it] = None
        continue
      try: m = reduce(or_, map(get, ds), seed.get(it, top))
      except KeyError:   # (a dep not done yet)
        late[it] = None
        continue
      needs[it] = m if it not in shuffles else m >> n << (n + 1) | m & low
    if len(late) == len(pending): raise RuntimeError("cycle while linearizing a kernel")
    pending = list(late)
  topo = list(needs)   # (each item after its deps)
  if max(needs.values()) >> n < 4: return None   # no item at stage 2
  # stores that share a load are one group (connected through their loads), groups ranked by their first store
  groups: list[tuple[int, list[UOp]]] = []   # (the group's loads, its stores)
  for st in (it for it in topo if it.op is Ops.STORE):
    m, sts, apart = needs[st] & low, [st], []
    for grp in groups:
      if grp[0] & m: m, sts = m | grp[0], sts + grp[1]
      else: apart.append(grp)
    groups = apart + [(m, sts)]
  if len(groups) < 2: return None
  first = [min(map(order.__getitem__, sts)) for _, sts in groups]
  rank = {st: r for r, i in enumerate(sorted(range(len(groups)), key=first.__getitem__)) for st in groups[i][1]}
  # an item's group: the first (by rank) whose stores need it (the lowest bit of its users' and its own), the last + 1 for those
  # none needs
  below: dict[UOp, int] = {}
  for it in reversed(topo): below[it] = reduce(or_, map(below.__getitem__, users.get(it, ())), 1 << rank[it] if it in rank else 0)
  pos = [order[ld] for ld in loads]
  return {it: ((g & -g).bit_length() - 1 if (g := below[it]) else len(groups), pos[(m & low).bit_length() - 1] if (m := needs[it]) & low else -1,
               (m >> n).bit_length() - 1 if it in shuffles or it.op is Ops.LOAD else -1, order[it]) for it in items}

def linearize(sink: UOp) -> list[UOp]:
  scopes = RangeScopes()
  nodes = list(sink.toposort())
  order = dict(zip(nodes, range(len(nodes))))
  scopes.fill(nodes)
  live_of = scopes.cache
  ranges = [u for u in nodes if u.op is Ops.RANGE]
  end_of = {u.src[1]: u for u in nodes if u.op is Ops.END}
  # parent loop of each loop: the innermost loop its END still lives in
  depth: dict[UOp | None, int] = {None: 0}
  parent: dict[UOp, UOp | None] = {}
  pending = list(ranges)
  while pending:
    progress = False
    for r in list(pending):
      encl = live_of[end_of[r]] if r in end_of else frozenset()
      if all(e in depth for e in encl):
        parent[r] = max(encl, key=lambda e: depth[e]) if encl else None
        depth[r] = depth[parent[r]] + 1
        pending.remove(r)
        progress = True
    if not progress: raise RuntimeError(f"loops {pending} are not properly nested")

  # each node's block: a RANGE heads its own block, which lives in the parent (an END lives there too), anything else lives
  # in the innermost loop it is in (asked once per distinct set of loops: most nodes share their sources' set)
  innermost: dict[frozenset[UOp], UOp | None] = {frozenset(): None}
  home: dict[UOp, UOp | None] = {}
  children: dict[UOp | None, list[UOp]] = {}   # each block's items but ENDs (emitted with their loops), in graph order
  for u in nodes:
    if u.op is Ops.END:
      home[u] = parent[u.src[1]]
      continue
    if u.op is Ops.RANGE: h = parent[u]
    elif u.op is Ops.SINK: continue
    elif (h := innermost.get(live := live_of[u], u)) is u: h = innermost[live] = max(live, key=depth.__getitem__)
    home[u] = h
    if (kids := children.get(h)) is None: children[h] = [u]
    else: kids.append(u)

  # what each item waits on, an item being a node of a block or a loop in it (its RANGE: the whole loop, its END included). A
  # node using another orders, of the blocks they both live in, only the innermost (in every block outside it both lie in one
  # loop, one item), so each edge is looked at once, not once per enclosing loop
  meet: dict[tuple[UOp | None, UOp | None], tuple[UOp | None, UOp | None]] = {}
  def meeting(hm: UOp | None, hs: UOp | None) -> tuple[UOp | None, UOp | None]:
    """For a node living in block hm using one in block hs: in the innermost block both lie in, the loops holding them (None:
    the node itself lives there)."""
    pm, ps = [hm], [hs]
    while pm[-1] is not None: pm.append(parent[pm[-1]])
    while ps[-1] is not None: ps.append(parent[ps[-1]])
    k = min(len(pm), len(ps)) - 1   # the depth of the innermost block both lie in
    while pm[len(pm) - k - 1] is not ps[len(ps) - k - 1]: k -= 1
    return (None if k == len(pm) - 1 else pm[len(pm) - k - 2], None if k == len(ps) - 1 else ps[len(ps) - k - 2])
  deps: dict[UOp, set[UOp]] = {}
  users: dict[UOp, list[UOp]] = {}
  for m, hm in home.items():
    # an END is the item of its loop where it is that loop's end_of (else none); a source END stands for its loop
    item = m if m.op is not Ops.END else m.src[1] if end_of.get(m.src[1]) is m else None
    for s in m.src:
      if s.op is Ops.END: s = s.src[1]
      if (hs := home[s]) is hm: i, j = item, s
      elif s is hm: continue   # (a node of loop s's block using s: one item, s, where s lives)
      else:
        if (hit := meet.get((hm, hs))) is None: hit = meet[(hm, hs)] = meeting(hm, hs)
        i, j = item if hit[0] is None else hit[0], s if hit[1] is None else hit[1]
      if i is None or i is j: continue
      if (ds := deps.get(i)) is None: deps[i] = {j}
      elif j in ds: continue
      else: ds.add(j)
      if (us := users.get(j)) is None: users[j] = [i]
      else: us.append(i)
  left = {i: len(ds) for i, ds in deps.items()}

  VECTORIZE, GEP = Ops.VECTORIZE, Ops.GEP
  out: list[UOp] = []
  args: list[UOp] = []   # the kernel's arguments (PARAM, DEFINE_VAR), listed first
  def emit(scope: UOp | None) -> None:
    items = children.get(scope, [])
    # Kahn's algorithm, ties broken by the global topological position (distinct: a heap of positions), or in a transposing
    # tile's block by its groups of stores, one after another, each square by square (tile_keys; a heap of ranks by its key)
    shuffles = {it for it in items if it.op is VECTORIZE and all(s.op is GEP for s in it.src)}   # (is_shuffle, inline)
    tk = tile_keys(items, deps, users, order, shuffles) if shuffles else None
    if tk is None: rank, by_rank = order, nodes
    else:
      by_rank = sorted(items, key=tk.__getitem__)
      rank = dict(zip(by_rank, range(len(by_rank))))
    ready = [rank[it] for it in items if it not in left]
    heapq.heapify(ready)
    emitted = 0
    while ready:
      it = by_rank[heapq.heappop(ready)]
      emitted += 1
      if it.op is Ops.RANGE:
        out.append(it)
        emit(it)  # noqa: F821  (deleted once the outer function is done, to break the cycle)
        out.append(end_of[it])
      elif it.op in (Ops.PARAM, Ops.DEFINE_VAR): args.append(it)
      else: out.append(it)
      for us in users.get(it, ()):
        left[us] -= 1
        if not left[us]: heapq.heappush(ready, rank[us])
    if emitted != len(items): raise RuntimeError("cycle while linearizing a kernel")

  emit(None)
  del emit   # the recursive closure is a reference cycle holding the kernel's graph: break it, don't leave it for the gc
  # kernel arguments first, in slot order (buffers), then variables by name: renderers declare them in list order
  params, variables = [u for u in args if u.op is Ops.PARAM], [u for u in args if u.op is Ops.DEFINE_VAR]
  return sorted(params, key=lambda u: u.arg) + sorted(variables, key=lambda u: u.arg) + out

def finalize(uops: list[UOp]) -> list[UOp]:
  """Drop ordering-only nodes: AFTER becomes its value, GROUP its last source, STORE keeps (index, value). Nodes that read through an AFTER
  get their list position as tag, so two reads of one register at different times stay two distinct nodes."""
  sub: dict[UOp, UOp] = {}   # the nodes replaced so far (most nodes stay as they are)
  final: list[UOp] = []
  unreplaced, append = sub.keys().isdisjoint, final.append   # (the keys view follows sub)
  AFTER, GROUP, STORE, LOAD = Ops.AFTER, Ops.GROUP, Ops.STORE, Ops.LOAD
  for i, u in enumerate(uops):
    op, src = u.op, u.src
    if op is AFTER:
      sub[u] = sub.get(src[0], src[0])
      continue
    if op is GROUP:   # only groups stores (unrolled by the expander) under one END; the order is in the list already
      sub[u] = sub.get(src[-1], src[-1])
      continue
    # (an AFTER source is always replaced: a node whose sources are all unreplaced reads through none)
    if unreplaced(src): new_src, after = src, False
    else: new_src, after = tuple([sub.get(s, s) for s in src]), any([s.op is AFTER for s in src])
    if op is STORE: new_src = new_src[:2]
    if after or (op is LOAD and new_src[0].tag is not None): nu = sub[u] = intern_uop(UOp, op, u.dtype, new_src, u.arg, i)
    elif new_src is not src and new_src != src: nu = sub[u] = intern_uop(UOp, op, u.dtype, new_src, u.arg, u.tag)
    else: nu = u
    append(nu)
  return final
