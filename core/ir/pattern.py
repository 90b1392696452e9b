"""Pattern matching over UOps: `UPat`, `PatternMatcher`, and `graph_rewrite` to a fixed point."""
from __future__ import annotations
import collections, functools, inspect, itertools, math, types
from typing import Any, Callable, Iterable, Sequence
from core.ir.dtype import DType
from core.ir.ops import UOp, Ops, GroupOp, intern_uop
from core.helpers import TRACK_REWRITES, VIZ

class UPat:
  """A pattern over UOps.
  op: an Op or a tuple of Ops (None: any); dtype: a DType or tuple (None: any); src: a tuple (in order), a list (any
  permutation, for commutative ops) or one UPat (every source); arg: exact value (None: any); name: capture name."""
  __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "tag", "custom", "early_reject", "_any", "_fn")
  _fn: Matcher  # set on first use by matcher()
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
    out: list[dict[str, UOp]] = []
    def collect(st: dict[str, UOp]) -> None:
      if st not in out: out.append(dict(st))
    self.matcher()(u, dict(store), collect)
    return out

  def matcher(self) -> Matcher:
    """This pattern compiled to a closure `m(u, store, k)` (built once, on first use)."""
    try: return self._fn
    except AttributeError: pass
    self._fn = _compile(self)
    return self._fn

def _arg_equal(a: Any, b: Any) -> bool:
  # tell 1 from True and 0.0 from -0.0: a rule for x*1 must not fire on x*True, nor one for x+(-0.0) on x+0.0
  if isinstance(a, tuple): return a == b
  if type(a) is not type(b) or a != b: return False
  return type(a) is not float or math.copysign(1.0, a) == math.copysign(1.0, b)

# *** compiling a UPat into closures ***
# A compiled matcher is m(u, store, k): it checks u, extends the (mutable) store with its captures, calls the
# continuation k(store) for each way it matches and returns k's first non-None answer (or None). Captures are
# removed again on the way out, so backtracking through permutations and UPat.any allocates nothing per node.

Matcher = Callable[[UOp, dict, Callable[[dict], Any]], Any]

def _node_test(p: UPat) -> Callable[[UOp], bool] | None:
  """One predicate for everything about u itself (op, dtype, arg, tag, custom), or None when anything goes."""
  tests: list[Callable[[UOp], bool]] = []
  if p.op is not None:
    ops = p.op
    if len(ops) == 1:
      op0 = next(iter(ops))
      tests.append(lambda u: u.op is op0)
    else: tests.append(lambda u: u.op in ops)
  if p.dtype is not None:
    dts = p.dtype
    tests.append(lambda u: u.dtype in dts or u.dtype.scalar() in dts)
  if p.arg is not None:
    arg = p.arg
    tests.append(lambda u: _arg_equal(u.arg, arg))
  if p.tag is not None:
    tag = p.tag
    tests.append(lambda u: u.tag == tag)
  if p.custom is not None: tests.append(p.custom)
  if not tests: return None
  if len(tests) == 1: return tests[0]
  if len(tests) == 2:
    t0, t1 = tests
    return lambda u: t0(u) and t1(u)
  tt = tuple(tests)
  return lambda u: all(t(u) for t in tt)

def _seq(ms: tuple[Matcher, ...]) -> Callable[[tuple[UOp, ...], dict, Callable[[dict], Any]], Any]:
  """Match sources in order: ms[i] against srcs[i], chaining continuations."""
  if len(ms) == 0: return lambda srcs, st, k: k(st)
  if len(ms) == 1:
    m0 = ms[0]
    return lambda srcs, st, k: m0(srcs[0], st, k)
  if len(ms) == 2:
    m0, m1 = ms
    return lambda srcs, st, k: m0(srcs[0], st, lambda st1: m1(srcs[1], st1, k))
  if len(ms) == 3:
    n0, n1, n2 = ms
    return lambda srcs, st, k: n0(srcs[0], st, lambda st1: n1(srcs[1], st1, lambda st2: n2(srcs[2], st2, k)))
  head, rest = ms[0], _seq(ms[1:])
  return lambda srcs, st, k: head(srcs[0], st, lambda st1: rest(srcs[1:], st1, k))

def _src_matcher(p: UPat) -> Matcher | None:
  if p.src is None: return None
  kind, pats = p.src
  if kind == "repeat":
    sub = pats.matcher()
    def m_repeat(u: UOp, st: dict, k: Callable[[dict], Any]) -> Any:
      return _seq((sub,) * len(u.src))(u.src, st, k) if len(u.src) > 3 else _REPEAT[len(u.src)](sub, u.src, st, k)
    return m_repeat
  n, any_len = len(pats), p.allow_any_len
  orders = [_seq(tuple(q.matcher() for q in perm)) for perm in (_unique_perms(pats) if kind == "perm" else [pats])]
  if len(orders) == 1:
    only = orders[0]
    if any_len: return lambda u, st, k: only(u.src, st, k) if len(u.src) >= n else None
    return lambda u, st, k: only(u.src, st, k) if len(u.src) == n else None
  def m_perm(u: UOp, st: dict, k: Callable[[dict], Any]) -> Any:
    if len(u.src) != n and not (any_len and len(u.src) >= n): return None
    for order in orders:
      if (r := order(u.src, st, k)) is not None: return r
    return None
  return m_perm

_REPEAT: tuple[Callable[..., Any], ...] = (
  lambda m, s, st, k: k(st),
  lambda m, s, st, k: m(s[0], st, k),
  lambda m, s, st, k: m(s[0], st, lambda st1: m(s[1], st1, k)),
  lambda m, s, st, k: m(s[0], st, lambda st1: m(s[1], st1, lambda st2: m(s[2], st2, k))),
)

def _compile(p: UPat) -> Matcher:
  if p._any is not None:
    subs = tuple(q.matcher() for q in p._any)
    def m_any(u: UOp, st: dict, k: Callable[[dict], Any]) -> Any:
      for m in subs:
        if (r := m(u, st, k)) is not None: return r
      return None
    return m_any
  test, srcm, name = _node_test(p), _src_matcher(p), p.name
  if name is None:
    if srcm is None:
      if test is None: return lambda u, st, k: k(st)
      return lambda u, st, k: k(st) if test(u) else None
    if test is None: return srcm
    return lambda u, st, k: srcm(u, st, k) if test(u) else None
  def m_named(u: UOp, st: dict, k: Callable[[dict], Any]) -> Any:
    if test is not None and not test(u): return None
    if (prev := st.get(name)) is not None:
      if prev is not u: return None
      return k(st) if srcm is None else srcm(u, st, k)
    st[name] = u
    try: return k(st) if srcm is None else srcm(u, st, k)
    finally: del st[name]
  return m_named

def _unique_perms(pats: tuple[UPat, ...]) -> list[tuple[UPat, ...]]:
  return list(dict.fromkeys(itertools.permutations(pats)))

# fn answers a UOp (or None) in graph rewrites; renderers answer strings, spec checks bools, gradients tuples
Rule = tuple[UPat, Callable[..., Any]]

def _wants_ctx(fn: Callable[..., Any]) -> bool:
  # a plain function's parameter names are in its code object: inspect.signature costs ~50 us a rule, and building the matchers
  # of a process's first realize asks it for hundreds of rules (part of every start)
  code = getattr(fn, "__code__", None)
  if type(code) is not types.CodeType or isinstance(fn, functools.partial): return "ctx" in inspect.signature(fn).parameters
  return "ctx" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]

# a rule as rewrite tries it on nodes of one op: its matcher, fn, early reject, whether fn takes ctx, its index, its direct call
Candidate = tuple[Matcher, Callable[..., Any], frozenset[Ops], bool, int, Callable[[UOp, Any], Any] | None]

class PatternMatcher:
  """An ordered list of (UPat, fn) rules; the first rule whose pattern matches and whose fn returns a UOp wins.
  `fn` gets the named captures as keyword arguments, and `ctx` too if it declares that parameter."""
  def __init__(self, rules: Sequence[Rule], name: str | None = None):
    self.rules: list[Rule] = list(rules)
    self.name = name
    # per op, the rules that can match it, compiled when a node of that op is first rewritten: matchers are built at import
    # time and summed with `+`, and most never meet most ops (fanning each rule out to every op at construction was 1.5% of a
    # warm start's instructions)
    self._fast: dict[Ops, tuple[Candidate, ...]] = {}
    self._entries: list[tuple[frozenset[Ops] | None, UPat, Callable[..., Any], bool, int]] | None = None
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules, self.name or other.name)
  def __len__(self) -> int: return len(self.rules)
  def root_ops(self) -> frozenset[Ops] | None:
    """The ops some rule can match at its root (None: a rule matches any op). A graph holding none of them is its own rewrite."""
    out: set[Ops] = set()
    for pat, _ in self.rules:
      if (ops := _rule_ops(pat)) is None: return None
      out |= ops
    return frozenset(out)

  def _candidates(self, op: Ops) -> tuple[Candidate, ...]:
    if self._entries is None: self._entries = [(_rule_ops(pat), pat, fn, _wants_ctx(fn), i) for i, (pat, fn) in enumerate(self.rules)]
    ret = self._fast[op] = tuple((pat.matcher(), fn, pat.early_reject, wc, i, _direct(pat, fn, wc))
                                 for ops, pat, fn, wc, i in self._entries if ops is None or op in ops)
    return ret

  def rewrite(self, u: UOp, ctx: Any = None, track: collections.Counter | None = None) -> Any:
    """One rewrite of `u` by the first rule that applies, or None (the rule's answer: a UOp, or a string/bool/tuple)."""
    if (candidates := self._fast.get(u.op)) is None: candidates = self._candidates(u.op)
    src_ops: set[Ops] | None = None
    for match, fn, reject, wants_ctx, i, direct in candidates:
      if direct is not None:
        if (ret := direct(u, ctx)) is None or ret is u: continue
        if track is not None: track[i] += 1
        return ret
      if reject:
        if src_ops is None: src_ops = {s.op for s in u.src}
        if not reject <= src_ops: continue
      if wants_ctx:
        def k(st: dict, fn: Callable[..., Any] = fn) -> Any:
          ret = fn(ctx=ctx, **st)
          return ret if ret is not u else None
      else:
        def k(st: dict, fn: Callable[..., Any] = fn) -> Any:
          ret = fn(**st)
          return ret if ret is not u else None
      if (ret := match(u, {}, k)) is not None:
        if track is not None: track[i] += 1
        return ret
    return None

def _direct(pat: UPat, fn: Callable[..., Any], wants_ctx: bool) -> Callable[[UOp, Any], Any] | None:
  """A rule whose pattern looks at the node alone (no sources, no alternatives) as one call `(u, ctx) -> fn's answer or None`:
  it matches one way at most, so the matcher's continuation and capture dict (most of a renderer rule's cost, one rule a node)
  are not needed. Its op needs no test (rewrite picks rules by op); fn gets its arguments by position where they are exactly
  its parameters (ctx first). None for other patterns."""
  if pat.src is not None or pat._any is not None: return None
  test = _node_test(UPat(None, pat.dtype, None, pat.arg, None, tag=pat.tag, custom=pat.custom))
  params = (("ctx",) if wants_ctx else ()) + ((pat.name,) if pat.name is not None else ())
  code = getattr(fn, "__code__", None)
  if type(code) is types.CodeType and not isinstance(fn, functools.partial) and code.co_varnames[:code.co_argcount] == params: call = fn
  else: call = lambda *a: fn(**dict(zip(params, a)))   # noqa: E731
  if params == ("ctx", pat.name): return (lambda u, ctx: call(ctx, u)) if test is None else (lambda u, ctx: call(ctx, u) if test(u) else None)
  if params == (pat.name,): return (lambda u, ctx: call(u)) if test is None else (lambda u, ctx: call(u) if test(u) else None)
  if params == ("ctx",): return (lambda u, ctx: call(ctx)) if test is None else (lambda u, ctx: call(ctx) if test(u) else None)
  return (lambda u, ctx: call()) if test is None else (lambda u, ctx: call() if test(u) else None)

def _rule_ops(pat: UPat) -> frozenset[Ops] | None:
  """The ops a pattern can match at its root; None for any op."""
  if pat._any is not None:
    subs = [_rule_ops(p) for p in pat._any]
    return None if any(s is None for s in subs) else frozenset(op for s in subs if s is not None for op in s)
  return None if pat.op is None else frozenset(pat.op)

# *** rewrite tracking (TRACK_REWRITES=1) ***

rewrite_stats: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
_tracked_matchers: dict[str, PatternMatcher] = {}

def rule_label(pm: PatternMatcher, i: int) -> str:
  """Rule `i` of `pm` for people: where its function is defined (file:line) and its pattern."""
  pat, fn = pm.rules[i]
  code = getattr(fn, "__code__", None)
  where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}" if code is not None else repr(fn)
  return f"{where:24s} {pat!r}"[:200]

def print_rewrite_stats(file: Any = None) -> None:
  """Print, per named pass, how many times each rule fired (needs TRACK_REWRITES=1)."""
  for name, counts in rewrite_stats.items():
    pm = _tracked_matchers[name]
    print(f"pass {name}: {sum(counts.values())} rewrites", file=file)
    for i, n in counts.most_common(): print(f"  {n:8d}  {rule_label(pm, i)}"[:160], file=file)

# *** graph rewrite ***

def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None,
                  memo: dict[UOp, UOp] | None = None) -> UOp:
  """Rewrite the graph under `sink` with `pm` until no rule applies anywhere. Memoized and iterative.
  bottom_up=False rewrites a node after its sources are final; bottom_up=True tries a node before its sources.
  `memo` (node -> its final rewrite) carries over between calls with the same `pm`, `ctx` and direction, so graphs that
  share subgraphs (unrolled copies of one index expression) rewrite each shared node once."""
  pass_name = name or pm.name or "unnamed"
  # which rules fired in this call, when TRACK_REWRITES or VIZ asks
  track: collections.Counter | None = collections.Counter() if TRACK_REWRITES or VIZ else None
  done: dict[UOp, UOp] = {} if memo is None else memo
  if bottom_up or memo is not None: _rewrite_from(sink, pm, ctx, bottom_up, done, track)
  else: _rewrite_in_order(sink, pm, ctx, done, track)
  if track is not None:
    if TRACK_REWRITES:
      rewrite_stats[pass_name].update(track)
      _tracked_matchers[pass_name] = pm
    if VIZ:
      from core.ir.rewrite_log import record
      record(pass_name, pm, sink, done[sink], track)
  return done[sink]

def _rewrite_in_order(sink: UOp, pm: PatternMatcher, ctx: Any, done: dict[UOp, UOp], track: collections.Counter | None) -> None:
  """A top-down rewrite of a whole graph (no memo: nothing under it is final yet) in the order of sink.toposort(): each node
  after its sources, as _rewrite_from's depth-first walk takes them, so every rule sees the same nodes in the same order (and
  `ctx` the same calls). A SINK keeps its order (UOp.toposort): a kernel's passes then walk it without a stack of their own.
  A rule's new answer is finished by _rewrite_from, which finds its final sources in `done`."""
  rewrite, fast, candidates = pm.rewrite, pm._fast, pm._candidates
  get, final = done.get, done.__getitem__
  for n in sink.toposort():
    if n in done: continue   # finished already, under an earlier node's new answer
    # n is not done: only a rebuilt node may be (the final node of another). Its final sources: one or two (most nodes) looked
    # up inline, ~3x cheaper than tuple(map(...)), whose calls of the dict's method-wrapper take the generic call path
    src = n.src
    new_src = (done[src[0]],) if (k := len(src)) == 1 else (done[src[0]], done[src[1]]) if k == 2 else tuple(map(final, src)) if k else src
    if new_src != src:
      if (fin := get(x := intern_uop(UOp, n.op, n.dtype, new_src, n.arg, n.tag))) is not None:
        done[n] = fin
        continue
    else: x = n
    if (cands := fast.get(x.op)) is None: cands = candidates(x.op)
    if not cands or (r := rewrite(x, ctx, track)) is None: done[n] = done[x] = x
    elif (fin := get(r)) is not None: done[n] = done[x] = fin
    else:
      _rewrite_from(r, pm, ctx, False, done, track)
      done[n] = done[r]

def _rewrite_from(sink: UOp, pm: PatternMatcher, ctx: Any, bottom_up: bool, done: dict[UOp, UOp], track: collections.Counter | None) -> None:
  """graph_rewrite's walk from `sink`, depth first with an explicit stack, stopping at nodes `done` has (a memo's, or final)."""
  rewrite, fast, candidates = pm.rewrite, pm._fast, pm._candidates
  # stack entries: (node, stage, work) -- stage 0: start, 1: sources done, 2: take the answer of `work`
  stack: list[tuple[UOp, int, UOp]] = [(sink, 0, sink)]
  push, pop, final = stack.append, stack.pop, done.__getitem__
  while stack:
    n, stage, w = pop()
    if stage == 0:
      if n in done: continue
      if bottom_up:
        while (r := rewrite(w, ctx, track)) is not None: w = r
        if w is not n and w in done:
          done[n] = done[w]
          continue
      pending = [s for s in w.src if s not in done]
      if pending:
        push((n, 1, w))
        for s in reversed(pending): push((s, 0, s))
        continue
      stage = 1  # a leaf, or every source already final: finish it now instead of a second trip through the stack
    if stage == 1:
      if n in done: continue
      src = w.src
      new_src = (done[src[0]],) if (k := len(src)) == 1 else (done[src[0]], done[src[1]]) if k == 2 else tuple(map(final, src)) if k else src   # (as _rewrite_in_order)
      # tuples of UOps compare by identity (UOp defines no __eq__), so this is a fast "nothing changed" test
      x = w if new_src == src else intern_uop(UOp, w.op, w.dtype, new_src, w.arg, w.tag)
      if (fin := done.get(x)) is not None:
        done[n] = fin
        continue
      # no rule for this op (most nodes, in a pass whose rules match a few ops): no call
      if (cands := fast.get(x.op)) is None: cands = candidates(x.op)
      if not cands or (bottom_up and x is w): r = None
      else: r = rewrite(x, ctx, track)
      if r is None:
        done[n] = done[x] = x
      elif (fin := done.get(r)) is not None: done[n] = done[x] = fin
      else:
        push((n, 2, r))
        push((r, 0, r))
    else:
      done[n] = done[w]

def graph_rewrite_map(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None) -> dict[UOp, UOp]:
  """Like graph_rewrite on a SINK, but returns {each source of the sink: its rewrite}."""
  out = graph_rewrite(sink, pm, ctx, bottom_up, name)
  return dict(zip(sink.src, out.src)) if out.op is Ops.SINK and len(out.src) == len(sink.src) else {sink: out}
