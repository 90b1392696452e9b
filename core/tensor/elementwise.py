"""Elementwise Tensor math: operators with broadcasting and weak scalars, transcendentals composed from EXP2/LOG2/SIN,
rounding, comparisons, bitwise ops and activations."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any
from core.ir.dtype import dtypes, least_upper_float, least_upper_dtype
from core.ir.ops import Ops, UOp
from core.tensor.validate import scalar_dtype
from core.engine import realize_module
from core.tensor.plans import PendingPlan, extended, pending, replayable, scaled

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

LN2 = math.log(2)
# erfc(z) ~= t * exp(-z^2 + sum(c_i t^i)), t = 1 / (1 + z/2): Numerical Recipes' Chebyshev fit
_ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
                -0.82215223, 0.17087277)

def _pow_float(bf: Tensor, yf: Tensor) -> Tensor:
  """bf ** yf for float tensors of one shape, IEEE's special cases included: exp2(y*log2|b|) with the sign fixed for negative
  bases with integer exponents."""
  # IEEE pow: x**0 and 1**y are 1 (even for NaN), and so is (-1)**(+-inf); the log form gives NaN there, so those places
  # compute with base 1 and take the constant
  one = (yf == 0) | (bf == 1) | ((bf == -1) & yf.isinf())
  zero = (bf == 0) & one.logical_not()
  mag = (yf * (one | zero).where(1.0, bf).abs().log2()).exp2()
  y_int = yf.trunc() == yf
  y_odd = y_int & ((yf * 0.5).trunc() != yf * 0.5)
  neg = bf < 0
  # a negative base needs an integer exponent, except -inf (IEEE: (-inf)**y is |(-inf)**y| unless y is an odd integer)
  bad = neg & (y_int | bf.isinf()).logical_not()
  ret = neg.where(y_odd.where(-mag, mag * bad.where(math.nan, 1.0)), mag)
  ret = zero.where((yf > 0).where(0.0, math.inf), ret)   # 0**y: 0 for y > 0, inf for y < 0
  return one.where(ret._const(1.0), ret)

_INT_ONLY = frozenset({int})   # a concrete shape's element types

def _scalar_op(t: Tensor, op: Ops, y: Any) -> Tensor | None:
  """t + y / t * y for a float tensor of a concrete shape and a Python int or float: the graph _operands and _alu build (the
  scalar takes t's dtype, expanded to its shape), without the scalar's Tensor and the argument checks (x + 1 in an eager loop).
  For a tensor y, _plan_op's answer. None for every other case: the general path decides."""
  if type(y) is not float and type(y) is not int: return _plan_op(t, op, y)
  if (u := t.__dict__.get("uop")) is None:   # pending (t.uop would build its node): a pending plan's is extended instead
    if type(p := t.__dict__.get("_pending")) is PendingPlan and (r := _plan_scalar(t, p, op, y)) is not None: return r
    u = t.uop
  if not dtypes.is_float(dt := u.dtype): return None
  # an op over a realized 1-d buffer whose plan the eager op cache holds: its node is left unbuilt (PendingOp), and an eager
  # realize runs the plan from the key alone. A zero is left out: the key holds the scalar itself, and 0.0 == -0.0
  if u.op is Ops.BUFFER and y and (rg := t._requires_grad) is not True and type(n := u.arg) is int and \
     (key := (op, dt, n, u.src[1], y)) in realize_module().eager_ops.scalar:
    return type(t)(PendingOp((key, u)), None, None, rg)
  if (shape := u.shape) is None or not _INT_ONLY.issuperset(map(type, shape)): return None
  # u.alu(op, c) and t._wrap(..., t) for one float parent: the dtype is u's, requires_grad is t's own. Passed by position: a
  # keyword makes the class call build a dict for __init__ on every op (0.8k of x + 1's 71k instructions)
  return type(t)(UOp(op, dt, (u, UOp.const(dt, y, u.device, shape))), None, None, t._requires_grad)

# the most inputs a plan _plan_op extends may have: a layernorm's weight and bias fit. A longer chain of ops would replay the
# whole chain for each new one, and key it ever deeper
PLAN_OP_INPUTS = 4

def _plan_op(t: Tensor, op: Ops, y: Any) -> Tensor | None:
  """t + y / t * y where t is a pending plan's output (plans.PendingPlan: a layernorm, a softmax, a sum) and y a realized tensor
  of its float dtype that broadcasts to its shape (a layernorm's weight and bias): a plan over t's inputs and y's buffer whose
  builder makes the graph _operands and _alu would, pending in turn. So `x.layernorm(-1) * w + b` realizes as one eager op cache
  hit, no node built (three tensors' graphs built and keyed, ~20 nodes made and freed, were most of its Python). None otherwise."""
  # a pending y has no uop of its own yet. y's shape is tested first: an operand wider than t (x.sum(-1, keepdim=True) + x) is
  # the usual miss, and each test before it was time the general op then paid (~0.6 us a miss)
  if (p := t.__dict__.get("_pending")) is None: return _binary_plan(t, op, y)
  if type(p) is not PendingPlan or (meta := p[5]) is None or type(y) is not type(t) or \
     (yu := y.__dict__.get("uop")) is None or len(p[3]) >= PLAN_OP_INPUTS: return None
  dt, shape = meta
  # y broadcasts to t's shape: equal to its last dims, or has 1s (only then the per-dim test; a symbolic dim equals no int)
  if (ys := yu.shape) != shape and (ys is None or (n := len(shape) - len(ys)) < 0 or (ys != shape[n:] and (
     1 not in ys or not all([a == 1 or a == b for a, b in zip(ys, shape[n:])])))): return None
  if (yu.op is not Ops.BUFFER and not (yu.op is Ops.RESHAPE and len(yu.src) == 1 and yu.src[0].op is Ops.BUFFER)) or \
     yu.dtype is not dt or not dtypes.is_float(dt) or (rt := t._requires_grad) is True or (ry := y._requires_grad) is True or \
     yu.device != p[3][0].device: return None
  def build() -> UOp:
    v = yu if len(ys) == len(shape) else yu.reshape((1,) * (len(shape) - len(ys)) + ys)   # _broadcast_to's nodes
    return p.build().alu(op, v if ys == shape else v.expand(shape))
  if (out := extended(p, ("elementwise", op, p[2], ys), yu, build)) is None: return None
  rg = None if rt is None or ry is None else False
  return type(t)(out, None, None, rg)

def _binary_plan(t: Tensor, op: Ops, y: Any) -> Tensor | None:
  """t + y / t * y for realized float tensors of one dtype and shape over distinct buffers (a * b in an eager loop): a plan over
  both, pending (plans.PendingPlan), so `a * b + 1` realizes as one eager op cache hit with no node built. None otherwise."""
  if type(y) is not type(t) or (tu := t.__dict__.get("uop")) is None or (yu := y.__dict__.get("uop")) is None or \
     (dt := tu.dtype) is not yu.dtype or not dtypes.is_float(dt) or (shape := tu.shape) != yu.shape or shape is None or \
     not _INT_ONLY.issuperset(map(type, shape)) or (rt := t._requires_grad) is True or (ry := y._requires_grad) is True or \
     tu.device != yu.device or not replayable(inputs := (tu, yu)): return None
  def build() -> UOp: return tu.alu(op, yu)   # _alu's node: the operands need no cast or broadcast
  out = pending(("binary", op, dt, shape, tu.device), inputs, build)
  return type(t)(out, None, None, None if rt is None or ry is None else False) if type(out) is PendingPlan else None

def _plan_scalar(t: Tensor, p: PendingPlan, op: Ops, y: Any) -> Tensor | None:
  """t + y / t * y for t the pending output of _binary_plan and y a Python scalar: the plan extended by the op (plans.scaled),
  pending in turn (`a * b + 1`). Only over that elementwise plan: where its node is held and computed, running it again costs
  what reading it would (a graph over a held softmax or sum reads its memo instead). Not for a zero or a NaN: the key holds y
  (0.0 == -0.0, a NaN equals nothing)."""
  if p[2][0] != "binary" or (meta := p[5]) is None or not y or y != y or (rg := t._requires_grad) is True: return None
  dt, shape = meta
  def build() -> UOp:
    n = p.build()
    return UOp(op, dt, (n, UOp.const(dt, y, n.device, shape)))   # _scalar_op's node over the plan's
  out = scaled(p, ("scalar", op, p[2], type(y), y), build)
  return type(t)(out, None, None, rg) if type(out) is PendingPlan else None

class PendingOp(tuple):
  """(key, src): a tensor's `src op y` (float src, a 1-d BUFFER; key = (op, dtype, length, DEVICE node, y), y a nonzero Python
  scalar) whose node is not built yet. An eager realize runs the eager op cache's plan for the key
  (core.engine.realize.realize_uop_of), so an eager x + 1 builds no node; anything else that asks the tensor for its uop gets
  build()'s, the node _scalar_op would have built (PendingUop). Nothing can hold the node before it is built, so no
  graph, memo or gradient can tell the difference. A tuple: made in C, without an __init__ call."""
  __slots__ = ()
  scalar = True   # its key is eager_ops.scalar's, its source one buffer (PendingPlan: an op key over a list of buffers)
  def build(self) -> UOp:
    key, u = self
    return UOp(key[0], u.dtype, (u, UOp.const(u.dtype, key[4], u.device, u.shape)))

class PendingUop:
  """Tensor.uop where __init__ kept a pending op (PendingOp, plans.PendingPlan): its node, built on first use and stored in the
  instance. A non-data descriptor, so the instance's own `uop` (every other tensor's, and this one's once built) is read
  without calling it."""
  def __get__(self, t: Any, owner: type | None = None) -> Any:
    if t is None: return self   # the class's attribute (Tensor.uop), as a property is
    if (p := t.__dict__.get("_pending")) is None: raise AttributeError(f"this {type(t).__name__} has no uop (its __init__ failed)")
    t.uop = u = p.build()
    t._pending = None
    return u

class ElementwiseMixin:
  def _float(self: Tensor) -> Tensor:  # type: ignore[misc]
    # a float tensor is its own (the usual case, without cast's wrapper): least_upper_float keeps float dtypes
    return self if dtypes.is_float(self.uop.dtype) else self.cast(least_upper_float(self.dtype))
  def _need_int(self: Tensor, op: str) -> None:  # type: ignore[misc]
    if not (dtypes.is_int(self.dtype) or self.dtype is dtypes.bool): raise TypeError(f"{op} needs an int or bool tensor, got {self.dtype}")

  # *** arithmetic ***

  def add(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
    a, b = self._operands(x, reverse)
    return a._alu(Ops.OR if a.dtype is dtypes.bool else Ops.ADD, b)
  def neg(self: Tensor) -> Tensor:  # type: ignore[misc]
    return self.logical_not() if self.dtype is dtypes.bool else self._alu(Ops.NEG)
  def sub(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
    a, b = self._operands(x, reverse)
    if a.dtype is dtypes.bool: raise TypeError("subtracting bool tensors is not supported; use logical_xor / bitwise_xor")
    return a._alu(Ops.ADD, b.neg())
  def mul(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
    a, b = self._operands(x, reverse)
    return a._alu(Ops.AND if a.dtype is dtypes.bool else Ops.MUL, b)
  def div(self: Tensor, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:  # type: ignore[misc]
    """True division (ints give default_float); rounding_mode "trunc" or "floor" like torch.div."""
    a, b = self._operands(x, reverse)
    if rounding_mode == "trunc": return a._alu(Ops.IDIV, b) if dtypes.is_int(a.dtype) else a.div(b).trunc().cast(a.dtype)
    if rounding_mode == "floor": return a.floordiv(b)
    if rounding_mode is not None: raise RuntimeError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = a._float(), b._float()
    return a._alu(Ops.MUL, b.reciprocal())
  def floordiv(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
    """Floor division like Python: ints round toward -inf (C division truncates, so fix up when signs differ)."""
    a, b = self._operands(x, reverse)
    if dtypes.is_float(a.dtype): return a.div(b).floor()
    a._need_int("//")
    if a.dtype is dtypes.bool: a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
    q, r = a._alu(Ops.IDIV, b), a._alu(Ops.MOD, b)
    if dtypes.is_unsigned(a.dtype): return q
    fix = (r != 0) & ((r < 0) != (b < 0))
    return fix.where(q - 1, q)
  def mod(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
    """Remainder with the sign of the divisor, like Python and torch.remainder."""
    a, b = self._operands(x, reverse)
    if dtypes.is_float(a.dtype): return a - b * a.div(b).floor()
    a._need_int("%")
    r = a._alu(Ops.MOD, b)
    if dtypes.is_unsigned(a.dtype): return r
    return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
  def copysign(self: Tensor, other: Any) -> Tensor:  # type: ignore[misc]
    """|self| with the sign of `other` (a -0.0 counts as negative); the dtype follows the usual promotion."""
    a, b = self._operands(other)
    neg = (b < 0) | ((b == 0) & (b.reciprocal() < 0)) if dtypes.is_float(b.dtype) else b < 0
    mag = a.abs()
    return neg.where(-mag, mag)
  def logaddexp(self: Tensor, other: Any) -> Tensor:  # type: ignore[misc]
    """log(exp(self) + exp(other)) without overflow: shifted by the larger operand (by 0 where that is infinite)."""
    a, b = self._operands(other)
    a, b = a._float(), b._float()
    m = a.maximum(b).detach()
    m = m.isinf().where(0, m)
    return ((a - m).exp() + (b - m).exp()).log() + m
  def fmod(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
    """C's fmod: the remainder with the sign of self. An infinite divisor leaves a finite self unchanged."""
    a, b = self._operands(x)
    if dtypes.is_int(a.dtype): return a._alu(Ops.MOD, b)
    return (b.isinf() & a.isfinite()).where(a, a - b * a.div(b).trunc())

  # these run on a Tensor; mypy sees the mixin: methods declaring self: Tensor give [misc], ones on Tensor give [attr-defined]
  def __add__(self, x: Any) -> Tensor: return r if (r := _scalar_op(self, Ops.ADD, x)) is not None else self.add(x)  # type: ignore[misc,arg-type]
  def __radd__(self, x: Any) -> Tensor: return self.add(x, True)  # type: ignore[misc]
  def __sub__(self, x: Any) -> Tensor: return self.sub(x)  # type: ignore[misc]
  def __rsub__(self, x: Any) -> Tensor: return self.sub(x, True)  # type: ignore[misc]
  def __mul__(self, x: Any) -> Tensor: return r if (r := _scalar_op(self, Ops.MUL, x)) is not None else self.mul(x)  # type: ignore[misc,arg-type]
  def __rmul__(self, x: Any) -> Tensor: return self.mul(x, True)  # type: ignore[misc]
  def __truediv__(self, x: Any) -> Tensor: return self.div(x)  # type: ignore[misc]
  def __rtruediv__(self, x: Any) -> Tensor: return self.div(x, True)  # type: ignore[misc]
  def __floordiv__(self, x: Any) -> Tensor: return self.floordiv(x)  # type: ignore[misc]
  def __rfloordiv__(self, x: Any) -> Tensor: return self.floordiv(x, True)  # type: ignore[misc]
  def __mod__(self, x: Any) -> Tensor: return self.mod(x)  # type: ignore[misc]
  def __rmod__(self, x: Any) -> Tensor: return self.mod(x, True)  # type: ignore[misc]
  def __pow__(self, x: Any) -> Tensor: return self.pow(x)  # type: ignore[misc]
  def __rpow__(self, x: Any) -> Tensor: return self.pow(x, True)  # type: ignore[misc]
  def __matmul__(self, x: Any) -> Tensor:
    # a tensor operand straight to dot, without matmul's argument checks and call or dot's checked wrapper (validate.install):
    # each a Python call run on caches a previous big kernel flushed
    return self._dot(x) if type(x) is type(self) else self.matmul(x)  # type: ignore[attr-defined]
  def __rmatmul__(self, x: Any) -> Tensor: return self.matmul(x, True)  # type: ignore[attr-defined]
  def __neg__(self) -> Tensor: return self.neg()  # type: ignore[misc]
  def __abs__(self) -> Tensor: return self.abs()  # type: ignore[misc]
  def __invert__(self) -> Tensor: return self.bitwise_not()  # type: ignore[misc]
  def __and__(self, x: Any) -> Tensor: return self.bitwise_and(x)  # type: ignore[misc]
  def __rand__(self, x: Any) -> Tensor: return self.bitwise_and(x, True)  # type: ignore[misc]
  def __or__(self, x: Any) -> Tensor: return self.bitwise_or(x)  # type: ignore[misc]
  def __ror__(self, x: Any) -> Tensor: return self.bitwise_or(x, True)  # type: ignore[misc]
  def __xor__(self, x: Any) -> Tensor: return self.bitwise_xor(x)  # type: ignore[misc]
  def __rxor__(self, x: Any) -> Tensor: return self.bitwise_xor(x, True)  # type: ignore[misc]
  def __lshift__(self, x: Any) -> Tensor: return self.lshift(x)  # type: ignore[misc]
  def __rshift__(self, x: Any) -> Tensor: return self.rshift(x)  # type: ignore[misc]
  def __rlshift__(self, x: Any) -> Tensor: return self.lshift(x, True)  # type: ignore[misc]
  def __rrshift__(self, x: Any) -> Tensor: return self.rshift(x, True)  # type: ignore[misc]
  def __lt__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPLT, x)  # type: ignore[misc]
  def __gt__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPLT, x, True)  # type: ignore[misc]
  def __le__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPLT, x, True).logical_not()  # type: ignore[misc]
  def __ge__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPLT, x).logical_not()  # type: ignore[misc]
  def __ne__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPNE, x)  # type: ignore[misc,override]
  def __eq__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPNE, x).logical_not()  # type: ignore[misc,override]
  def __iadd__(self, x: Any) -> Tensor: return self.assign(self + x)  # type: ignore[attr-defined]
  def __isub__(self, x: Any) -> Tensor: return self.assign(self - x)  # type: ignore[attr-defined]
  def __imul__(self, x: Any) -> Tensor: return self.assign(self * x)  # type: ignore[attr-defined]
  def __itruediv__(self, x: Any) -> Tensor: return self.assign(self / x)  # type: ignore[attr-defined]

  # *** comparisons and selection ***

  def _cmp(self: Tensor, op: Ops, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
    a, b = self._operands(x, reverse)
    return a._alu(op, b)
  def eq(self, x: Any) -> Tensor: return self == x  # type: ignore[return-value]
  def ne(self, x: Any) -> Tensor: return self != x  # type: ignore[return-value]
  def lt(self, x: Any) -> Tensor: return self < x  # type: ignore[operator]
  def gt(self, x: Any) -> Tensor: return self > x  # type: ignore[operator]
  def le(self, x: Any) -> Tensor: return self <= x  # type: ignore[operator]
  def ge(self, x: Any) -> Tensor: return self >= x  # type: ignore[operator]
  def isnan(self: Tensor) -> Tensor: return self != self  # type: ignore[misc]
  def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:  # type: ignore[misc]
    if not dtypes.is_float(self.dtype): return self._const(False, dtypes.bool)
    return ((self == math.inf) & detect_positive) | ((self == -math.inf) & detect_negative)
  def isfinite(self: Tensor) -> Tensor: return (self.isinf() | self.isnan()).logical_not()  # type: ignore[misc]
  def isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:  # type: ignore[misc]
    """|self - other| <= atol + rtol * |other| like numpy/torch; equal values (infinities too) are close, NaNs only with equal_nan."""
    a, b = self._operands(other)
    close = (a == b) | (a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs()))
    return close | (a.isnan() & b.isnan()) if equal_nan else close
  def allclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:  # type: ignore[misc]
    return self.isclose(other, rtol, atol, equal_nan).all()
  def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:  # type: ignore[misc]
    """`value` where `mask` is true, else self; the result keeps self's dtype."""
    return mask.where(value, self).cast(self.dtype)

  def where(self: Tensor, x: Any, y: Any) -> Tensor:  # type: ignore[misc]
    """x where self is true, else y; x and y broadcast and promote (scalars are weak)."""
    from core.tensor.tensor import Tensor
    cond = self.cast(dtypes.bool)
    if isinstance(x, Tensor): a, b = x._operands(y)
    elif isinstance(y, Tensor): b, a = y._operands(x)
    else:
      dt = least_upper_dtype(scalar_dtype(x), scalar_dtype(y))
      a, b = cond._const(x, dt), cond._const(y, dt)
    shape = Tensor._broadcast_shape(cond.shape, a.shape)
    a, b, cond = a._broadcast_to(shape), b._broadcast_to(shape), cond._broadcast_to(shape)
    return cond._alu(Ops.WHERE, a, b)
  def maximum(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
    a, b = self._operands(x)
    return (a < b).where(b, a) if a.dtype is dtypes.bool else a._alu(Ops.MAX, b)
  def minimum(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
    a, b = self._operands(x)
    # max of negations keeps MAX's NaN handling for floats; ints use a compare so INT_MIN can't overflow
    return -((-a).maximum(-b)) if dtypes.is_float(a.dtype) else (a < b).where(a, b)
  def clip(self: Tensor, min_: Any = None, max_: Any = None) -> Tensor:  # type: ignore[misc]
    if min_ is None and max_ is None: raise RuntimeError("clip needs at least one of min_ or max_")
    # where, not maximum/minimum: at a bound the gradient is 1 (torch), not split as for a tie; NaN passes through
    ret = self if min_ is None else (self < min_).where(min_, self)
    return ret if max_ is None else (ret > max_).where(max_, ret)
  clamp = clip

  # *** sign, abs, rounding ***

  def sign(self: Tensor) -> Tensor:  # type: ignore[misc]
    ret = (self < 0).where(self._const(-1), (self > 0).where(self._const(1), self._const(0))) if self.dtype is not dtypes.bool else self
    return self.isnan().where(self, ret) if dtypes.is_float(self.dtype) else ret  # NaN stays NaN
  def abs(self: Tensor) -> Tensor:  # type: ignore[misc]
    if dtypes.is_unsigned(self.dtype) or self.dtype is dtypes.bool: return self
    return self * self.sign() if dtypes.is_float(self.dtype) else (self < 0).where(-self, self)
  def trunc(self: Tensor) -> Tensor: return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self  # type: ignore[misc]
  def floor(self: Tensor) -> Tensor:  # type: ignore[misc]
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self: Tensor) -> Tensor:  # type: ignore[misc]
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self: Tensor) -> Tensor:  # type: ignore[misc]
    """Round half to even, like numpy and torch."""
    if not dtypes.is_float(self.dtype): return self
    r = (self + 0.5).floor()
    half = r * 0.5
    tie_to_odd = ((r - self) == 0.5) & (half.floor() != half)
    return tie_to_odd.where(r - 1, r)
  def frac(self: Tensor) -> Tensor: return self - self.trunc()  # type: ignore[misc]

  # *** transcendentals ***

  def reciprocal(self: Tensor) -> Tensor: return self._float()._alu(Ops.RECIPROCAL)  # type: ignore[misc]
  def sqrt(self: Tensor) -> Tensor: return self._float()._alu(Ops.SQRT)  # type: ignore[misc]
  def rsqrt(self: Tensor) -> Tensor: return self.sqrt().reciprocal()  # type: ignore[misc]
  def exp2(self: Tensor) -> Tensor: return self._float()._alu(Ops.EXP2)  # type: ignore[misc]
  def log2(self: Tensor) -> Tensor: return self._float()._alu(Ops.LOG2)  # type: ignore[misc]
  def exp(self: Tensor) -> Tensor: return (self._float() * (1 / LN2)).exp2()  # type: ignore[misc]
  def log(self: Tensor) -> Tensor: return self.log2() * LN2  # type: ignore[misc]
  def log10(self: Tensor) -> Tensor: return self.log2() * math.log10(2)  # type: ignore[misc]
  def log1p(self: Tensor) -> Tensor: return (self + 1).log()  # type: ignore[misc]
  def expm1(self: Tensor) -> Tensor: return self.exp() - 1  # type: ignore[misc]
  def sin(self: Tensor) -> Tensor: return self._float()._alu(Ops.SIN)  # type: ignore[misc]
  def cos(self: Tensor) -> Tensor: return ((math.pi / 2) - self._float()).sin()  # type: ignore[misc]
  def tan(self: Tensor) -> Tensor: return self.sin() / self.cos()  # type: ignore[misc]
  def square(self: Tensor) -> Tensor: return self * self  # type: ignore[misc]
  def atan(self: Tensor) -> Tensor:  # type: ignore[misc]
    """|x| > 1 folds to pi/2 - atan(1/x); two half-angle steps (atan(x) = 2 atan(x / (1 + sqrt(1 + x^2)))) bring the
    argument under tan(pi/16) ~ 0.2, where 7 terms of the Taylor series are exact to float32."""
    x = self._float()
    big = x.abs() > 1
    z = big.where(big.where(x, 1.0).reciprocal(), x)   # no 1/0 even in the branch where() drops
    for _ in range(2): z = z / (1 + (1 + z * z).sqrt())
    z2, term, series = z * z, z, z
    for n in range(1, 7):
      term = term * z2 * -1.0
      series = series + term * (1.0 / (2 * n + 1))
    small = series * 4
    return big.where(x.sign() * (math.pi / 2) - small, small)
  def asin(self: Tensor) -> Tensor:  # type: ignore[misc]
    x = self._float()
    return (x / (1 - x * x).sqrt()).atan()   # NaN outside [-1, 1]; +-1 gives +-inf, whose atan is +-pi/2
  def acos(self: Tensor) -> Tensor: return (math.pi / 2) - self.asin()  # type: ignore[misc]
  def erf(self: Tensor) -> Tensor:  # type: ignore[misc]
    """The error function to float32 accuracy: its Taylor series for |x| < 0.5, else 1 - erfc(|x|) with the Chebyshev
    fit of erfc (Numerical Recipes' erfcc, relative error < 1.2e-7), signed. Each branch sees a clamped input, so the
    branch that where() drops can't overflow into a NaN gradient."""
    x = self._float()
    small = x.clip(-0.5, 0.5)
    x2 = small * small
    term, series = small, small
    for n in range(1, 9):
      term = term * x2 * (-1.0 / n)
      series = series + term * (1.0 / (2 * n + 1))
    z = x.abs().maximum(0.5)
    t = (1 + 0.5 * z).reciprocal()
    poly: Any = _ERFC_COEFFS[-1]
    for c in _ERFC_COEFFS[-2::-1]: poly = t * poly + c
    big = 1 - t * (-z * z + poly).exp()
    return (x.abs() < 0.5).where(series * (2 / math.sqrt(math.pi)), x.sign() * big)

  def pow(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
    """self ** x. Small non-negative int exponents multiply (exact, keep the dtype); otherwise exp2(y*log2|b|) with the
    sign fixed for negative bases with integer exponents; int results are rounded back to the int dtype."""
    # an integral float exponent of a float tensor multiplies too: exact, and its gradient has no 0 * inf at a zero base
    if not reverse and isinstance(x, float) and x.is_integer() and abs(x) <= 64 and dtypes.is_float(self.dtype): x = int(x)
    if not reverse and isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 64:
      acc, base, e = None, self, x
      while e:
        if e & 1: acc = base if acc is None else acc * base
        e >>= 1
        if e: base = base * base
      return acc if acc is not None else self.ones_like()
    if not reverse and isinstance(x, int) and not isinstance(x, bool) and x < 0:
      if not dtypes.is_float(self.dtype): raise RuntimeError(f"integer tensors ({self.dtype}) can't be raised to a negative integer power")
      return self.pow(-x).reciprocal()
    b, y = self._operands(x, reverse)
    out_dt = b.dtype
    bf, yf = b._float(), y._float()
    bd, yd = bf.detach(), yf.detach()
    ret = _pow_float(bd, yd)
    if not dtypes.is_float(out_dt): return ret.round().cast(out_dt)
    # the gradient is torch's, given directly: the composition's own has 0 * inf at a zero or infinite base.
    # d/db = y * b**(y-1), 0 where y is 0; d/dy = ret * ln(b), 0 where b is 0 and y >= 0 (NaN for a negative base)
    db = (yd == 0).where(0.0, yd * _pow_float(bd, yd - 1))
    dy = ((bd == 0) & (yd >= 0)).where(0.0, ret * bd.log())
    return ret._with_gradient((bf, db), (yf, dy))

  # *** logical and bitwise ***

  def logical_not(self: Tensor) -> Tensor: return self.cast(dtypes.bool)._alu(Ops.CMPNE, self._const(True, dtypes.bool))  # type: ignore[misc]
  def logical_and(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
    return self.cast(dtypes.bool).bitwise_and(x.cast(dtypes.bool) if hasattr(x, "cast") else bool(x))
  def logical_or(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
    return self.cast(dtypes.bool).bitwise_or(x.cast(dtypes.bool) if hasattr(x, "cast") else bool(x))
  def logical_xor(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
    return self.cast(dtypes.bool).bitwise_xor(x.cast(dtypes.bool) if hasattr(x, "cast") else bool(x))
  def _bitop(self: Tensor, op: Ops, x: Any, reverse: bool) -> Tensor:  # type: ignore[misc]
    a, b = self._operands(x, reverse)
    a._need_int(op.name.lower())
    return a._alu(op, b)
  def bitwise_and(self: Tensor, x: Any, reverse: bool = False) -> Tensor: return self._bitop(Ops.AND, x, reverse)  # type: ignore[misc]
  def bitwise_or(self: Tensor, x: Any, reverse: bool = False) -> Tensor: return self._bitop(Ops.OR, x, reverse)  # type: ignore[misc]
  def bitwise_xor(self: Tensor, x: Any, reverse: bool = False) -> Tensor: return self._bitop(Ops.XOR, x, reverse)  # type: ignore[misc]
  def bitwise_not(self: Tensor) -> Tensor:  # type: ignore[misc]
    if self.dtype is dtypes.bool: return self.logical_not()
    self._need_int("bitwise_not")
    return self._alu(Ops.XOR, self._const(-1 if not dtypes.is_unsigned(self.dtype) else self.dtype.max))
  def _shift(self: Tensor, op: Ops, x: Any, reverse: bool) -> Tensor:  # type: ignore[misc]
    a, b = self._operands(x, reverse)
    if not (dtypes.is_int(a.dtype) or a.dtype is dtypes.bool): raise RuntimeError(f"shifts need int tensors, got {a.dtype}")
    return a._alu(op, b)
  def lshift(self: Tensor, x: Any, reverse: bool = False) -> Tensor: return self._shift(Ops.SHL, x, reverse)  # type: ignore[misc]
  def rshift(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
    """Arithmetic shift: signed values keep their sign."""
    return self._shift(Ops.SHR, x, reverse)

  # *** activations ***

  def relu(self: Tensor) -> Tensor:  # type: ignore[misc]
    keep = self > 0
    return (keep | self.isnan() if dtypes.is_float(self.dtype) else keep).where(self, 0)   # relu(NaN) is NaN
  def relu6(self: Tensor) -> Tensor: return self.relu() - (self - 6).relu()  # type: ignore[misc]
  def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor: return (self < 0).where(self * neg_slope, self)  # type: ignore[misc]
  def elu(self: Tensor, alpha: float = 1.0) -> Tensor: return (self > 0).where(self, (self.exp() - 1) * alpha)  # type: ignore[misc]
  def celu(self: Tensor, alpha: float = 1.0) -> Tensor: return self.maximum(0) + ((self / alpha).exp() - 1).minimum(0) * alpha  # type: ignore[misc]
  def selu(self: Tensor, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor: return self.elu(alpha) * gamma  # type: ignore[misc]
  def sigmoid(self: Tensor) -> Tensor:  # type: ignore[misc]
    """1 / (1 + e^-x), as e^-|x| / (1 + e^-|x|) for x < 0: exp never overflows, so neither value nor gradient is NaN at
    large |x|."""
    x = self._float()
    e = (-x.abs()).exp()
    return (x >= 0).where((1 + e).reciprocal(), e / (1 + e))
  def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:  # type: ignore[misc]
    return (self * alpha + beta).relu() - (self * alpha + beta - 1).relu()
  def tanh(self: Tensor) -> Tensor: return (self * 2).sigmoid() * 2 - 1  # type: ignore[misc]
  def sinh(self: Tensor) -> Tensor: return (self.exp() - (-self).exp()) / 2  # type: ignore[misc]
  def cosh(self: Tensor) -> Tensor: return (self.exp() + (-self).exp()) / 2  # type: ignore[misc]
  def atanh(self: Tensor) -> Tensor: return ((1 + self) / (1 - self)).log() / 2  # type: ignore[misc]
  def asinh(self: Tensor) -> Tensor: return (self + (self.square() + 1).sqrt()).log()  # type: ignore[misc]
  def acosh(self: Tensor) -> Tensor: return (self + (self.square() - 1).sqrt()).log()  # type: ignore[misc]
  def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:  # type: ignore[misc]
    """GELU: x * Phi(x). approximate="tanh" (the default, as in tinygrad) uses the tanh formula, "none" the exact erf form."""
    if approximate == "tanh": ret = 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
    elif approximate == "none": ret = 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
    else: raise ValueError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
    return (self == -math.inf).where(0.0, ret)   # -inf * 0 would be NaN; the limit is 0
  def quick_gelu(self: Tensor) -> Tensor: return self * (self * 1.702).sigmoid()  # type: ignore[misc]
  def silu(self: Tensor) -> Tensor: return self * self.sigmoid()  # type: ignore[misc]
  swish = silu
  def softplus(self: Tensor, beta: float = 1.0) -> Tensor:  # type: ignore[misc]
    """log(1 + exp(beta*x)) / beta, written as max(bx, 0) + log(1 + exp(-|bx|)) so it can't overflow."""
    if beta == 0: raise ValueError("Tensor.softplus: argument 'beta' must be nonzero")
    bx = self._float() * beta
    return (bx.relu() + (1 + (-bx.abs()).exp()).log()) * (1 / beta)
  def mish(self: Tensor) -> Tensor: return self * self.softplus().tanh()  # type: ignore[misc]
  def hardswish(self: Tensor) -> Tensor: return self * (self + 3).relu6() * (1 / 6)  # type: ignore[misc]
  def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor: return self.clip(min_val, max_val)  # type: ignore[misc]
  def softsign(self: Tensor) -> Tensor: return self / (1 + self.abs())  # type: ignore[misc]
  def logsigmoid(self: Tensor) -> Tensor: return -(-self).softplus()  # type: ignore[misc]

  def lerp(self: Tensor, end: Any, weight: Any) -> Tensor: return self + (end - self) * weight  # type: ignore[misc]

