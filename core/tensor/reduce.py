"""Reductions (sum/prod/max/min/mean/var/std/any/all/arg*), running sums and products, matmul/einsum and softmax."""
from __future__ import annotations
import functools, math, struct
from typing import TYPE_CHECKING, Any, Callable, Sequence
from core.ir.dtype import DType, DTypeLike, dtypes, sum_acc_dtype, to_dtype, least_upper_dtype, least_upper_float
from core.ir.ops import Ops, UOp
from core.tensor.validate import check_tensor
from core.tensor.movement import _axis
from core.tensor.elementwise import LN2
from core.tensor.plans import PendingPlan, again, keep, pending, replayed

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

def _axes(axis: int | Sequence[int] | None, ndim: int, op: str) -> tuple[int, ...]:
  if axis is None: return tuple(range(ndim))
  if type(axis) is int: axes: tuple[int, ...] = (_axis(axis, ndim, op),)   # the usual one axis, without the set and sort
  else: axes = tuple(sorted({_axis(a, ndim, op) for a in ((axis,) if isinstance(axis, int) else axis)}))
  return axes if ndim else ()   # a 0-d tensor takes axis 0 or -1, and there is nothing to reduce

SPLIT_REDUCE = 1 << 14  # longer float sums are split in two stages

def _identity(op: Ops, dt: DType) -> Any:
  if op is Ops.ADD: return 0
  if op is Ops.MUL: return 1
  return dt.min

def _dropped(shape: tuple, axes: tuple[int, ...]) -> tuple:
  return tuple(s for i, s in enumerate(shape) if i not in axes)

def _split_sum(u: UOp, shape: tuple, axes: tuple[int, ...], n: int) -> UOp:
  """A long float sum as a sum of ~sqrt(n) partial sums: a sequential float32 accumulator stops growing at 2^24
  (adding 1.0 to 16777216.0 does nothing), two levels keep every partial sum small. The result keeps its reduced dims
  (size 1) at the end."""
  rest = [i for i in range(len(shape)) if i not in axes]
  lead = tuple(shape[i] for i in rest)
  b = 1 << ((n - 1).bit_length() + 1) // 2
  m = -(-n // b)
  x = u.permute(tuple(rest) + axes).reshape(lead + (n,)).pad(((0, 0),) * len(lead) + ((0, m * b - n),))
  return x.reshape(lead + (m, b)).r(Ops.ADD, (len(lead) + 1,)).r(Ops.ADD, (len(lead),))

def _nan_of(t: Tensor) -> Tensor:
  """NaN in t's shape and dtype, still in t's graph (a gradient reaches t as zeros). Not `t * nan`: a device may assume no
  NaN in arithmetic (WGSL does) and fold 0 * nan to 0; the constant itself is made from its bits."""
  return t * 0 + t._const(math.nan)

_INT_ONLY = frozenset({int})   # a concrete shape's element types

@functools.cache   # one C call where the dot's fast path asked dtypes.is_float and sum_acc_dtype (two Python calls)
def _float_acc(dt: DType, default_float: DType) -> DType | None:
  """sum_acc_dtype(dt) of a float dtype while default_float is the default (bf16 and half sum in it); None for other dtypes."""
  return least_upper_dtype(dt, default_float) if dtypes.is_float(dt) else None

def _row_axis(t: Tensor, axis: Any) -> tuple[UOp, tuple[int, ...], tuple[int, ...]] | None:
  """(node, shape, (axis,)) when the row ops below may build t's graph on UOps: a float32 tensor of a concrete shape and one
  valid int axis of 2 to SPLIT_REDUCE elements (what the Tensor ops do then is a fixed graph); None: the Tensor ops build it."""
  u = t.uop
  if u.dtype is not dtypes.float32 or type(axis) is not int or not (shape := u.shape) or not _INT_ONLY.issuperset(map(type, shape)):
    return None
  if not -len(shape) <= axis < len(shape) or not 1 < shape[axis] <= SPLIT_REDUCE: return None
  return u, shape, (axis % len(shape),)   # type: ignore[return-value]   # ints only, as tested

def _exp_below_max(d: Tensor) -> Tensor:
  """exp(d) for d = x - max(x) (a float tensor): d <= 0 or NaN, which its EXP2 tells the renderer (EXP2_NONPOSITIVE)."""
  y = d * (1 / LN2)
  return y._wrap(y.uop.exp2(nonpositive=True), y)

def _row_max(x: Tensor, axis: int | Sequence[int] | None) -> Tensor:
  """x.max(axis, keepdim=True).detach() for softmax, log_softmax and logsumexp of a float x, without NaN propagation (MAX_NO_NAN):
  a NaN in a row makes x - max NaN there whatever the max is, so the row's sum of exps, and each output of the row, is NaN anyway."""
  return x._reduce(Ops.MAX, axis, True, no_nan=True).detach()

def _row_mean(u: UOp, axes: tuple[int, ...], n: int) -> UOp:
  """u.mean(axes, keepdim=True) of a float32 u: the sum times 1/n, Tensor.mean's graph."""
  kept = u.r(Ops.ADD, axes)
  return kept.alu(Ops.MUL, UOp.const(dtypes.float32, 1 / n, u.device, kept.shape))

def layernorm_uops(t: Tensor, axis: Any, eps: Any) -> Tensor | None:
  """t.layernorm(axis, eps)'s graph built on UOps and wrapped once (the ~20 tensors its ops make were most of an eager
  layernorm's Python), or None (see _row_axis)."""
  if (ra := _row_axis(t, axis)) is None or type(eps) not in (int, float): return None
  u, shape, axes = ra
  def build() -> UOp:
    y = u.alu(Ops.ADD, _row_mean(u, axes, shape[axes[0]]).expand(shape).alu(Ops.NEG))
    var = _row_mean(y.alu(Ops.MUL, y), axes, shape[axes[0]])
    inv = var.alu(Ops.ADD, UOp.const(dtypes.float32, eps, u.device, var.shape)).alu(Ops.SQRT).alu(Ops.RECIPROCAL)
    return y.alu(Ops.MUL, inv.expand(shape))
  # a float eps by its bits: 0.0 and -0.0 (or NaNs) are equal keys (or none) but other constants
  key = ("layernorm", shape, axes, u.device, type(eps), eps if type(eps) is int else struct.pack("<d", eps))
  return _replayed(t, key, build)

def _reduce_uop(u: UOp, op: Ops, shape: tuple, axes: tuple[int, ...], keepdim: bool, n: Any, no_nan: bool) -> UOp:
  """Tensor._reduce's node: u reduced over `axes` (n elements each), a long float sum split in two stages."""
  r = _split_sum(u, shape, axes, n) if op is Ops.ADD and isinstance(n, int) and n > SPLIT_REDUCE and dtypes.is_float(u.dtype) \
    else u.r(op, axes, no_nan)
  return r.reshape(tuple(1 if i in axes else s for i, s in enumerate(shape)) if keepdim else _dropped(shape, axes))

def _replayed(t: Tensor, key: tuple, build: Callable[[], UOp]) -> Tensor:
  """The tensor of replayed(key, (t.uop,), build), a builder over t's node alone: pending (plans.PendingPlan) when the eager op
  cache runs its plan, a realize then builds no node (an eager sum's two to seven)."""
  inputs = (t.uop,)
  if (rg := t._requires_grad) is True: return t._mop(replayed(key, inputs, build))
  return type(t)(out, None, None, rg) if isinstance(out := pending(key, inputs, build), PendingPlan) else t._mop(out)

class ReduceMixin:
  def _reduce(self: Tensor, op: Ops, axis: int | Sequence[int] | None, keepdim: bool, no_nan: bool = False) -> Tensor:  # type: ignore[misc]
    shape = self.shape
    # the op's name only for _axis's errors: an enum member's name is a Python-level property (a frame on every sum)
    axes = tuple(range(len(shape))) if axis is None else _axes(axis, len(shape), op.name.lower())
    if not axes: return self
    n = math.prod(map(shape.__getitem__, axes))   # no generator frame
    # an empty axis reduces to the op's identity: a constant, unless the result may need a gradient (then the reduction
    # stays in the graph, so backward reaches the input; the scheduler makes the empty input a constant, no kernel reads it)
    if isinstance(n, int) and n == 0 and self.requires_grad is False:
      return self._const(_identity(op, self.dtype), shape=tuple(1 if i in axes else s for i, s in enumerate(shape)) if keepdim else
                         _dropped(shape, axes))
    # built on UOps and wrapped once: a reduction is the most common eager op after elementwise ones. The builder holds the node,
    # not the tensor: a pending result builds it later, and the tensor may hold another node by then (an assign)
    u = self.uop
    def build() -> UOp: return _reduce_uop(u, op, shape, axes, keepdim, n, no_nan)
    if not _INT_ONLY.issuperset(map(type, shape)): return self._mop(build())
    return _replayed(self, ("reduce", op, shape, axes, keepdim, u.dtype, u.device, no_nan), build)

  def sum(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,  # type: ignore[misc]
          dtype: DTypeLike | None = None) -> Tensor:
    """Sum, accumulated in sum_acc_dtype: ints and bool give at least int32 (uint32 for unsigned); half stays half."""
    # an eager repeat (x.sum() in a loop) takes its pending result from x: see plans.again
    call = ("sum", axis, keepdim, dtype) if axis is None or type(axis) is int else None
    if call is not None and (r := again(self, call)) is not None: return r
    dt = self.dtype
    acc = sum_acc_dtype(dt) if dtype is None else to_dtype(dtype)
    # no cast (its argument check and its dtype lookups) when the accumulator is the dtype: a float32 sum, the usual eager one
    ret = (self if acc is dt else self.cast(acc))._reduce(Ops.ADD, axis, keepdim)
    if dtype is None and dt in (dtypes.float16, dtypes.bfloat16): return ret.cast(dt)
    return ret if call is None else keep(self, call, ret)
  def prod(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,  # type: ignore[misc]
           dtype: DTypeLike | None = None) -> Tensor:
    acc = sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype)
    ret = self.cast(acc)._reduce(Ops.MUL, axis, keepdim)
    return ret.cast(self.dtype) if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16) else ret
  def max(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    if self.dtype is dtypes.bool: return self.cast(dtypes.uint8)._reduce(Ops.MAX, axis, keepdim).cast(dtypes.bool)
    return self._reduce(Ops.MAX, axis, keepdim)
  def min(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    # ~x reverses the order of ints without overflowing INT_MIN; floats negate
    if dtypes.is_float(self.dtype): return -((-self).max(axis, keepdim))
    return self.bitwise_not().max(axis, keepdim).bitwise_not()
  def mean(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    out = least_upper_float(self.dtype)
    axes = _axes(axis, self.ndim, "mean")
    n = math.prod((shape := self.shape)[a] for a in axes)
    if out is self.dtype and sum_acc_dtype(out) is out and axes and type(n) is int and n and _INT_ONLY.issuperset(map(type, shape)):
      # a float32/64 mean's graph below (the sum, then * (1/n) as _scalar_op makes it) as one plan: pending like a sum
      def build() -> UOp:
        s = _reduce_uop(u, Ops.ADD, shape, axes, keepdim, n, False)
        return s.alu(Ops.MUL, UOp.const(out, 1 / n, u.device, s.shape))
      u = self.uop
      return _replayed(self, ("mean", shape, axes, keepdim, out, u.device), build)
    s = self.cast(sum_acc_dtype(out))._reduce(Ops.ADD, axes, keepdim)   # self.sum(axis, keepdim, dtype=...) without its wrapper
    if not isinstance(n, int):
      # a binding of 0 is NaN chosen by a select, not 0 / 0 computed: a device may assume no NaN in arithmetic (WGSL does)
      c = self._symbolic_count(axes, s.dtype)
      return c.eq(0).where(_nan_of(s), s / c).cast(out)
    return (s * (1 / n) if n else _nan_of(s)).cast(out)  # an empty mean is NaN, like numpy
  def _symbolic_count(self: Tensor, axes: Sequence[int], dtype: DType, correction: int = 0) -> Tensor:  # type: ignore[misc]
    """The number of elements over `axes` when some of them are symbolic (bound Variables): a sum of ones, so it is a
    value the kernel reads at run time (the same kernel serves every binding)."""
    return (self._const(1, dtype, tuple(self.shape[a] for a in axes)).sum() - correction).maximum(0)
  def var(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:  # type: ignore[misc]
    axes = _axes(axis, self.ndim, "var")
    n = math.prod(self.shape[a] for a in axes)
    d = self - self.mean(axes, keepdim=True)
    if not isinstance(n, int): return (d * d).sum(axes, keepdim) / self._symbolic_count(axes, d.dtype, correction)
    ss = (d * d).sum(axes, keepdim)
    if n > correction: return ss / (n - correction)
    # no degrees of freedom left: numpy and torch divide by 0 (inf, or nan where ss is 0, also in the gradient); made as a
    # product with the constant inf, so no kernel divides by zero. No elements at all: the NaN constant (_nan_of)
    return ss * math.inf if n else _nan_of(ss)
  def std(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:  # type: ignore[misc]
    return self.var(axis, keepdim, correction).sqrt()
  def var_mean(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def any(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    return self.cast(dtypes.bool).max(axis, keepdim)
  def all(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    return self.logical_not().any(axis, keepdim).logical_not()

  def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    """Index of the first maximum (int32): mark the maxima with n-i, take the largest mark."""
    from core.tensor.tensor import Tensor
    if axis is None: return self.flatten().argmax(0, keepdim=False).reshape((1,) * self.ndim if keepdim else ())
    ax = _axes(axis, self.ndim, "argmax")[0]
    n = self.shape[ax]
    if n == 0: raise ValueError(f"argmax of an empty dim (shape {self.shape})")
    marks = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - ax - 1))
    is_max = self == self.max(ax, keepdim=True)
    if dtypes.is_float(self.dtype): is_max = is_max | (self != self)   # a NaN is the maximum, as in numpy and torch
    return (n - (is_max * marks).max(ax, keepdim)).cast(dtypes.int32)
  def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    return (-self if dtypes.is_float(self.dtype) else self.bitwise_not()).argmax(axis, keepdim)

  def logsumexp(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    x = self._float()   # in float from the start: x - max(x) must not wrap around in a small unsigned dtype
    m = _row_max(x, axis)
    m = m.isinf().where(0, m)  # all -inf (or an inf) rows: shift by 0 so inf - inf can't make NaN
    ret = (x - m).exp().sum(axis, keepdim=True).log() + m
    return ret if keepdim else ret.squeeze(_axes(axis, self.ndim, "logsumexp"))

  def _cum(self: Tensor, op: Ops, axis: int, name: str) -> Tensor:  # type: ignore[misc]
    """Running reduction along `axis`. Row i of an (n, n) window view holds p[i:i+n] of p = identity*(n-1) ++ x, so its
    reduction is x[0..i]. Long axes are cut into blocks so the work is O(n*block) instead of O(n^2)."""
    from core.tensor.movement import _axis
    ax = _axis(axis, self.ndim, name)   # the user's op (cumsum, cumprod, cummax, cummin) names a bad axis
    x = self.movedim(ax, -1)
    n = x.shape[-1]
    if n == 0: return self
    block = 64
    if n > block:
      nb = -(-n // block)
      xp = x.pad([None] * (x.ndim - 1) + [(0, nb * block - n)], value=_identity(op, x.dtype))
      xb = xp.unflatten(-1, (nb, block))
      inner = xb._cum(op, -1, name)
      # carry in what all earlier blocks contribute: an exclusive running reduction of the block totals
      totals = inner[..., -1]._cum(op, -1, name)
      carry = totals.pad([None] * (totals.ndim - 1) + [(1, -1)], value=_identity(op, x.dtype)).unsqueeze(-1)
      out = inner._alu(op, carry._broadcast_to(inner.shape))
      return out.flatten(-2)[..., :n].movedim(-1, ax)
    p = x.pad([None] * (x.ndim - 1) + [(n - 1, 0)], value=_identity(op, x.dtype))
    L = 2 * n - 1
    w = p.unsqueeze(-2).expand(x.shape[:-1] + (n + 1, L)).flatten(-2)[..., :n * (L + 1)]
    w = w.unflatten(-1, (n, L + 1))[..., :n]
    return w._reduce(op, -1, False).movedim(-1, ax)
  def cumsum(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
    if self.ndim == 0: return self._scalar_cum(axis, "cumsum")
    acc = sum_acc_dtype(self.dtype)
    ret = self.cast(acc)._cum(Ops.ADD, axis, "cumsum")
    return ret.cast(self.dtype) if self.dtype in (dtypes.float16, dtypes.bfloat16) else ret
  def cumprod(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
    if self.ndim == 0: return self._scalar_cum(axis, "cumprod")
    acc = sum_acc_dtype(self.dtype)
    ret = self.cast(acc)._cum(Ops.MUL, axis, "cumprod")
    return ret.cast(self.dtype) if self.dtype in (dtypes.float16, dtypes.bfloat16) else ret
  def _scalar_cum(self: Tensor, axis: int, name: str) -> Tensor:  # type: ignore[misc]
    from core.tensor.movement import _axis
    _axis(axis, 0, name)   # a 0-d tensor takes axis 0 or -1 only (IndexError otherwise)
    return self

  def _cum_index(self: Tensor, values: Tensor, axis: int, name: str) -> Tensor:  # type: ignore[misc]
    """For cummax/cummin: the last index j <= i where self[j] equals values[i]. A position that attains the running
    extreme marks itself; a running max of the marks carries the latest one forward (between two marks the extreme
    can't change)."""
    from core.tensor.tensor import Tensor
    from core.tensor.movement import _axis
    ax = _axis(axis, self.ndim, name)
    n = self.shape[ax]
    pos = Tensor.arange(n, device=self.device).reshape((n,) + (1,) * (self.ndim - ax - 1))
    return (self == values).where(pos, -1)._cum(Ops.MAX, ax, name).cast(dtypes.int32)
  def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """(running maximum along `axis`, index where it was attained: the latest index among equal values, as in torch)."""
    if self.ndim == 0: return self._scalar_cum(axis, "cummax"), self._const(0, dtypes.int32)
    if self.dtype is dtypes.bool:
      v, i = self.cast(dtypes.uint8).cummax(axis)
      return v.cast(dtypes.bool), i
    values = self._cum(Ops.MAX, axis, "cummax")
    return values, self.detach()._cum_index(values.detach(), axis, "cummax")
  def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """(running minimum along `axis`, index where it was attained)."""
    if self.ndim == 0: return self._scalar_cum(axis, "cummin"), self._const(0, dtypes.int32)
    if self.dtype is dtypes.bool:
      v, i = self.cast(dtypes.uint8).cummin(axis)
      return v.cast(dtypes.bool), i
    # the negation (floats) or bitwise not (ints) reverses the order, as in min()
    flip = (lambda t: -t) if dtypes.is_float(self.dtype) else (lambda t: t.bitwise_not())
    values = flip(flip(self)._cum(Ops.MAX, axis, "cummin"))
    return values, self.detach()._cum_index(values.detach(), axis, "cummin")
  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
    """log(cumsum(exp(x))) without overflow or underflow: a log-step (Hillis-Steele) scan with logaddexp, which is
    associative, so step k combines each element with the one 2^k before it."""
    from core.tensor.movement import _axis
    if self.ndim == 0: return self._scalar_cum(axis, "logcumsumexp")._float()
    ax = _axis(axis, self.ndim, "logcumsumexp")
    x = self._float().movedim(ax, -1)
    n, d = x.shape[-1], 1
    while d < n:
      shifted = x.pad([None] * (x.ndim - 1) + [(d, -d)], value=-math.inf)
      x = x.logaddexp(shifted).contiguous().contiguous_backward()   # a buffer per step (and per gradient step): no doubling
      d *= 2
    return x.movedim(-1, ax)

  # *** matmul ***

  def _dot(self: Tensor, w: Tensor, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    """Matrix product with numpy's rules for 1-D operands and batch broadcasting; sums in sum_acc_dtype."""
    # each operand's node, shape and dtype read once (the properties cost a call each: ~14 reads were a third of a@b's build)
    xu, wu = self.uop, w.uop
    xs: tuple[int, ...] = xu.shape or ()  # type: ignore[assignment]
    ws: tuple[int, ...] = wu.shape or ()  # type: ignore[assignment]
    if not xs or not ws: raise RuntimeError(f"matmul needs at least 1-D operands, got {xs} and {ws}")
    k = xs[-1]
    # ws[-min(len(ws), 2)] without min(): its keyword parsing is C code a big kernel flushed from the caches (~40 lines)
    if (kw := ws[-2] if len(ws) >= 2 else ws[0]) != k: raise RuntimeError(f"matmul: shapes {xs} and {ws} don't line up ({k} vs {kw})")
    if len(xs) >= 2 and len(ws) == len(xs) and (dt := xu.dtype) is wu.dtype and (acc := _float_acc(dt, dtypes.default_float)) \
       is not None and xu.device == wu.device and (b := xs[:-2]) == ws[:-2]:
      # the common case (one float dtype, the same batch dims: no broadcast) built on UOps and wrapped once: the same graph
      # as the general path below (products in dt, summed in acc, cast to the result's dtype), at a fraction of its cost per
      # call (an eager attention builds two of them)
      out_dt = dt if dtype is None else to_dtype(dtype)
      n, m, nb = xs[-2], ws[-1], len(b)
      full = b + (n, m, k)
      def build() -> UOp:
        u = xu.reshape(b + (n, 1, k)).expand(full) * wu.permute(tuple(range(nb)) + (nb + 1, nb)).reshape(b + (1, m, k)).expand(full)
        u = u.cast(acc)
        u = _split_sum(u, full, (nb + 2,), k) if isinstance(k, int) and k > SPLIT_REDUCE else u.r(Ops.ADD, (nb + 2,))
        return u.reshape(b + (n, m)).cast(out_dt)
      # realized operands of a concrete shape (an eager a @ b): pending (plans.PendingPlan), so a repeat is one eager op cache
      # hit that builds no node (the ~10 nodes built, walked and keyed were ~60 us of a 1024^3 realize's Python, run on caches
      # the previous kernel had flushed)
      if (rx := self._requires_grad) is True or (rw := w._requires_grad) is True or not _INT_ONLY.issuperset(map(type, full)):
        return type(self)._wrap(build(), self, w)
      if isinstance(out := pending(("dot", dt, acc, out_dt, xs, ws, xu.device), (xu, wu), build), PendingPlan):
        return type(self)(out, None, None, None if rx is None or rw is None else False)
      return type(self)._wrap(out, self, w)
    out_dt = least_upper_dtype(self.dtype, w.dtype) if dtype is None else to_dtype(dtype)
    x = self.reshape(1, k) if self.ndim == 1 else self
    y = w.reshape(k, 1) if w.ndim == 1 else w
    # (..., n, 1, k) * (..., 1, m, k) summed over k
    prodt = x.unsqueeze(-2) * y.transpose(-1, -2).unsqueeze(-3)
    ret = prodt.sum(-1, dtype=sum_acc_dtype(prodt.dtype)).cast(out_dt)
    if self.ndim == 1: ret = ret.squeeze(-2)
    if w.ndim == 1: ret = ret.squeeze(-1)
    return ret
  # public (checked by validate.install); Tensor.__matmul__ of two tensors calls _dot, whose arguments it knows are fine
  dot = _dot
  def matmul(self: Tensor, x: Any, reverse: bool = False, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    check_tensor("matmul", "x", x)
    return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)
  def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # type: ignore[misc]
    """x @ weight (+ bias); a 1-D weight scales elementwise."""
    x = self * weight if weight.ndim == 1 else self.dot(weight)
    return x + bias if bias is not None else x

  @staticmethod
  def einsum(formula: str, *operands: Any) -> Tensor:
    """Sums of products over labelled axes, e.g. "ij,jk->ik"; "..." stands for leading broadcast dims."""
    ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    for i, t in enumerate(ops): check_tensor("einsum", f"operands[{i}]", t)
    formula = formula.replace(" ", "")
    lhs, arrow, rhs = formula.partition("->")
    ins = lhs.split(",")
    if any(s.count("...") > 1 for s in ins): raise RuntimeError(f"einsum {formula!r}: an operand can have only one ellipsis")
    if len(ins) != len(ops): raise ValueError(f"einsum {formula!r}: {len(ins)} inputs in the formula but {len(ops)} tensors")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in formula]
    ell = max((t.ndim - len(s.replace("...", "")) for s, t in zip(ins, ops) if "..." in s), default=0)
    ins = [s.replace("...", "".join(free[:ell][ell - (t.ndim - len(s.replace("...", ""))):])) for s, t in zip(ins, ops)]
    if not arrow: rhs = "".join(free[:ell]) + "".join(sorted(c for c in set("".join(ins)) if "".join(ins).count(c) == 1 and c not in free))
    else: rhs = rhs.replace("...", "".join(free[:ell]))
    letters = sorted(set("".join(ins)))
    sizes: dict[str, int] = {}
    xs = []
    for s, t in zip(ins, ops):
      if len(s) != t.ndim: raise RuntimeError(f"einsum {formula!r}: {s!r} has {len(s)} labels for a tensor of shape {t.shape}")
      if len(set(s)) != len(s):  # repeated label: take the diagonal
        for c in set(s):
          while s.count(c) > 1:
            i, j = s.index(c), s.index(c, s.index(c) + 1)
            n = t.shape[i]
            t = t.movedim(j, -1).movedim(i if i < j else i - 1, -1)
            t = t.flatten(-2)[..., ::n + 1] if n else t.flatten(-2)
            t = t.movedim(-1, i)
            s = s[:i] + s[i + 1:j] + s[j + 1:]
            s = s[:i] + c + s[i:]
      for c, d in zip(s, t.shape):
        if c in sizes and 1 not in (sizes[c], d) and sizes[c] != d: raise RuntimeError(f"einsum {formula!r}: label {c} has sizes {sizes[c]} and {d}")
        sizes[c] = max(sizes.get(c, 1), d) if d != 0 else 0
      order = sorted(range(len(s)), key=lambda i: letters.index(s[i]))
      t = t.permute(order).reshape([t.shape[s.index(c)] if c in s else 1 for c in letters])
      xs.append(t)
    full = tuple(sizes[c] for c in letters)
    out = xs[0]._broadcast_to(full)
    for t in xs[1:]: out = out * t._broadcast_to(full)
    red = tuple(i for i, c in enumerate(letters) if c not in rhs)
    if red: out = out.sum(red, dtype=sum_acc_dtype(out.dtype)).cast(out.dtype)
    kept = [c for c in letters if c in rhs]
    return out.permute([kept.index(c) for c in rhs]) if kept else out

  # *** softmax ***

  def softmax(self: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    if dtype is None and type(axis) is int and (r := again(self, ("softmax", axis))) is not None: return r   # an eager repeat (plans.again)
    if dtype is None and (ra := _row_axis(self, axis)) is not None:
      # the graph of the general form below, built on UOps and wrapped once (its ~10 tensors were most of its Python)
      u, shape, axes = ra
      def build() -> UOp:
        d = u.alu(Ops.ADD, UOp(Ops.DETACH, u.dtype, (u.r(Ops.MAX, axes, no_nan=True),)).expand(shape).alu(Ops.NEG))
        ex = d.alu(Ops.MUL, UOp.const(u.dtype, 1 / LN2, u.device, shape)).exp2(nonpositive=True)
        return ex.alu(Ops.MUL, ex.r(Ops.ADD, axes).expand(shape).alu(Ops.RECIPROCAL))
      return keep(self, ("softmax", axis), _replayed(self, ("softmax", shape, axes, u.device), build))
    x = self.cast(dtype) if dtype is not None else self._float()
    e = _exp_below_max(x - _row_max(x, axis))
    return e / e.sum(axis, keepdim=True)
  def softmin(self: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    return (-self).softmax(axis, dtype)
  def log_softmax(self: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    x = self.cast(dtype) if dtype is not None else self._float()
    m = x - _row_max(x, axis)
    return m - _exp_below_max(m).sum(axis, keepdim=True).log()
