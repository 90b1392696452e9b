"""Pattern matching over UOps: `UPat`, `PatternMatcher`, and `graph_rewrite` to a fixed point."""
from __future__ import annotations
import collections, inspect, itertools
from typing import Any, Callable, Iterable, Sequence
from core.ir.dtype import DType
from core.ir.ops import UOp, Ops, GroupOp
from core.helpers import TRACK_REWRITES

class UPat:
  """A pattern over UOps.
  op: an Op or a tuple of Ops (None: any); dtype: a DType or tuple (None: any); src: a tuple (in order), a list (any
  permutation, for commutative ops) or one UPat (every source); arg: exact value (None: any); name: capture name."""
  __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "tag", "custom", "early_reject", "_any")
  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: UPat | Sequence[UPat] | None = None, arg: Any = None, name: str | None = None, allow_any_len: bool = False,
               tag: Any = None, custom: Callable[[UOp], bool] | None = None):
    self.op: frozenset[Ops] | None = None if op is None else frozenset((op,) if isinstance(op, Ops) else op)
    self.dtype: frozenset[DType] | None = None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
    self.arg, self.name, self.allow_any_len, self.tag, self.custom = arg, name, allow_any_len, tag, custom
    self._any: tuple[UPat, ...] | None = None
    # src kinds: None (any), ("repeat", pat), ("perm", pats), ("fixed", pats)
    if src is None: self.src: Any = None
    elif isinstance(src, UPat): self.src = ("repeat", src)
    elif isinstance(src, list): self.src = ("perm", tuple(src))
    else: self.src = ("fixed", tuple(src))
    # ops that must be among the sources: a cheap test before the full match
    self.early_reject: frozenset[Ops] = frozenset()
    if self.src is not None and self.src[0] != "repeat":
      self.early_reject = frozenset(next(iter(p.op)) for p in self.src[1] if p.op is not None and len(p.op) == 1 and p._any is None)

  @staticmethod
  def any(*pats: UPat) -> UPat:
    """Matches if any of `pats` matches."""
    ret = UPat()
    ret._any = pats
    return ret
  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None, vec: bool = True) -> UPat:
    return UPat((Ops.CONST, Ops.VCONST) if vec else Ops.CONST, dtype, name=name)
  @staticmethod
  def const(dtype: DType | Iterable[DType] | None, value: Any) -> UPat: return UPat(Ops.CONST, dtype, arg=value)
  def named(self, name: str) -> UPat:
    ret = UPat(self.op, self.dtype, None, self.arg, name, self.allow_any_len, self.tag, self.custom)
    ret.src, ret.early_reject, ret._any = self.src, self.early_reject, self._any
    return ret

  # build patterns with operators, like UOps: commutative ops match either order
  def alu(self, op: Ops, *src: UPat) -> UPat:
    pats = [self, *src]
    return UPat(op, None, pats if op in GroupOp.Commutative else tuple(pats))
  def _bin(self, op: Ops, x: Any, rev: bool = False) -> UPat:
    y = x if isinstance(x, UPat) else UPat.const(None, x)
    return y.alu(op, self) if rev else self.alu(op, y)
  def __add__(self, x: Any) -> UPat: return self._bin(Ops.ADD, x)
  def __radd__(self, x: Any) -> UPat: return self._bin(Ops.ADD, x, True)
  def __mul__(self, x: Any) -> UPat: return self._bin(Ops.MUL, x)
  def __rmul__(self, x: Any) -> UPat: return self._bin(Ops.MUL, x, True)
  def __sub__(self, x: Any) -> UPat: return self._bin(Ops.SUB, x)
  def __floordiv__(self, x: Any) -> UPat: return self._bin(Ops.IDIV, x)
  def __mod__(self, x: Any) -> UPat: return self._bin(Ops.MOD, x)
  def __truediv__(self, x: Any) -> UPat: return self._bin(Ops.FDIV, x)
  def __and__(self, x: Any) -> UPat: return self._bin(Ops.AND, x)
  def __or__(self, x: Any) -> UPat: return self._bin(Ops.OR, x)
  def __xor__(self, x: Any) -> UPat: return self._bin(Ops.XOR, x)
  def __lt__(self, x: Any) -> UPat: return self._bin(Ops.CMPLT, x)
  def __neg__(self) -> UPat: return UPat(Ops.NEG, None, (self,))
  def ne(self, x: Any) -> UPat: return self._bin(Ops.CMPNE, x)
  def eq(self, x: Any) -> UPat: return self._bin(Ops.CMPEQ, x)
  def maximum(self, x: Any) -> UPat: return self._bin(Ops.MAX, x)
  def where(self, x: Any, y: Any) -> UPat: return UPat(Ops.WHERE, None, (self, x, y))
  def cast(self, dtype: DType | None = None, name: str | None = None) -> UPat: return UPat(Ops.CAST, dtype, (self,), name=name)

  def __repr__(self) -> str:
    if self._any is not None: return f"UPat.any{self._any!r}"
    fields = [("op", sorted(o.name for o in self.op) if self.op else None), ("dtype", self.dtype and sorted(map(repr, self.dtype))),
              ("src", self.src), ("arg", self.arg), ("name", self.name)]
    return "UPat(" + ", ".join(f"{k}={v!r}" for k, v in fields if v is not None) + ")"

  def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    """Every way `u` matches, each as a dict of captures (extending `store`)."""
    if self._any is not None: return [m for p in self._any for m in p.match(u, store)]
    if (self.op is not None and u.op not in self.op) or (self.dtype is not None and u.dtype not in self.dtype and u.dtype.scalar() not in self.dtype):
      return []
    if self.arg is not None and not _arg_equal(u.arg, self.arg): return []
    if self.tag is not None and u.tag != self.tag: return []
    if self.custom is not None and not self.custom(u): return []
    if self.name is not None:
      if (prev := store.get(self.name)) is not None:
        if prev is not u: return []
      else: store = {**store, self.name: u}
    if self.src is None: return [store]
    kind, pats = self.src
    if kind == "repeat": return _match_seq((pats,) * len(u.src), u.src, [store])
    if len(u.src) != len(pats) and not (self.allow_any_len and len(u.src) >= len(pats)): return []
    if kind == "fixed": return _match_seq(pats, u.src[:len(pats)], [store])
    out: list[dict[str, UOp]] = []
    for perm in _unique_perms(pats):
      for m in _match_seq(perm, u.src[:len(pats)], [store]):
        if m not in out: out.append(m)
    return out

def _arg_equal(a: Any, b: Any) -> bool:
  # tell 1 from True and 0.0 from -0.0: a rule for x*1 must not fire on x*True by accident
  return a == b and type(a) is type(b) if not isinstance(a, tuple) else a == b

def _unique_perms(pats: tuple[UPat, ...]) -> list[tuple[UPat, ...]]:
  return list(dict.fromkeys(itertools.permutations(pats)))

def _match_seq(pats: Sequence[UPat], srcs: Sequence[UOp], stores: list[dict[str, UOp]]) -> list[dict[str, UOp]]:
  for p, s in zip(pats, srcs):
    stores = [m for st in stores for m in p.match(s, st)]
    if not stores: return []
  return stores

Rule = tuple[UPat, Callable[..., UOp | None]]

class PatternMatcher:
  """An ordered list of (UPat, fn) rules; the first rule whose pattern matches and whose fn returns a UOp wins.
  `fn` gets the named captures as keyword arguments, and `ctx` too if it declares that parameter."""
  def __init__(self, rules: Sequence[Rule], name: str | None = None):
    self.rules: list[Rule] = list(rules)
    self.name = name
    self.pdict: dict[Ops, list[tuple[UPat, Callable[..., Any], frozenset[Ops], bool, int]]] = collections.defaultdict(list)
    for i, (pat, fn) in enumerate(self.rules):
      wants_ctx = "ctx" in inspect.signature(fn).parameters
      for op in (pat.op if pat.op is not None and pat._any is None else _all_ops(pat)):
        self.pdict[op].append((pat, fn, pat.early_reject, wants_ctx, i))
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules, self.name or other.name)
  def __len__(self) -> int: return len(self.rules)

  def rewrite(self, u: UOp, ctx: Any = None, track: collections.Counter | None = None) -> UOp | None:
    """One rewrite of `u` by the first rule that applies, or None."""
    candidates = self.pdict.get(u.op)
    if not candidates: return None
    src_ops = {s.op for s in u.src}
    for pat, fn, reject, wants_ctx, i in candidates:
      if reject and not reject <= src_ops: continue
      for captures in pat.match(u, {}):
        ret = fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)
        if ret is not None and ret is not u:
          if track is not None: track[i] += 1
          return ret
    return None

def _all_ops(pat: UPat) -> Iterable[Ops]:
  if pat._any is not None: return set().union(*(set(_all_ops(p)) for p in pat._any))
  return pat.op if pat.op is not None else list(Ops)

# *** rewrite tracking (TRACK_REWRITES=1) ***

rewrite_stats: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
_tracked_matchers: dict[str, PatternMatcher] = {}

def print_rewrite_stats(file: Any = None) -> None:
  """Print, per named pass, how many times each rule fired (needs TRACK_REWRITES=1)."""
  for name, counts in rewrite_stats.items():
    pm = _tracked_matchers[name]
    print(f"pass {name}: {sum(counts.values())} rewrites", file=file)
    for i, n in counts.most_common():
      pat, fn = pm.rules[i]
      where = f"{getattr(fn, '__code__', None) and fn.__code__.co_filename.rsplit('/', 1)[-1]}:{getattr(fn, '__code__', None) and fn.__code__.co_firstlineno}"
      print(f"  {n:8d}  {where:24s} {pat!r}"[:160], file=file)

# *** graph rewrite ***

def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None) -> UOp:
  """Rewrite the graph under `sink` with `pm` until no rule applies anywhere. Memoized and iterative.
  bottom_up=False rewrites a node after its sources are final; bottom_up=True tries a node before its sources."""
  pass_name = name or pm.name or "unnamed"
  track: collections.Counter | None = None
  if TRACK_REWRITES:
    track = rewrite_stats[pass_name]
    _tracked_matchers[pass_name] = pm
  done: dict[UOp, UOp] = {}
  # stack entries: (node, stage, work) -- stage 0: start, 1: sources done, 2: take the answer of `work`
  stack: list[tuple[UOp, int, UOp]] = [(sink, 0, sink)]
  while stack:
    n, stage, w = stack.pop()
    if n in done: continue
    if stage == 0:
      if bottom_up:
        while (r := pm.rewrite(w, ctx, track)) is not None: w = r
        if w is not n and w in done:
          done[n] = done[w]
          continue
      stack.append((n, 1, w))
      stack.extend((s, 0, s) for s in reversed(w.src) if s not in done)
    elif stage == 1:
      new_src = tuple(done[s] for s in w.src)
      x = w if all(a is b for a, b in zip(new_src, w.src)) else w.replace(src=new_src)
      if bottom_up:
        if x is w or x in done or (r := pm.rewrite(x, ctx, track)) is None:
          done[n] = done.get(x, x)
          done[x] = done[n]
        else:
          stack.append((n, 2, r))
          stack.append((r, 0, r))
      else:
        r = pm.rewrite(x, ctx, track)
        if r is None:
          done[n] = done[x] = x
        elif r in done: done[n] = done[r]
        else:
          stack.append((n, 2, r))
          stack.append((r, 0, r))
    else:
      done[n] = done[w]
  return done[sink]

def graph_rewrite_map(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None) -> dict[UOp, UOp]:
  """Like graph_rewrite on a SINK, but returns {each source of the sink: its rewrite}."""
  out = graph_rewrite(sink, pm, ctx, bottom_up, name)
  return dict(zip(sink.src, out.src)) if out.op is Ops.SINK and len(out.src) == len(sink.src) else {sink: out}
