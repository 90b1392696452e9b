"""ONNX operators as compositions of core Tensor methods: one small function per op (or family), registered by op_type.
Inputs come positionally (None for an omitted optional one), attributes as keyword-only parameters with ONNX's defaults;
parameters starting with an underscore are context the runner fills in (_opset, _nout), never attributes."""
from __future__ import annotations
import itertools, math
from typing import Any, Sequence
import numpy as np
from core.helpers import prod
from core.ir.dtype import DType, dtypes, to_np
from core.tensor.tensor import Tensor
from core.onnx.dtypes import onnx_dtype
from core.onnx.narrow import NARROW, Narrow, to_narrow
from core.onnx.registry import EMPTY, Graph, OnnxError, Seq, op

def _ints(v: Any) -> list[int]: return [int(i) for i in np.asarray(v).reshape(-1).tolist()]
def _ax(a: int, nd: int) -> int: return a + nd if a < 0 else a
def _const_like(x: Tensor, v: Any) -> Tensor: return Tensor(v, device=x.device, dtype=x.dtype)
def _i64(x: Tensor) -> Tensor: return x.cast(dtypes.int64)

# *** elementwise ***

_UNARY = {"Abs": Tensor.abs, "Neg": Tensor.neg, "Exp": Tensor.exp, "Log": Tensor.log, "Sqrt": Tensor.sqrt, "Reciprocal": Tensor.reciprocal,
          "Floor": Tensor.floor, "Ceil": Tensor.ceil, "Round": Tensor.round, "Sign": Tensor.sign, "Sin": Tensor.sin, "Cos": Tensor.cos,
          "Tan": Tensor.tan, "Sinh": Tensor.sinh, "Cosh": Tensor.cosh, "Tanh": Tensor.tanh, "Asinh": Tensor.asinh, "Acosh": Tensor.acosh,
          "Atanh": Tensor.atanh, "Relu": Tensor.relu, "Sigmoid": Tensor.sigmoid, "Softsign": Tensor.softsign, "Erf": Tensor.erf,
          "IsNaN": Tensor.isnan, "Not": Tensor.logical_not, "BitwiseNot": Tensor.bitwise_not, "Mish": Tensor.mish}
for _name, _fn in _UNARY.items():
  op(_name)(lambda x, _f=_fn: _f(x))

@op("Identity")
def identity(x: Tensor) -> Tensor: return x
@op("Softplus")
def softplus(x: Tensor) -> Tensor: return x.softplus()
@op("HardSigmoid")
def hard_sigmoid(x: Tensor, *, alpha: float = 0.2, beta: float = 0.5) -> Tensor: return (x * alpha + beta).clip(0, 1)
@op("HardSwish")
def hard_swish(x: Tensor) -> Tensor: return x * (x * (1 / 6) + 0.5).clip(0, 1)
@op("Elu")
def elu(x: Tensor, *, alpha: float = 1.0) -> Tensor: return (x > 0).where(x, (x.exp() - 1) * alpha)
@op("Celu")
def celu(x: Tensor, *, alpha: float = 1.0) -> Tensor: return x.maximum(0) + ((x / alpha).exp() - 1).minimum(0) * alpha
@op("Selu")
def selu(x: Tensor, *, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> Tensor:
  return (x > 0).where(x, (x.exp() - 1) * alpha) * gamma
@op("LeakyRelu")
def leaky_relu(x: Tensor, *, alpha: float = 0.01) -> Tensor: return (x >= 0).where(x, x * alpha)
@op("ThresholdedRelu")
def thresholded_relu(x: Tensor, *, alpha: float = 1.0) -> Tensor: return (x > alpha).where(x, 0)
@op("PRelu")
def prelu(x: Tensor, slope: Tensor) -> Tensor: return (x >= 0).where(x, x * slope)
@op("Gelu")
def gelu(x: Tensor, *, approximate: str = "none") -> Tensor:
  if approximate == "tanh": return x * 0.5 * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
  return x * 0.5 * (1 + (x * (1 / math.sqrt(2))).erf())
@op("Swish")
def swish(x: Tensor, *, alpha: float = 1.0) -> Tensor: return x * (x * alpha).sigmoid()
@op("Shrink")
def shrink(x: Tensor, *, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
  return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)
@op("IsInf")
def isinf(x: Tensor, *, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
  return ((x == math.inf) & bool(detect_positive)) | ((x == -math.inf) & bool(detect_negative))

def _atan(x: Tensor) -> Tensor:
  """atan from odd minimax-style series after reducing |x| to [0, tan(pi/12)] (Cephes-like range reduction)."""
  a = x.abs()
  big = a > 1
  t = big.where(1 / a.maximum(1e-30), a)     # atan(a) = pi/2 - atan(1/a)
  mid = t > 0.2679491924311227               # tan(pi/12): atan(t) = pi/6 + atan((t*sqrt3 - 1) / (t + sqrt3))
  u = mid.where((t * math.sqrt(3) - 1) / (t + math.sqrt(3)), t)
  u2 = u * u
  r = u * (1 + u2 * (-1 / 3 + u2 * (1 / 5 + u2 * (-1 / 7 + u2 * (1 / 9 + u2 * (-1 / 11))))))
  r = mid.where(r + math.pi / 6, r)
  r = big.where(math.pi / 2 - r, r)
  return x.sign() * r
@op("Atan")
def atan(x: Tensor) -> Tensor: return _atan(x)
@op("Asin")
def asin(x: Tensor) -> Tensor: return _atan(x / (1 - x * x).sqrt())
@op("Acos")
def acos(x: Tensor) -> Tensor: return math.pi / 2 - _atan(x / (1 - x * x).sqrt())

def _binary(fn: Any) -> Any: return lambda a, b: fn(a, b)
_BINARY: dict[str, Any] = {"Add": Tensor.add, "Sub": Tensor.sub, "Mul": Tensor.mul, "Equal": Tensor.eq, "Less": Tensor.lt, "LessOrEqual": Tensor.le,
                   "Greater": Tensor.gt, "GreaterOrEqual": Tensor.ge, "And": Tensor.logical_and, "Or": Tensor.logical_or,
                   "Xor": Tensor.logical_xor, "BitwiseAnd": Tensor.bitwise_and, "BitwiseOr": Tensor.bitwise_or,
                   "BitwiseXor": Tensor.bitwise_xor}
for _name, _fn in _BINARY.items(): op(_name)(_binary(_fn))

@op("Div")
def div(a: Tensor, b: Tensor) -> Tensor:
  return a.div(b, rounding_mode="trunc") if dtypes.is_int(a.dtype) else a / b
@op("Pow")
def pow_(a: Tensor, b: Tensor) -> Tensor:
  if dtypes.is_int(a.dtype): return a.cast(dtypes.float64).pow(b.cast(dtypes.float64)).round().cast(a.dtype)   # 9**3 is 728.99..
  return a.pow(b.cast(a.dtype)).cast(a.dtype)
@op("Mod")
def mod(a: Tensor, b: Tensor, *, fmod: int = 0) -> Tensor:
  if fmod or not dtypes.is_float(a.dtype): return a.fmod(b) if fmod else a.mod(b)
  r = a.fmod(b)   # then the sign of the divisor, as Python's % (this keeps fmod's inf/nan rules: x % inf is x)
  return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
@op("BitShift")
def bit_shift(a: Tensor, b: Tensor, *, direction: str) -> Tensor:
  bits = a.dtype.itemsize * 8
  out = (b < 0) | (b >= bits)   # out-of-range shifts give 0 (-1 for a right shift of a negative signed value)
  safe = out.where(0, b).cast(a.dtype)
  r = a.lshift(safe) if direction == "LEFT" else a.rshift(safe)
  fill = (a < 0).where(-1, 0).cast(a.dtype) if direction == "RIGHT" and not dtypes.is_unsigned(a.dtype) else a.zeros_like()
  return out.where(fill, r)
@op("Where")
def where(c: Tensor, a: Tensor, b: Tensor) -> Tensor: return c.where(a, b)

def _fold(fn: Any) -> Any:
  def variadic(*xs: Tensor) -> Tensor:
    ret = xs[0]
    for x in xs[1:]: ret = fn(ret, x)
    return ret
  return variadic
op("Max")(_fold(Tensor.maximum))
op("Min")(_fold(Tensor.minimum))
op("Sum")(_fold(Tensor.add))
@op("Mean")
def mean_(*xs: Tensor) -> Tensor: return _fold(Tensor.add)(*xs) / len(xs)

@op("Clip")
def clip(x: Tensor, lo: Tensor | None = None, hi: Tensor | None = None, *, min: float | None = None, max: float | None = None) -> Tensor:
  lo_, hi_ = lo if lo is not None else min, hi if hi is not None else max
  if lo_ is not None: x = x.maximum(lo_).cast(x.dtype)
  if hi_ is not None: x = x.minimum(hi_).cast(x.dtype)
  return x

def _double_to_half(x: Tensor) -> Tensor:
  """float64 -> float16 through float32 rounded to odd (toward zero, the last bit set when inexact), which makes the second
  rounding exact: devices without a direct conversion (the CPU's needs __truncdfhf2) get the correctly rounded half."""
  f = x.cast(dtypes.float32)
  back, bits = f.cast(dtypes.float64), f.bitcast(dtypes.uint32)
  bits = (back.abs() > x.abs()).where(bits - 1, bits)   # one step toward zero where float32 rounded away from it
  bits = (back != x).where(bits | 1, bits)
  return bits.bitcast(dtypes.float32).cast(dtypes.float16)

def _cast(x: Tensor, to: int | DType, saturate: int, round_mode: str) -> Tensor | Narrow:
  """x (a narrow value's storage is exact, so it casts as its storage dtype) cast to an ONNX type or a core dtype."""
  if isinstance(to, int) and to in NARROW: return to_narrow(x, to, bool(saturate), round_mode)
  dt = to if isinstance(to, DType) else onnx_dtype(to, "Cast: ")
  if x.dtype is dtypes.float64 and dt is dtypes.float16: return _double_to_half(x)
  if dtypes.is_float(x.dtype) and dtypes.is_int(dt) and dt is not dtypes.bool: x = x.trunc()
  return x.cast(dt)
@op("Cast")
def cast(x: Tensor, *, to: int, saturate: int = 1, round_mode: str = "up", _narrow: Sequence[int | None] = ()) -> Tensor | Narrow:
  return _cast(x, to, saturate, round_mode)
@op("CastLike")
def cast_like(x: Tensor, like: Tensor, *, saturate: int = 1, round_mode: str = "up", _narrow: Sequence[int | None] = ()) -> Tensor | Narrow:
  return _cast(x, _narrow[1] if _narrow[1] is not None else like.dtype, saturate, round_mode)

# *** reductions ***

def _reduce_axes(x: Tensor, axes: Any, attr_axes: Sequence[int] | None, noop: int) -> tuple[int, ...] | None:
  ax = _ints(axes) if axes is not None else (list(attr_axes) if attr_axes is not None else [])
  if not ax: return None if noop else tuple(range(x.ndim))
  return tuple(_ax(a, x.ndim) for a in ax)

def _reducer(body: Any, post: Any = None) -> Any:
  def reduce(x: Tensor, axes: Any = None, *, axes_attr: Any = None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> Tensor:
    ax = _reduce_axes(x, axes, axes_attr, noop_with_empty_axes)
    if ax is None: return x if post is None else post(x)
    return body(x, ax, bool(keepdims))
  return reduce

def _sum(x: Tensor, ax: tuple[int, ...], k: bool) -> Tensor: return x.sum(ax, keepdim=k).cast(x.dtype)
_REDUCERS: dict[str, tuple[Any, Any]] = {
  "ReduceSum": (_sum, None),
  "ReduceMean": (lambda x, ax, k: x.mean(ax, keepdim=k).cast(x.dtype), None),
  "ReduceMax": (lambda x, ax, k: x.max(ax, keepdim=k), None),
  "ReduceMin": (lambda x, ax, k: x.min(ax, keepdim=k), None),
  "ReduceProd": (lambda x, ax, k: x.prod(ax, keepdim=k).cast(x.dtype), None),
  "ReduceL1": (lambda x, ax, k: _sum(x.abs(), ax, k), Tensor.abs),
  "ReduceL2": (lambda x, ax, k: _sum(x * x, ax, k).cast(dtypes.float32).sqrt().cast(x.dtype), lambda x: (x * x).sqrt()),
  "ReduceSumSquare": (lambda x, ax, k: _sum(x * x, ax, k), lambda x: x * x),
  "ReduceLogSum": (lambda x, ax, k: _sum(x, ax, k).log(), Tensor.log),
  "ReduceLogSumExp": (lambda x, ax, k: x.logsumexp(ax, keepdim=k).cast(x.dtype), None),
}

# axes come as an attribute before opset 18 (13 for ReduceSum) and as an optional input after
for _name, (_body, _post) in _REDUCERS.items():
  _r = _reducer(_body, _post)
  def _reduce_op(x: Tensor, axes_in: Any = None, *, axes: Any = None, keepdims: int = 1, noop_with_empty_axes: int = 0, _r: Any = _r) -> Tensor:
    return _r(x, axes_in, axes_attr=axes, keepdims=keepdims, noop_with_empty_axes=noop_with_empty_axes)
  op(_name, static=(1,))(_reduce_op)

def _arg(best: str) -> Any:
  def arg(x: Tensor, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    ax = _ax(axis, x.ndim)
    if select_last_index:
      i = getattr(x.flip(ax), best)(ax, keepdim=bool(keepdims))
      return _i64(x.shape[ax] - 1 - i.cast(dtypes.int64))
    return _i64(getattr(x, best)(ax, keepdim=bool(keepdims)))
  return arg
op("ArgMax")(_arg("argmax"))
op("ArgMin")(_arg("argmin"))

@op("CumSum", static=(1,))
def cumsum(x: Tensor, axis: Any, *, exclusive: int = 0, reverse: int = 0) -> Tensor:
  ax = _ax(_ints(axis)[0], x.ndim)
  if reverse: x = x.flip(ax)
  r = x.cumsum(ax).cast(x.dtype)
  if exclusive: r = r - x
  return r.flip(ax) if reverse else r

@op("CumProd", static=(1,))
def cumprod(x: Tensor, axis: Any, *, exclusive: int = 0, reverse: int = 0) -> Tensor:
  ax = _ax(_ints(axis)[0], x.ndim)
  if reverse: x = x.flip(ax)
  if exclusive:   # shift by one, a 1 first
    x = x.pad([(1, 0) if i == ax else None for i in range(x.ndim)], value=1).shrink([(0, x.shape[ax]) if i == ax else None for i in range(x.ndim)])
  r = x.cumprod(ax).cast(x.dtype)
  return r.flip(ax) if reverse else r

# *** softmax family ***

def _softmax_like(fn: Any) -> Any:
  def softmax(x: Tensor, *, axis: int = -1, _opset: int = 13) -> Tensor:
    if _opset >= 13: return fn(x, axis)
    # before opset 13 the input was coerced to 2-d at axis (default 1) and normalized over the flattened tail
    ax = _ax(axis if axis != -1 or _opset >= 13 else 1, x.ndim)
    return fn(x.reshape(prod(x.shape[:ax]), -1), -1).reshape(x.shape)
  return softmax
op("Softmax")(_softmax_like(lambda x, a: x.softmax(a)))
op("LogSoftmax")(_softmax_like(lambda x, a: x.log_softmax(a)))
def _hardmax(x: Tensor, a: int) -> Tensor:
  a = _ax(a, x.ndim)
  pos = Tensor.arange(x.shape[a], device=x.device).reshape([-1 if i == a else 1 for i in range(x.ndim)])
  return (pos == x.argmax(a, keepdim=True)).cast(x.dtype)
op("Hardmax")(_softmax_like(_hardmax))

# *** linear algebra ***

@op("MatMul")
def matmul(a: Tensor, b: Tensor) -> Tensor: return a @ b
@op("Gemm")
def gemm(a: Tensor, b: Tensor, c: Tensor | None = None, *, alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0) -> Tensor:
  y = (a.T if transA else a) @ (b.T if transB else b)
  if alpha != 1.0: y = y * alpha
  if c is not None: y = y + (c * beta if beta != 1.0 else c)
  return y.cast(a.dtype)
@op("Einsum")
def einsum(*xs: Tensor, equation: str) -> Tensor: return Tensor.einsum(equation.replace(" ", ""), *xs).cast(xs[0].dtype)

# *** shape and movement ***

@op("Shape")
def shape(x: Tensor, *, start: int = 0, end: int | None = None) -> np.ndarray:
  return np.array(x.shape[slice(start, end)], dtype=np.int64)
@op("Size")
def size(x: Tensor) -> np.ndarray: return np.array(prod(x.shape), dtype=np.int64)
@op("Reshape", static=(1,))
def reshape(x: Tensor, shape: Any, *, allowzero: int = 0) -> Tensor:
  s = _ints(shape)
  if not allowzero: s = [x.shape[i] if v == 0 else v for i, v in enumerate(s)]
  return x.reshape(s)
@op("Flatten")
def flatten(x: Tensor, *, axis: int = 1) -> Tensor:
  ax = _ax(axis, x.ndim)
  return x.reshape(prod(x.shape[:ax]), prod(x.shape[ax:]))
@op("Transpose")
def transpose(x: Tensor, *, perm: Sequence[int] | None = None) -> Tensor:
  return x.permute(list(perm) if perm is not None else list(range(x.ndim))[::-1])
@op("Squeeze", static=(1,))
def squeeze(x: Tensor, axes_in: Any = None, *, axes: Sequence[int] | None = None) -> Tensor:
  ax = _ints(axes_in) if axes_in is not None else axes
  if ax is None: return x.reshape([d for d in x.shape if d != 1])
  axs = {_ax(a, x.ndim) for a in ax}
  return x.reshape([d for i, d in enumerate(x.shape) if i not in axs])
@op("Unsqueeze", static=(1,))
def unsqueeze(x: Tensor, axes_in: Any = None, *, axes: Sequence[int] | None = None) -> Tensor:
  ax = _ints(axes_in) if axes_in is not None else list(axes or [])
  nd = x.ndim + len(ax)
  new, it = sorted(_ax(a, nd) for a in ax), iter(x.shape)
  return x.reshape([1 if i in new else next(it) for i in range(nd)])
@op("Concat")
def concat(*xs: Tensor, axis: int) -> Tensor:
  xs = tuple(x for x in xs if prod(x.shape) > 0) or xs[:1]
  return xs[0].cat(*xs[1:], dim=axis) if len(xs) > 1 else xs[0]
@op("Split", static=(1,))
def split(x: Tensor, sizes: Any = None, *, axis: int = 0, num_outputs: int | None = None, split: Sequence[int] | None = None,
          _nout: int = 1) -> list[Tensor]:
  ax = _ax(axis, x.ndim)
  n = x.shape[ax]
  if sizes is not None or split is not None: parts = _ints(sizes) if sizes is not None else list(split or [])
  else:
    k = num_outputs or _nout
    c = -(-n // k)
    parts = [c] * (n // c) + ([n % c] if n % c else [])
  out, start = [], 0
  for p in parts:
    out.append(x.shrink([(start, start + p) if i == ax else None for i in range(x.ndim)]))
    start += p
  return out
@op("Slice", static=(1, 2, 3, 4))
def slice_(x: Tensor, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Tensor:
  st, en = _ints(starts), _ints(ends)
  ax = [_ax(a, x.ndim) for a in _ints(axes)] if axes is not None else list(range(len(st)))
  sp = _ints(steps) if steps is not None else [1] * len(st)
  idx: list[Any] = [slice(None)] * x.ndim
  for a, s, e, k in zip(ax, st, en, sp): idx[a] = slice(s, e, k)
  return x[tuple(idx)]
@op("Expand", static=(1,))
def expand(x: Tensor, shape: Any) -> Tensor:
  s = _ints(shape)
  nd = max(len(s), x.ndim)
  xs, ss = [1] * (nd - x.ndim) + list(x.shape), [1] * (nd - len(s)) + s
  return x.reshape(xs).expand([max(a, b) if a == 1 or b == 1 else a for a, b in zip(xs, ss)])
@op("Tile", static=(1,))
def tile(x: Tensor, repeats: Any) -> Tensor: return x.repeat(_ints(repeats))
@op("Pad", static=(1, 2, 3))
def pad(x: Tensor, pads: Any, value: Any = None, axes: Any = None, *, mode: str = "constant") -> Tensor:
  p = _ints(pads)
  ax = [_ax(a, x.ndim) for a in _ints(axes)] if axes is not None else list(range(x.ndim))
  per: list[Any] = [None] * x.ndim
  for i, a in enumerate(ax): per[a] = (p[i], p[i + len(ax)])
  modes = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}
  if mode not in modes: raise OnnxError(f"Pad: mode {mode!r}")
  v = np.asarray(value).reshape(-1)[0].item() if value is not None and np.asarray(value).size else 0
  return x.pad(per, mode=modes[mode], value=v)
@op("Trilu", static=(1,))
def trilu(x: Tensor, k: Any = None, *, upper: int = 1) -> Tensor:
  d = _ints(k)[0] if k is not None else 0
  return x.triu(d) if upper else x.tril(d)
@op("DepthToSpace")
def depth_to_space(x: Tensor, *, blocksize: int, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  if mode == "DCR": y = x.reshape(b, blocksize, blocksize, c // blocksize ** 2, h, w).permute(0, 3, 4, 1, 5, 2)
  else: y = x.reshape(b, c // blocksize ** 2, blocksize, blocksize, h, w).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(b, c // blocksize ** 2, h * blocksize, w * blocksize)
@op("SpaceToDepth")
def space_to_depth(x: Tensor, *, blocksize: int, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  y = x.reshape(b, c, h // blocksize, blocksize, w // blocksize, blocksize)
  y = y.permute(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
  return y.reshape(b, c * blocksize ** 2, h // blocksize, w // blocksize)

# *** constants and creation ***

@op("Constant")
def constant(*, value: Any = None, value_float: float | None = None, value_floats: Sequence[float] | None = None, value_int: int | None = None,
             value_ints: Sequence[int] | None = None) -> np.ndarray:
  if value is not None: return np.asarray(value)
  if value_float is not None: return np.array(value_float, dtype=np.float32)
  if value_floats is not None: return np.array(value_floats, dtype=np.float32)
  if value_int is not None: return np.array(value_int, dtype=np.int64)
  if value_ints is not None: return np.array(value_ints, dtype=np.int64)
  raise OnnxError("Constant: no value attribute")
@op("ConstantOfShape", static=(0,))
def constant_of_shape(shape: Any, *, value: Any = None, _device: str | None = None) -> Tensor:
  v = np.asarray(value if value is not None else np.zeros(1, np.float32)).reshape(-1)
  from core.ir.dtype import from_np
  return Tensor.full(tuple(_ints(shape)), v[0].item(), device=_device, dtype=from_np(v.dtype))
@op("Range", static=(0, 1, 2))
def range_(start: Any, limit: Any, delta: Any) -> np.ndarray:
  s, lim, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
  n = max(int(math.ceil((lim - s) / d)), 0)
  return (s + np.arange(n, dtype=np.asarray(start).dtype) * d).astype(np.asarray(start).dtype)
@op("EyeLike")
def eye_like(x: Tensor, *, dtype: int | None = None, k: int = 0) -> Tensor:
  dt = onnx_dtype(dtype) if dtype is not None else x.dtype
  n, m = x.shape
  i = Tensor.arange(n, device=x.device).reshape(n, 1)
  j = Tensor.arange(m, device=x.device).reshape(1, m)
  return (j - i == k).cast(dt)
@op("OneHot", static=(1,))
def one_hot(idx: Tensor, depth: Any, values: Tensor, *, axis: int = -1) -> Tensor:
  d = int(np.asarray(depth).reshape(-1)[0])
  i = idx.cast(dtypes.int64)
  i = (i < 0).where(i + d, i)
  hot = i.unsqueeze(-1) == Tensor.arange(d, device=idx.device, dtype=dtypes.int64)
  out = hot.where(values[1], values[0])
  return out.movedim(-1, _ax(axis, idx.ndim + 1))
@op("Dropout", static=(1, 2))
def dropout(x: Tensor, ratio_in: Any = None, training_mode: Any = None, *, ratio: float = 0.5, seed: int | None = None, _nout: int = 1) -> Any:
  r = float(np.asarray(ratio_in).reshape(-1)[0]) if ratio_in is not None else ratio
  if training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0]) and r > 0:
    raise OnnxError(f"Dropout: training_mode=True with ratio {r} (random dropping is not supported)")
  return (x, Tensor.full(x.shape, True, device=x.device, dtype=dtypes.bool)) if _nout > 1 else x

# *** gather / scatter / selection ***

def _norm_idx(idx: Tensor, n: int) -> Tensor:
  i = idx.cast(dtypes.int64) if idx.dtype is not dtypes.int32 else idx
  return (i < 0).where(i + n, i)
@op("Gather")
def gather(x: Tensor, idx: Tensor, *, axis: int = 0) -> Tensor:
  ax = _ax(axis, x.ndim)
  i = _norm_idx(idx, x.shape[ax])
  if i.ndim == 0:   # a 0-d index drops the axis (core's tensor indexing keeps it as size 1)
    return x[(slice(None),) * ax + (i.reshape(1),)].reshape(x.shape[:ax] + x.shape[ax + 1:])
  return x[(slice(None),) * ax + (i,)]
@op("GatherElements")
def gather_elements(x: Tensor, idx: Tensor, *, axis: int = 0) -> Tensor:
  ax = _ax(axis, x.ndim)
  return x.gather(ax, _norm_idx(idx, x.shape[ax]))
@op("GatherND")
def gather_nd(x: Tensor, idx: Tensor, *, batch_dims: int = 0) -> Tensor:
  k = idx.shape[-1]
  b = batch_dims
  # flatten the batch dims and the k indexed dims into one linear index per gathered slice
  bshape, ishape, rest = x.shape[:b], x.shape[b:b + k], x.shape[b + k:]
  nb = prod(bshape)
  xf = x.reshape(nb * prod(ishape), *rest) if rest else x.reshape(nb * prod(ishape))
  i = _norm_idx(idx, 1).cast(dtypes.int64)
  strides = [prod(ishape[j + 1:]) for j in range(k)]
  lin = (i * Tensor(np.array(strides, dtype=np.int64), device=x.device)).sum(-1)
  mid = idx.shape[b:-1]
  lin = lin.reshape(nb, prod(mid)) + Tensor.arange(nb, device=x.device, dtype=dtypes.int64).reshape(nb, 1) * prod(ishape)
  return xf[lin.reshape(-1)].reshape(*bshape, *mid, *rest)
_SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}
@op("ScatterElements", "Scatter")
def scatter_elements(x: Tensor, idx: Tensor, upd: Tensor, *, axis: int = 0, reduction: str = "none") -> Tensor:
  ax = _ax(axis, x.ndim)
  i = _norm_idx(idx, x.shape[ax])
  if reduction == "none": return x.scatter(ax, i, upd)
  return x.scatter_reduce(ax, i, upd, _SCATTER_REDUCE[reduction])
@op("ScatterND")
def scatter_nd(x: Tensor, idx: Tensor, upd: Tensor, *, reduction: str = "none") -> Tensor:
  k = idx.shape[-1]
  lead, rest = x.shape[:k], x.shape[k:]
  strides = [prod(lead[j + 1:]) for j in range(k)]
  lin = (idx.cast(dtypes.int64) * Tensor(np.array(strides, dtype=np.int64), device=x.device)).sum(-1).reshape(-1)
  n, m = prod(lead), prod(rest)
  xf, uf = x.reshape(n, m), upd.reshape(-1, m)
  full = lin.reshape(-1, 1).expand(lin.shape[0], m)
  if reduction == "none": out = xf.scatter(0, full, uf)
  else: out = xf.scatter_reduce(0, full, uf, _SCATTER_REDUCE[reduction])
  return out.reshape(x.shape)
@op("TopK", static=(1,))
def topk(x: Tensor, k: Any, *, axis: int = -1, largest: int = 1, sorted: int = 1) -> tuple[Tensor, Tensor]:
  v, i = x.topk(_ints(k)[0], dim=_ax(axis, x.ndim), largest=bool(largest))
  return v, _i64(i)
@op("NonZero", static=(0,))
def nonzero(x: Any) -> np.ndarray: return np.array(np.nonzero(np.asarray(x)), dtype=np.int64)
@op("Compress", static=(1,))
def compress(x: Tensor, cond: Any, *, axis: int | None = None) -> Tensor:
  keep = [i for i, c in enumerate(np.asarray(cond).reshape(-1).tolist()) if c]
  if axis is None: x, ax = x.reshape(-1), 0
  else: ax = _ax(axis, x.ndim)
  return x[(slice(None),) * ax + (Tensor(np.array(keep, dtype=np.int64), device=x.device),)]

# *** convolution and pooling ***

def _conv_pads(spatial: Sequence[int], ks: Sequence[int], strides: Sequence[int], dil: Sequence[int], pads: Sequence[int] | None,
               auto_pad: str) -> list[tuple[int, int]]:
  nd = len(ks)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = []
    for n, k, s, d in zip(spatial, ks, strides, dil):
      total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
      lo = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
      out.append((lo, total - lo))
    return out
  if auto_pad == "VALID" or pads is None: return [(0, 0)] * nd
  return [(pads[i], pads[i + nd]) for i in range(nd)]

def _flat(p: list[tuple[int, int]]) -> list[int]: return [v for pair in p[::-1] for v in pair]   # torch's last-dim-first order

@op("Conv")
def conv(x: Tensor, w: Tensor, b: Tensor | None = None, *, auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None, group: int = 1,
         kernel_shape: Sequence[int] | None = None, pads: Sequence[int] | None = None, strides: Sequence[int] | None = None) -> Tensor:
  ks = w.shape[2:]
  nd = len(ks)
  s, d = list(strides or [1] * nd), list(dilations or [1] * nd)
  p = _conv_pads(x.shape[2:], ks, s, d, pads, auto_pad)
  return x.conv2d(w, b, groups=group, stride=s, dilation=d, padding=_flat(p) if any(a or c for a, c in p) else 0)

@op("ConvTranspose")
def conv_transpose(x: Tensor, w: Tensor, b: Tensor | None = None, *, auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None,
                   group: int = 1, kernel_shape: Sequence[int] | None = None, output_padding: Sequence[int] | None = None,
                   output_shape: Sequence[int] | None = None, pads: Sequence[int] | None = None, strides: Sequence[int] | None = None) -> Tensor:
  ks = w.shape[2:]
  nd = len(ks)
  s, d = list(strides or [1] * nd), list(dilations or [1] * nd)
  op_ = list(output_padding or [0] * nd)
  if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    target = list(output_shape)[-nd:] if output_shape is not None else [n * si for n, si in zip(x.shape[2:], s)]
    pp = []
    for i in range(nd):
      total = s[i] * (x.shape[2 + i] - 1) + op_[i] + (ks[i] - 1) * d[i] + 1 - target[i]
      lo = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
      pp.append((lo, total - lo))
    if any(a < 0 or c < 0 for a, c in pp):  # a larger output than the conv gives: extra output_padding at the end
      op_ = [o - min(0, c) for o, (a, c) in zip(op_, pp)]
      pp = [(max(0, a), max(0, c)) for a, c in pp]
  else: pp = _conv_pads(x.shape[2:], ks, s, d, pads, "NOTSET" if auto_pad == "VALID" else auto_pad)
  return x.conv_transpose2d(w, b, groups=group, stride=s, dilation=d, padding=_flat(pp), output_padding=op_)

def _pool_args(x: Tensor, kernel_shape: Sequence[int], strides: Sequence[int] | None, dilations: Sequence[int] | None, pads: Sequence[int] | None,
               auto_pad: str) -> tuple[list[int], list[int], list[int], list[tuple[int, int]]]:
  nd = len(kernel_shape)
  s, d = list(strides or [1] * nd), list(dilations or [1] * nd)
  return list(kernel_shape), s, d, _conv_pads(x.shape[2:], kernel_shape, s, d, pads, auto_pad)

@op("MaxPool")
def max_pool(x: Tensor, *, kernel_shape: Sequence[int], auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Sequence[int] | None = None,
             pads: Sequence[int] | None = None, storage_order: int = 0, strides: Sequence[int] | None = None, _nout: int = 1) -> Any:
  k, s, d, p = _pool_args(x, kernel_shape, strides, dilations, pads, auto_pad)
  if _nout == 1: return x.max_pool2d(k, s, d, _flat(p), ceil_mode=bool(ceil_mode))
  y, i = x.max_pool2d(k, s, d, _flat(p), ceil_mode=bool(ceil_mode), return_indices=True)  # type: ignore[misc]
  sp, dims = prod(x.shape[2:]), x.shape[2:]
  if storage_order:   # column-major: the spatial coordinates of the row-major index, recombined with reversed strides
    i, rest, col = i.cast(dtypes.int64), i.cast(dtypes.int64), None
    for a in reversed(range(len(dims))):
      coord, rest = rest.mod(dims[a]), rest.div(dims[a], rounding_mode="trunc")
      term = coord * prod(dims[:a])
      col = term if col is None else col + term
    i = col
  base = Tensor.arange(prod(x.shape[:2]), device=x.device, dtype=dtypes.int64).reshape(*x.shape[:2], *([1] * len(k))) * sp
  return y, i.cast(dtypes.int64) + base
@op("AveragePool")
def avg_pool(x: Tensor, *, kernel_shape: Sequence[int], auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0,
             dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None, strides: Sequence[int] | None = None) -> Tensor:
  k, s, d, p = _pool_args(x, kernel_shape, strides, dilations, pads, auto_pad)
  return x.avg_pool2d(k, s, d, _flat(p), ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad)).cast(x.dtype)
@op("LpPool")
def lp_pool(x: Tensor, *, kernel_shape: Sequence[int], auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Sequence[int] | None = None,
            p: int = 2, pads: Sequence[int] | None = None, strides: Sequence[int] | None = None) -> Tensor:
  k, s, d, pp = _pool_args(x, kernel_shape, strides, dilations, pads, auto_pad)
  win = x.abs().pow(p).avg_pool2d(k, s, d, _flat(pp), ceil_mode=bool(ceil_mode), count_include_pad=True) * prod(k)
  return win.pow(1 / p)
# the input is realized first: fused, the producing conv ran inside the mean's loop with only (N, C) left to parallelize (the ResNet
# test model's last conv + pool: ~170 us as one kernel, ~35 us as two)
@op("GlobalAveragePool")
def global_avg_pool(x: Tensor) -> Tensor: return x.contiguous().mean(tuple(range(2, x.ndim)), keepdim=True)
@op("GlobalMaxPool")
def global_max_pool(x: Tensor) -> Tensor: return x.max(tuple(range(2, x.ndim)), keepdim=True)
@op("GlobalLpPool")
def global_lp_pool(x: Tensor, *, p: int = 2) -> Tensor: return x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1 / p)

# *** normalization ***

def _chan(t: Tensor, nd: int) -> Tensor: return t.reshape(1, -1, *([1] * (nd - 2)))
@op("BatchNormalization")
def batch_norm(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, *, epsilon: float = 1e-5, momentum: float = 0.9,
               training_mode: int = 0, spatial: int = 1, _nout: int = 1) -> Any:
  if training_mode:
    axes = tuple(i for i in range(x.ndim) if i != 1)
    bm, bv = x.mean(axes), x.var(axes, correction=0)
    y = (x - _chan(bm, x.ndim)) * (_chan(bv, x.ndim) + epsilon).rsqrt() * _chan(scale, x.ndim) + _chan(bias, x.ndim)
    return y, mean * momentum + bm * (1 - momentum), var * momentum + bv * (1 - momentum)
  return (x - _chan(mean, x.ndim)) * (_chan(var, x.ndim) + epsilon).rsqrt() * _chan(scale, x.ndim) + _chan(bias, x.ndim)
@op("InstanceNormalization")
def instance_norm(x: Tensor, scale: Tensor, bias: Tensor, *, epsilon: float = 1e-5) -> Tensor:
  axes = tuple(range(2, x.ndim))
  return x.layernorm(axes, eps=epsilon) * _chan(scale, x.ndim) + _chan(bias, x.ndim)
@op("LayerNormalization")
def layer_norm(x: Tensor, scale: Tensor, bias: Tensor | None = None, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1,
               _nout: int = 1) -> Any:
  axes = tuple(range(_ax(axis, x.ndim), x.ndim))
  xf = x.cast(dtypes.float32) if stash_type == 1 else x
  m = xf.mean(axes, keepdim=True)
  inv = ((xf - m).square().mean(axes, keepdim=True) + epsilon).rsqrt()
  y = ((xf - m) * inv).cast(x.dtype) * scale
  if bias is not None: y = y + bias
  return (y, m, inv) if _nout > 1 else y
@op("GroupNormalization")
def group_norm(x: Tensor, scale: Tensor, bias: Tensor, *, num_groups: int, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
  n, c = x.shape[:2]
  g = x.reshape(n, num_groups, -1).layernorm(-1, eps=epsilon).reshape(x.shape)
  if scale.shape[0] != c: scale, bias = scale.repeat_interleave(c // num_groups), bias.repeat_interleave(c // num_groups)   # opset 18 form
  return g * _chan(scale, x.ndim) + _chan(bias, x.ndim)
@op("RMSNormalization")
def rms_norm(x: Tensor, scale: Tensor, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
  axes = tuple(range(_ax(axis, x.ndim), x.ndim))
  xf = x.cast(dtypes.float32)
  return (xf * (xf.square().mean(axes, keepdim=True) + epsilon).rsqrt()).cast(x.dtype) * scale
@op("LpNormalization")
def lp_norm(x: Tensor, *, axis: int = -1, p: int = 2) -> Tensor:
  n = x.abs().sum(axis, keepdim=True) if p == 1 else x.square().sum(axis, keepdim=True).sqrt()
  return (n == 0).where(0, x / n)
@op("MeanVarianceNormalization")
def mvn(x: Tensor, *, axes: Sequence[int] = (0, 2, 3)) -> Tensor:
  ax = tuple(axes)
  m = x.mean(ax, keepdim=True)
  return (x - m) / ((x - m).square().mean(ax, keepdim=True).sqrt() + 1e-9)
@op("LRN")
def lrn(x: Tensor, *, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Tensor:
  sq = x.square()
  c = x.shape[1]
  lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
  padded = sq.pad([None, (lo, hi)] + [None] * (x.ndim - 2))
  win = padded.shrink([None, (0, c)] + [None] * (x.ndim - 2))
  for i in range(1, size): win = win + padded.shrink([None, (i, i + c)] + [None] * (x.ndim - 2))
  return x / (bias + alpha / size * win).pow(beta)

# *** resize: per axis, nearest picks a source index; linear and cubic apply an (out, in) interpolation matrix ***

def _src_coords(n: int, o: int, scale: float, mode: str, roi: tuple[float, float] | None) -> np.ndarray:
  i = np.arange(o, dtype=np.float64)
  if mode == "asymmetric": return i / scale
  if mode == "half_pixel": return (i + 0.5) / scale - 0.5
  if mode == "pytorch_half_pixel": return (i + 0.5) / scale - 0.5 if o > 1 else np.zeros(o)
  if mode == "align_corners": return i * (n - 1) / (n * scale - 1) if n * scale > 1 else np.zeros(o)
  if mode == "half_pixel_symmetric":
    adj = o / (scale * n)
    return n / 2 * (1 - adj) + (i + 0.5) / scale - 0.5
  if mode == "tf_crop_and_resize" and roi is not None:
    a, b = roi
    return a * (n - 1) + i * (b - a) * (n - 1) / (o - 1) if o > 1 else np.full(o, 0.5 * (a + b) * (n - 1))
  raise OnnxError(f"Resize: attribute coordinate_transformation_mode={mode!r}")

def _cubic(d: np.ndarray, a: float) -> np.ndarray:
  d = np.abs(d)
  near = ((a + 2) * d - (a + 3)) * d * d + 1
  far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
  return np.where(d <= 1, near, np.where(d < 2, far, 0.0))

def _interp_matrix(n: int, src: np.ndarray, mode: str, scale: float, a: float, exclude_outside: bool, antialias: bool) -> np.ndarray:
  kern = (lambda d: np.maximum(0.0, 1 - np.abs(d))) if mode == "linear" else (lambda d: _cubic(d, a))
  support = 1.0 if mode == "linear" else 2.0
  s = scale if antialias and scale < 1 else 1.0   # antialiasing stretches the kernel by 1/scale when shrinking
  m = np.zeros((len(src), n))
  for r, x in enumerate(src):
    lo, hi = int(np.floor(x - support / s)), int(np.ceil(x + support / s))
    js = np.arange(lo, hi + 1)
    w = kern((js - x) * s)
    if exclude_outside:
      keep = (js >= 0) & (js < n)
      js, w = js[keep], w[keep]
    if exclude_outside or antialias: w = w / w.sum() if w.sum() else w
    np.add.at(m[r], np.clip(js, 0, n - 1), w)
  return m

@op("Resize", static=(1, 2, 3))
def resize(x: Tensor, roi: Any = None, scales: Any = None, sizes: Any = None, *, mode: str = "nearest",
           coordinate_transformation_mode: str = "half_pixel", nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75,
           exclude_outside: int = 0, extrapolation_value: float = 0.0, antialias: int = 0, axes: Sequence[int] | None = None,
           keep_aspect_ratio_policy: str = "stretch") -> Tensor:
  ax = [_ax(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
  ins = [x.shape[a] for a in ax]
  if sizes is not None and np.asarray(sizes).size:
    want = _ints(sizes)
    if keep_aspect_ratio_policy == "stretch": outs, scs = want, [o / n for o, n in zip(want, ins)]
    else:
      pick = min if keep_aspect_ratio_policy == "not_larger" else max
      sc = pick(o / n for o, n in zip(want, ins))
      outs, scs = [int(math.floor(sc * n + 0.5)) for n in ins], [sc] * len(ins)
  else:
    scs = [float(v) for v in np.asarray(scales, dtype=np.float64).reshape(-1)]
    outs = [int(math.floor(n * s)) for n, s in zip(ins, scs)]
  roi_v = np.asarray(roi, dtype=np.float64).reshape(-1) if roi is not None and np.asarray(roi).size else None
  for k, (a, n, o, sc) in enumerate(zip(ax, ins, outs, scs)):
    r = (float(roi_v[k]), float(roi_v[k + len(ax)])) if roi_v is not None else None
    src = _src_coords(n, o, sc, coordinate_transformation_mode, r)
    outside = (src < 0) | (src > n - 1) if coordinate_transformation_mode == "tf_crop_and_resize" else np.zeros(o, bool)
    if mode == "nearest":
      j = {"floor": np.floor(src), "ceil": np.ceil(src), "round_prefer_ceil": np.floor(src + 0.5)}.get(nearest_mode, np.ceil(src - 0.5))
      x = x[(slice(None),) * a + (Tensor(np.clip(j, 0, n - 1).astype(np.int64), device=x.device),)]
    elif mode in ("linear", "cubic"):
      m = _interp_matrix(n, src, mode, sc, cubic_coeff_a, bool(exclude_outside), bool(antialias))
      y = x.cast(dtypes.float32) if not dtypes.is_float(x.dtype) else x
      y = (y.movedim(a, -1) @ Tensor(m.T.astype(np.float32), device=x.device).cast(y.dtype)).movedim(-1, a)
      x = y.round().clip(x.dtype.min, x.dtype.max).cast(x.dtype) if not dtypes.is_float(x.dtype) else y
    else: raise OnnxError(f"Resize: attribute mode={mode!r}")
    if outside.any():
      sel = Tensor(outside.reshape([-1 if i == a else 1 for i in range(x.ndim)]), device=x.device)
      x = sel.where(_const_like(x, extrapolation_value), x)
  return x

@op("Upsample", static=(1,))
def upsample(x: Tensor, scales: Any, *, mode: str = "nearest") -> Tensor:
  return resize(x, None, scales, None, mode=mode, coordinate_transformation_mode="asymmetric", nearest_mode="floor")

# *** attention ***

@op("Attention")
def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, past_k: Tensor | None = None, past_v: Tensor | None = None,
              nonpad_kv_seqlen: Tensor | None = None, *, is_causal: int = 0, kv_num_heads: int | None = None, q_num_heads: int | None = None,
              qk_matmul_output_mode: int = 0, scale: float | None = None, softcap: float = 0.0, softmax_precision: int | None = None,
              left_window_size: int = -1, right_window_size: int = -1, _nout: int = 1) -> Any:
  three_d = q.ndim == 3
  if three_d:
    if q_num_heads is None or kv_num_heads is None: raise OnnxError("Attention: 3-d inputs need q_num_heads and kv_num_heads")
    def heads(t: Tensor, h: int) -> Tensor: return t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2)
    q, k, v = heads(q, q_num_heads), heads(k, kv_num_heads), heads(v, kv_num_heads)
  if past_k is not None: k = past_k.cat(k, dim=2)
  if past_v is not None: v = past_v.cat(v, dim=2)
  present_k, present_v = k, v
  odt = q.dtype
  if odt in (dtypes.float16, dtypes.bfloat16): q, k, v = q.float(), k.float(), v.float()   # half inputs: compute in float32
  sq, skv = q.shape[2], k.shape[2]
  if q.shape[1] != k.shape[1]:   # grouped-query attention: each kv head serves consecutive q heads
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
  sc = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[3]))
  qk = (q * sc) @ (k.transpose(-1, -2) * sc)
  if softcap > 0: qk = (qk / softcap).tanh() * softcap
  neg = -math.inf
  bias: Tensor | None = None
  if mask is not None:
    if mask.shape[-1] < skv: mask = mask.pad([None] * (mask.ndim - 1) + [(0, skv - mask.shape[-1])], value=False if mask.dtype is dtypes.bool else neg)
    bias = mask.where(0.0, neg).cast(q.dtype) if mask.dtype is dtypes.bool else mask.cast(q.dtype)
  # where query row i sits among the keys: after the past cache, or (an external cache) after nonpad_kv_seqlen - sq per batch
  off: Any = past_k.shape[2] if past_k is not None else 0
  if past_k is None and nonpad_kv_seqlen is not None: off = (nonpad_kv_seqlen.cast(dtypes.int64) - sq).reshape(-1, 1, 1, 1)
  diff = Tensor.arange(sq, device=q.device).reshape(sq, 1) + off - Tensor.arange(skv, device=q.device).reshape(1, skv)
  if is_causal:
    causal = (diff >= 0).where(0.0, neg).cast(q.dtype)
    bias = causal if bias is None else bias + causal
  if left_window_size >= 0 or right_window_size >= 0:
    ok = diff == diff
    if left_window_size >= 0: ok = ok & (diff <= left_window_size)
    if right_window_size >= 0: ok = ok & (-diff <= right_window_size)
    win = ok.where(0.0, neg).cast(q.dtype)
    bias = win if bias is None else bias + win
  if nonpad_kv_seqlen is not None:
    keep = Tensor.arange(skv, device=q.device).reshape(1, skv) < nonpad_kv_seqlen.reshape(-1, 1)
    pm = keep.where(0.0, neg).cast(q.dtype).reshape(-1, 1, 1, skv)
    bias = pm if bias is None else bias + pm
  scores = qk if bias is None else qk + bias
  mx = scores.max(-1, keepdim=True)
  dead = mx == neg   # a row with every key masked gives zeros, not NaN
  e = (scores - dead.where(0.0, mx)).exp()
  probs = e / e.sum(-1, keepdim=True).maximum(1e-30)
  if bias is not None: probs = (bias.max(-1, keepdim=True) == neg).where(0.0, probs)
  out = (probs @ v).cast(odt)
  if three_d: out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)
  extra = {0: qk, 1: qk, 2: scores, 3: probs}[qk_matmul_output_mode]
  return (out, present_k, present_v, extra.cast(odt))[:max(_nout, 1)]

# *** losses ***

def _nll(logp: Tensor, target: Tensor, weight: Tensor | None, reduction: str, ignore_index: int | None) -> Tensor:
  c = logp.shape[1]
  t = target.cast(dtypes.int64)
  cls = Tensor.arange(c, device=logp.device, dtype=dtypes.int64).reshape(1, c, *([1] * (logp.ndim - 2)))
  hot = t.unsqueeze(1) == cls
  picked = hot.where(logp, 0).sum(1)
  w = hot.where(weight.reshape(1, c, *([1] * (logp.ndim - 2))), 0).sum(1) if weight is not None else picked.ones_like()
  if ignore_index is not None: w = (t == ignore_index).where(0, w)
  loss = -picked * w
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  return loss.sum() / w.sum()

@op("NegativeLogLikelihoodLoss")
def nll_loss(x: Tensor, target: Tensor, weight: Tensor | None = None, *, ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
  return _nll(x, target, weight, reduction, ignore_index).cast(x.dtype)

@op("SoftmaxCrossEntropyLoss")
def softmax_ce_loss(x: Tensor, target: Tensor, weight: Tensor | None = None, *, ignore_index: int | None = None, reduction: str = "mean",
                    _nout: int = 1) -> Any:
  logp = x.log_softmax(1)
  loss = _nll(logp, target, weight, reduction, ignore_index).cast(x.dtype)
  return (loss, logp) if _nout > 1 else loss

# *** more sequence-model and signal ops ***

@op("RotaryEmbedding")
def rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor, pos: Tensor | None = None, *, interleaved: int = 0, num_heads: int = 0,
                     rotary_embedding_dim: int = 0) -> Tensor:
  shape4 = x.ndim == 4
  y = x.transpose(1, 2) if shape4 else x.reshape(x.shape[0], x.shape[1], num_heads, -1)   # (b, s, h, d)
  d = rotary_embedding_dim or y.shape[3]
  rot, keep = y[..., :d], y[..., d:]
  if pos is not None: cos, sin = cos[pos.cast(dtypes.int64)], sin[pos.cast(dtypes.int64)]
  cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
  x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., :d // 2], rot[..., d // 2:])
  re, im = cos * x1 - sin * x2, sin * x1 + cos * x2
  rot = re.unsqueeze(-1).cat(im.unsqueeze(-1), dim=-1).reshape(rot.shape) if interleaved else re.cat(im, dim=-1)
  out = rot.cat(keep, dim=-1) if keep.shape[-1] else rot
  return out.transpose(1, 2) if shape4 else out.reshape(x.shape)

@op("SwiGLU")
def swiglu(a: Tensor, b: Tensor, *, alpha: float = 1.0) -> Tensor: return a * (a * alpha).sigmoid() * b

def _window(fn: Any) -> Any:
  def window(size: Any, *, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    n = int(np.asarray(size).reshape(-1)[0])
    return fn(Tensor.arange(n, dtype=dtypes.float64), n if periodic else n - 1).cast(onnx_dtype(output_datatype))
  return window
op("HannWindow", static=(0,))(_window(lambda i, n: (i * (math.pi / n)).sin().square()))
op("HammingWindow", static=(0,))(_window(lambda i, n: 25 / 46 - (i * (2 * math.pi / n)).cos() * (21 / 46)))
op("BlackmanWindow", static=(0,))(_window(lambda i, n: 0.42 - (i * (2 * math.pi / n)).cos() * 0.5 + (i * (4 * math.pi / n)).cos() * 0.08))

@op("ReverseSequence", static=(1,))
def reverse_sequence(x: Tensor, lens: Any, *, batch_axis: int = 1, time_axis: int = 0) -> Tensor:
  t = x.shape[time_axis]
  idx = np.tile(np.arange(t).reshape(-1, 1), (1, x.shape[batch_axis]))   # (time, batch): the source time step
  for b, n in enumerate(_ints(lens)): idx[:n, b] = np.arange(n)[::-1]
  if time_axis != 0: idx = idx.T
  full = Tensor(idx.reshape(idx.shape + (1,) * (x.ndim - 2)), device=x.device).expand(x.shape)
  return x.gather(time_axis, full)

@op("MaxUnpool", static=(2,))
def max_unpool(x: Tensor, idx: Tensor, output_shape: Any = None, *, kernel_shape: Sequence[int], pads: Sequence[int] | None = None,
               strides: Sequence[int] | None = None) -> Tensor:
  nd = len(kernel_shape)
  s, p = list(strides or [1] * nd), list(pads or [0] * 2 * nd)
  # the indices address the default output (the pooled input's shape); an output_shape pads or crops that at the end
  outs = [(n - 1) * s[i] - p[i] - p[i + nd] + kernel_shape[i] for i, n in enumerate(x.shape[2:])]
  total = prod(x.shape[:2]) * prod(outs)
  flat = Tensor.zeros(total, device=x.device, dtype=x.dtype).scatter(0, idx.cast(dtypes.int64).reshape(-1), x.reshape(-1))
  y = flat.reshape(*x.shape[:2], *outs)
  if output_shape is not None:
    want = _ints(output_shape)[2:]
    y = y.pad([None, None] + [(0, max(t - o, 0)) for t, o in zip(want, outs)]).shrink([None, None] + [(0, t) for t in want])
  return y

@op("Unique", static=(0,))
def unique(x: Any, *, axis: int | None = None, sorted: int = 1) -> tuple[np.ndarray, ...]:
  a = np.asarray(x)
  y, first, inverse, counts = np.unique(a, return_index=True, return_inverse=True, return_counts=True, axis=axis)
  if not sorted:   # the order of first appearance
    order = np.argsort(first)
    y = np.take(y, order, axis=axis if axis is not None else 0)
    remap = np.empty_like(order)
    remap[order] = np.arange(len(order))
    first, counts, inverse = first[order], counts[order], remap[inverse.reshape(-1)]
  return y, first.astype(np.int64), inverse.reshape(-1).astype(np.int64), counts.astype(np.int64)

@op("Det")
def det(x: Tensor) -> Tensor:
  """Gaussian elimination with partial pivoting, unrolled over the (static) matrix size."""
  n = x.shape[-1]
  a, d = x, x[..., 0, 0].ones_like()
  rows = Tensor.arange(n, device=x.device)
  for k in range(n):
    piv = a[..., k:, k].abs().argmax(-1) + k   # (...,)
    pk = piv.unsqueeze(-1)
    src = (rows == pk).where(k, (rows == k).where(pk, rows))   # swap rows k and piv
    a = a.gather(-2, src.unsqueeze(-1).expand(*a.shape))
    d = d * (piv == k).where(1.0, -1.0).cast(x.dtype) * a[..., k, k]
    if k + 1 < n:
      f = a[..., k + 1:, k:k + 1] / a[..., k:k + 1, k:k + 1]
      a = a[..., :k + 1, :].cat(a[..., k + 1:, :] - f * a[..., k:k + 1, :], dim=-2)
  return d

def _q_shape(x: Tensor, scale: Tensor, axis: int) -> list[int]:
  return [-1 if i == _ax(axis, x.ndim) else 1 for i in range(x.ndim)] if scale.ndim == 1 and scale.shape[0] > 1 else list(scale.shape)
def _q_param(p: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
  """A scale or zero point as float32 that broadcasts against x: per tensor, per axis, or per block of block_size along axis."""
  if not block_size: return p.cast(dtypes.float32).reshape(_q_shape(x, p, axis))
  ax = _ax(axis, x.ndim)
  return p.cast(dtypes.float32).repeat_interleave(block_size, dim=ax).shrink([(0, x.shape[ax]) if i == ax else None for i in range(x.ndim)])
@op("DequantizeLinear")
def dequantize_linear(x: Tensor, scale: Tensor, zero: Tensor | None = None, *, axis: int = 1, block_size: int = 0,
                      output_dtype: int = 0, _narrow: Sequence[int | None] = ()) -> Tensor:
  y = x.cast(dtypes.float32)
  if zero is not None: y = y - _q_param(zero, x, axis, block_size)
  return (y * _q_param(scale, x, axis, block_size)).cast(onnx_dtype(output_dtype) if output_dtype else scale.dtype)
@op("QuantizeLinear")
def quantize_linear(x: Tensor, scale: Tensor, zero: Tensor | None = None, *, axis: int = 1, block_size: int = 0, output_dtype: int = 0,
                    saturate: int = 1, precision: int = 0, _narrow: Sequence[int | None] = ()) -> Tensor | Narrow:
  narrow = _narrow[2] if len(_narrow) > 2 and _narrow[2] is not None else (output_dtype if output_dtype in NARROW else None)
  y = x.cast(dtypes.float32) / _q_param(scale, x, axis, block_size)
  zp = _q_param(zero, x, axis, block_size) if zero is not None else None
  if narrow is not None and NARROW[narrow].storage is dtypes.float32:   # float8/float4: the cast rounds (and saturates)
    return to_narrow(y + zp if zp is not None else y, narrow, bool(saturate))
  y = y.round()
  if zp is not None: y = y + zp
  if narrow is not None: return Narrow(y.clip(NARROW[narrow].lo, NARROW[narrow].hi).cast(NARROW[narrow].storage), narrow)
  out = zero.dtype if zero is not None else (onnx_dtype(output_dtype) if output_dtype else dtypes.uint8)
  if not dtypes.is_int(out): raise OnnxError(f"QuantizeLinear: output type {out} (only integer outputs)")
  return y.clip(out.min, out.max).cast(out)
@op("DynamicQuantizeLinear")
def dynamic_quantize_linear(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
  lo, hi = x.min().minimum(0), x.max().maximum(0)
  scale = (hi - lo) / 255
  zp = (-lo / scale).round().clip(0, 255)
  y = ((x / scale).round() + zp).clip(0, 255).cast(dtypes.uint8)
  return y, scale.cast(dtypes.float32), zp.cast(dtypes.uint8)

# *** recurrent layers: the time loop is unrolled (sequence lengths are static) ***

def _activation(name: str, alpha: float | None, beta: float | None) -> Any:
  acts: dict[str, Any] = {
    "Sigmoid": Tensor.sigmoid, "Tanh": Tensor.tanh, "Relu": Tensor.relu, "Softsign": Tensor.softsign, "Softplus": Tensor.softplus,
    "Affine": lambda x: x * (alpha if alpha is not None else 1.0) + (beta or 0.0),
    "LeakyRelu": lambda x: leaky_relu(x, alpha=alpha if alpha is not None else 0.01),
    "ThresholdedRelu": lambda x: thresholded_relu(x, alpha=alpha if alpha is not None else 1.0),
    "ScaledTanh": lambda x: (x * (beta if beta is not None else 1.0)).tanh() * (alpha if alpha is not None else 1.0),
    "HardSigmoid": lambda x: hard_sigmoid(x, alpha=alpha if alpha is not None else 0.2, beta=beta if beta is not None else 0.5),
    "Elu": lambda x: elu(x, alpha=alpha if alpha is not None else 1.0)}
  if name not in acts: raise OnnxError(f"attribute activations: {name!r}")
  return acts[name]

def _recurrent(kind: str, x: Tensor, w: Tensor, r: Tensor, b: Tensor | None, seq_lens: Tensor | None, h0: Tensor | None, c0: Tensor | None,
               p: Tensor | None, hidden_size: int, direction: str, layout: int, acts: list[str], alpha: list[float], beta: list[float],
               clip: float | None, extra: int) -> tuple[Tensor, Tensor, Tensor]:
  if seq_lens is not None and len(set(_ints(seq_lens.numpy()))) > 1: raise OnnxError(f"{kind}: input sequence_lens with different lengths")
  gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
  per_dir = {"RNN": 1, "GRU": 2, "LSTM": 3}[kind]
  if layout: x = x.transpose(0, 1)   # (seq, batch, input)
  seq, batch = x.shape[0], x.shape[1]
  ndir, hs = w.shape[0], hidden_size
  defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
  names = acts or defaults * ndir
  fns = [_activation(n, alpha[i] if i < len(alpha) else None, beta[i] if i < len(beta) else None) for i, n in enumerate(names)]
  ys, hs_out, cs_out = [], [], []
  for d in range(ndir):
    f = fns[d * per_dir:(d + 1) * per_dir]
    wd, rd = w[d], r[d]   # (gates*hs, input), (gates*hs, hs)
    bd = b[d] if b is not None else Tensor.zeros(2 * gates * hs, device=x.device, dtype=x.dtype)
    wb, rb = bd[:gates * hs], bd[gates * hs:]
    h = h0[d] if h0 is not None else Tensor.zeros(batch, hs, device=x.device, dtype=x.dtype)
    c = c0[d] if c0 is not None else Tensor.zeros(batch, hs, device=x.device, dtype=x.dtype)
    pd = p[d] if p is not None else None
    xw = x @ wd.T + wb   # (seq, batch, gates*hs): the input projections of every step at once
    steps = range(seq - 1, -1, -1) if direction == "reverse" or (direction == "bidirectional" and d == 1) else range(seq)
    outs: list[Tensor] = [None] * seq   # type: ignore[list-item]
    def cl(t: Tensor) -> Tensor: return t.clip(-clip, clip) if clip is not None else t
    for t in steps:
      xt = xw[t]
      if kind == "RNN": h = f[0](cl(xt + h @ rd.T + rb))
      elif kind == "GRU":
        hr = h @ rd[:2 * hs].T + rb[:2 * hs]
        z, rr = f[0](cl(xt[:, :hs] + hr[:, :hs])), f[0](cl(xt[:, hs:2 * hs] + hr[:, hs:]))
        if extra: hh = f[1](cl(xt[:, 2 * hs:] + rr * (h @ rd[2 * hs:].T + rb[2 * hs:])))
        else: hh = f[1](cl(xt[:, 2 * hs:] + (rr * h) @ rd[2 * hs:].T + rb[2 * hs:]))
        h = (1 - z) * hh + z * h
      else:
        g = xt + h @ rd.T + rb
        gi, go, gf, gc = (g[:, k * hs:(k + 1) * hs] for k in range(4))
        if pd is not None: gi, gf = gi + pd[:hs] * c, gf + pd[2 * hs:] * c
        i_, f_ = f[0](cl(gi)), f[0](cl(gf))
        if extra: f_ = 1 - i_   # input_forget: the forget gate couples to the input gate
        c = f_ * c + i_ * f[1](cl(gc))
        if pd is not None: go = go + pd[hs:2 * hs] * c
        h = f[0](cl(go)) * f[2](c)
      outs[t] = h
    ys.append(Tensor.stack(*outs, dim=0))
    hs_out.append(h)
    cs_out.append(c)
  y = Tensor.stack(*ys, dim=1)   # (seq, dirs, batch, hs)
  yh, yc = Tensor.stack(*hs_out, dim=0), Tensor.stack(*cs_out, dim=0)
  if layout: y, yh, yc = y.permute(2, 0, 1, 3), yh.transpose(0, 1), yc.transpose(0, 1)
  return y, yh, yc

def _rnn_op(kind: str) -> Any:
  def rnn(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, seq_lens: Tensor | None = None, h0: Tensor | None = None,
          c0: Tensor | None = None, p: Tensor | None = None, *, hidden_size: int, activations: Sequence[str] = (),
          activation_alpha: Sequence[float] = (), activation_beta: Sequence[float] = (), clip: float | None = None, direction: str = "forward",
          layout: int = 0, input_forget: int = 0, linear_before_reset: int = 0, _nout: int = 1) -> tuple[Tensor, ...]:
    if kind != "LSTM": c0, p = None, None
    extra = linear_before_reset if kind == "GRU" else input_forget
    y, yh, yc = _recurrent(kind, x, w, r, b, seq_lens, h0, c0, p, hidden_size, direction, layout, list(activations), list(activation_alpha),
                           list(activation_beta), clip, extra)
    return (y, yh, yc)[:_nout]
  return rnn
op("RNN")(_rnn_op("RNN"))
op("GRU")(_rnn_op("GRU"))
op("LSTM")(_rnn_op("LSTM"))

@op("BitCast")
def bitcast(x: Tensor, *, to: int) -> Tensor:
  dt = onnx_dtype(to, "BitCast: ")
  return x.cast(dt) if x.dtype is dtypes.bool and dt in (dtypes.uint8, dtypes.int8) else x.bitcast(dt)   # core can't bitcast bool

@op("CenterCropPad", static=(1,))
def center_crop_pad(x: Tensor, shape: Any, *, axes: Sequence[int] | None = None) -> Tensor:
  ax = [_ax(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
  for a, t in zip(ax, _ints(shape)):
    n = x.shape[a]
    if t < n: x = x.shrink([((n - t) // 2, (n - t) // 2 + t) if i == a else None for i in range(x.ndim)])
    elif t > n: x = x.pad([((t - n) // 2, t - n - (t - n) // 2) if i == a else None for i in range(x.ndim)])
  return x

@op("MatMulInteger")
def matmul_integer(a: Tensor, b: Tensor, az: Tensor | None = None, bz: Tensor | None = None) -> Tensor:
  a32, b32 = a.cast(dtypes.int32), b.cast(dtypes.int32)
  if az is not None: a32 = a32 - (az.cast(dtypes.int32).reshape(-1, 1) if az.ndim == 1 and az.shape[0] > 1 else az.cast(dtypes.int32))
  if bz is not None: b32 = b32 - bz.cast(dtypes.int32)
  return a32 @ b32

@op("ConvInteger")
def conv_integer(x: Tensor, w: Tensor, xz: Tensor | None = None, wz: Tensor | None = None, *, auto_pad: str = "NOTSET",
                 dilations: Sequence[int] | None = None, group: int = 1, kernel_shape: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> Tensor:
  x32, w32 = x.cast(dtypes.int32), w.cast(dtypes.int32)
  if xz is not None: x32 = x32 - xz.cast(dtypes.int32)   # padding then reads 0 after the shift, as the spec asks
  if wz is not None: w32 = w32 - (wz.cast(dtypes.int32).reshape(-1, *([1] * (w.ndim - 1))) if wz.ndim == 1 else wz.cast(dtypes.int32))
  return conv(x32, w32, None, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides)

def _requant(y: Tensor, scale: Tensor, zero: Tensor) -> Tensor:
  q = (y / scale.float()).round() + zero.float()
  return q.clip(zero.dtype.min, zero.dtype.max).cast(zero.dtype)

@op("QLinearMatMul")
def qlinear_matmul(a: Tensor, a_s: Tensor, a_z: Tensor, b: Tensor, b_s: Tensor, b_z: Tensor, y_s: Tensor, y_z: Tensor) -> Tensor:
  # a's scale and zero point are per row (or one), b's per column (or one)
  def rows(t: Tensor) -> Tensor: return t.float().reshape(-1, 1) if t.numel() > 1 else t.float()
  fa = (a.float() - rows(a_z)) * rows(a_s)
  fb = (b.float() - b_z.float()) * b_s.float()
  return _requant(fa @ fb, y_s, y_z)

@op("QLinearConv")
def qlinear_conv(x: Tensor, x_s: Tensor, x_z: Tensor, w: Tensor, w_s: Tensor, w_z: Tensor, y_s: Tensor, y_z: Tensor, b: Tensor | None = None, *,
                 auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None, group: int = 1, kernel_shape: Sequence[int] | None = None,
                 pads: Sequence[int] | None = None, strides: Sequence[int] | None = None) -> Tensor:
  per = [-1] + [1] * (w.ndim - 1)
  fw = (w.float() - (w_z.float().reshape(per) if w_z.numel() > 1 else w_z.float())) * (w_s.float().reshape(per) if w_s.numel() > 1 else w_s.float())
  fx = (x.float() - x_z.float()) * x_s.float()
  fb = b.float() * (x_s.float() * w_s.float()).reshape(-1) if b is not None else None
  y = conv(fx, fw, fb, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides)
  return _requant(y, y_s, y_z)

@op("AffineGrid", static=(1,))
def affine_grid(theta: Tensor, size: Any, *, align_corners: int = 0) -> Tensor:
  """Sampling grids (N, *spatial, nd) in [-1, 1] coordinates: theta (N, nd, nd+1) applied to the base grid."""
  n, c, *sp = _ints(size)
  def axis(k: int) -> np.ndarray:
    if align_corners: return np.linspace(-1, 1, k) if k > 1 else np.zeros(1)
    return (np.arange(k) * 2 + 1) / k - 1
  mesh = np.meshgrid(*[axis(k) for k in sp], indexing="ij")[::-1]   # x varies along the last dim
  base = np.stack(list(mesh) + [np.ones_like(mesh[0])], axis=-1).reshape(-1, len(sp) + 1)   # (P, nd+1)
  grid = Tensor(base.astype(np.float32), device=theta.device).cast(theta.dtype) @ theta.transpose(1, 2)   # (N, P, nd)
  return grid.reshape(n, *sp, len(sp))

# *** GridSample: each output point reads its taps from the flattened input with gather ***

def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
  span = hi - lo
  if span <= 0: return x.zeros_like()
  r = (x - lo).abs().mod(2 * span)
  return span - (r - span).abs() + lo

def _cubic_w(t: Tensor, a: float = -0.75) -> list[Tensor]:
  """The four cubic-convolution weights of taps at offsets -1, 0, 1, 2 for a fraction t."""
  def near(d: Tensor) -> Tensor: return ((a + 2) * d - (a + 3)) * d * d + 1
  def far(d: Tensor) -> Tensor: return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
  return [far(t + 1), near(t), near(1 - t), far(2 - t)]

@op("GridSample")
def grid_sample(x: Tensor, grid: Tensor, *, align_corners: int = 0, mode: str = "linear", padding_mode: str = "zeros") -> Tensor:
  n, c, *sp = x.shape
  nd = len(sp)
  outs = grid.shape[1:-1]
  p_out = prod(outs)
  g = grid.float().reshape(n, p_out, nd)
  coords = []   # per spatial dim (outermost first), pixel coordinates (n, p_out)
  for d in range(nd):
    size = sp[d]
    v = g[:, :, nd - 1 - d]   # the grid's last entry is x (the innermost dim)
    v = (v + 1) / 2 * (size - 1) if align_corners else ((v + 1) * size - 1) / 2
    if padding_mode == "border": v = v.clip(0, size - 1)
    elif padding_mode == "reflection": v = _reflect(v, 0, size - 1) if align_corners else _reflect(v, -0.5, size - 0.5).clip(0, size - 1)
    coords.append(v)
  if mode in ("linear", "bilinear"): offs, tap = [0, 1], "linear"
  elif mode == "nearest": offs, tap = [0], "nearest"
  elif mode in ("cubic", "bicubic"): offs, tap = [-1, 0, 1, 2], "cubic"
  else: raise OnnxError(f"GridSample: attribute mode={mode!r}")
  bases, weights = [], []
  for v in coords:
    if tap == "nearest": bases.append(v.round()); weights.append([v.ones_like()])
    else:
      f = v.floor()
      bases.append(f)
      t = v - f
      weights.append([1 - t, t] if tap == "linear" else _cubic_w(t))
  flat = x.reshape(n, c, prod(sp))
  out: Tensor | None = None
  for combo in itertools.product(range(len(offs)), repeat=nd):
    lin, w, ok = None, None, None
    for d, k in enumerate(combo):
      i = bases[d] + offs[k]
      inside = (i >= 0) & (i <= sp[d] - 1)
      if padding_mode == "border": i = i.clip(0, sp[d] - 1)
      elif padding_mode == "reflection": i = _reflect(i, 0, sp[d] - 1).round() if tap == "cubic" else i.clip(0, sp[d] - 1)
      else: i = i.clip(0, sp[d] - 1)
      ii = i.cast(dtypes.int32)
      stride = prod(sp[d + 1:])
      lin = ii * stride if lin is None else lin + ii * stride
      w = weights[d][k] if w is None else w * weights[d][k]
      if padding_mode == "zeros": ok = inside if ok is None else ok & inside   # other modes moved every tap inside
    assert lin is not None and w is not None
    val = flat.gather(2, lin.reshape(n, 1, p_out).expand(n, c, p_out)).float()
    term = (w if ok is None else ok.where(w, 0)).reshape(n, 1, p_out) * val
    out = term if out is None else out + term
  assert out is not None
  return out.reshape(n, c, *outs).cast(x.dtype)

# *** DFT as matmuls with cosine/sine matrices (the signal's last dim holds [real] or [real, imag]) ***

@op("DFT", static=(1, 2))
def dft(x: Tensor, dft_length: Any = None, axis_in: Any = None, *, axis: int | None = None, inverse: int = 0, onesided: int = 0,
        _opset: int = 20) -> Tensor:
  ax = _ints(axis_in)[0] if axis_in is not None and np.asarray(axis_in).size else (axis if axis is not None else (1 if _opset < 20 else -2))
  ax = _ax(ax, x.ndim)
  n = x.shape[ax]
  length = _ints(dft_length)[0] if dft_length is not None and np.asarray(dft_length).size else (2 * (n - 1) if inverse and onesided else n)
  a = x[..., 0].movedim(ax, -1)
  b = x[..., 1].movedim(ax, -1) if x.shape[-1] == 2 else None
  m = min(n, length) if not (inverse and onesided) else n
  a, b = a[..., :m], (b[..., :m] if b is not None else None)
  k_out = length // 2 + 1 if onesided and not inverse else length
  j = np.arange(m).reshape(-1, 1)
  theta = 2 * np.pi * j * np.arange(k_out).reshape(1, -1) / length
  if inverse and onesided:   # a half spectrum in, a real signal out: the missing half is the conjugate mirror
    c = np.where((np.arange(m) == 0) | (2 * np.arange(m) == length), 1.0, 2.0).reshape(-1, 1)
    cm, sm = (np.cos(theta) * c / length, np.sin(theta) * c / length)
  else: cm, sm = np.cos(theta), np.sin(theta)
  C, S = (Tensor(v.astype(np.float32), device=x.device).cast(x.dtype) for v in (cm, sm))
  if inverse and onesided:
    re = a @ C - (b @ S if b is not None else 0)
    return re.movedim(-1, ax).unsqueeze(-1)
  if inverse:
    re = (a @ C - (b @ S if b is not None else 0)) / length
    im = (a @ S + (b @ C if b is not None else 0)) / length
  else:
    re = a @ C + (b @ S if b is not None else 0)
    im = (b @ C if b is not None else 0) - a @ S
  return re.movedim(-1, ax).unsqueeze(-1).cat(im.movedim(-1, ax).unsqueeze(-1), dim=-1)

@op("NonMaxSuppression", static=(0, 1, 2, 3, 4))
def non_max_suppression(boxes: Any, scores: Any, max_out: Any = None, iou_threshold: Any = None, score_threshold: Any = None, *,
                        center_point_box: int = 0) -> np.ndarray:
  """Greedy suppression per batch and class; the output's size depends on the data, so it runs on the host like NonZero."""
  bx, sc = np.asarray(boxes, dtype=np.float64), np.asarray(scores, dtype=np.float64)
  k = _ints(max_out)[0] if max_out is not None and np.asarray(max_out).size else 0
  iou_t = float(np.asarray(iou_threshold).reshape(-1)[0]) if iou_threshold is not None and np.asarray(iou_threshold).size else 0.0
  sc_t = float(np.asarray(score_threshold).reshape(-1)[0]) if score_threshold is not None and np.asarray(score_threshold).size else None
  if center_point_box:   # (cx, cy, w, h) -> corners
    ctr, half = bx[..., :2], bx[..., 2:] / 2
    bx = np.concatenate([ctr - half, ctr + half], axis=-1)[..., [1, 0, 3, 2]]
  lo, hi = np.minimum(bx[..., :2], bx[..., 2:]), np.maximum(bx[..., :2], bx[..., 2:])
  out = []
  for b in range(sc.shape[0]):
    area = np.prod(hi[b] - lo[b], axis=-1)
    for c in range(sc.shape[1]):
      order = [i for i in np.argsort(-sc[b, c], kind="stable") if sc_t is None or sc[b, c, i] > sc_t]
      keep: list[int] = []
      for i in order:
        if len(keep) >= k: break
        inter = np.prod(np.clip(np.minimum(hi[b, i], hi[b, keep]) - np.maximum(lo[b, i], lo[b, keep]), 0, None), axis=-1)
        iou = inter / np.maximum(area[i] + area[keep] - inter, 1e-12)
        if not keep or not np.any(iou > iou_t): keep.append(int(i))
      out += [[b, c, i] for i in keep]
  return np.array(out, dtype=np.int64).reshape(-1, 3)

@op("Col2Im", static=(1, 2))
def col2im(x: Tensor, image_shape: Any, block_shape: Any, *, dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
           strides: Sequence[int] | None = None) -> Tensor:
  """Sums the columns (N, C*prod(block), L) back into images: a one-hot (block*L -> pixel) matrix built on the host."""
  img, blk = _ints(image_shape), _ints(block_shape)
  nd = len(img)
  d, s = list(dilations or [1] * nd), list(strides or [1] * nd)
  p = list(pads or [0] * 2 * nd)
  outs = [(img[i] + p[i] + p[i + nd] - d[i] * (blk[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
  kb, nl, npx = prod(blk), prod(outs), prod(img)
  m = np.zeros((kb * nl, npx), dtype=np.float32)
  for bi, boff in enumerate(itertools.product(*[range(v) for v in blk])):
    for li, loff in enumerate(itertools.product(*[range(v) for v in outs])):
      pos = [loff[i] * s[i] - p[i] + boff[i] * d[i] for i in range(nd)]
      if all(0 <= pos[i] < img[i] for i in range(nd)): m[bi * nl + li, int(np.ravel_multi_index(pos, img))] += 1
  n, ck = x.shape[0], x.shape[1]
  c = ck // kb
  y = x.reshape(n, c, kb * nl) @ Tensor(m, device=x.device).cast(x.dtype)
  return y.reshape(n, c, *img)

@op("TensorScatter")
def tensor_scatter(cache: Tensor, upd: Tensor, write_indices: Tensor | None = None, *, axis: int = -2, mode: str = "linear") -> Tensor:
  """Writes upd into the cache along axis from each batch's write index (wrapping around in circular mode)."""
  ax = _ax(axis, cache.ndim)
  b, m, s = cache.shape[0], cache.shape[ax], upd.shape[ax]
  w = write_indices.cast(dtypes.int64) if write_indices is not None else Tensor.zeros(b, device=cache.device, dtype=dtypes.int64)
  k = Tensor.arange(m, device=cache.device, dtype=dtypes.int64).reshape(1, m) - w.reshape(b, 1)   # (b, m): the update row each slot reads
  if mode == "circular": k = k.mod(m)
  shape = [b] + [1] * (ax - 1) + [m] + [1] * (cache.ndim - ax - 1)
  inside = ((k >= 0) & (k < s)).reshape(shape)
  idx = k.clip(0, s - 1).reshape(shape).expand(*cache.shape[:ax], m, *cache.shape[ax + 1:])
  return inside.where(upd.gather(ax, idx), cache)

@op("STFT", static=(1, 3))
def stft(x: Tensor, frame_step: Any, window: Tensor | None = None, frame_length: Any = None, *, onesided: int = 1) -> Tensor:
  """Windowed DFTs of frames (batch, length, comps) -> (batch, frames, bins, 2)."""
  step = _ints(frame_step)[0]
  fl = _ints(frame_length)[0] if frame_length is not None and np.asarray(frame_length).size else (window.shape[0] if window is not None else x.shape[1])
  nf = (x.shape[1] - fl) // step + 1
  frames = Tensor.stack(*[x[:, f * step:f * step + fl] for f in range(nf)], dim=1)   # (batch, frames, fl, comps)
  if window is not None: frames = frames * window.reshape(1, 1, fl, 1).cast(x.dtype)
  return dft(frames, None, np.array([2]), onesided=onesided)

# *** control flow: the runner hands each GRAPH attribute over as a callable Graph that runs in the node's scope ***

def _truth(v: Any) -> bool:
  """A condition value (a host array or a Tensor, read back: the branch taken depends on the data)."""
  return bool(np.asarray(v.numpy() if isinstance(v, Tensor) else v).reshape(-1)[0])
def _tensor_of(v: Any, like: Tensor | None = None) -> Tensor:
  if isinstance(v, Tensor): return v
  return Tensor(np.asarray(v), device=like.device if like is not None else None)

@op("If", static=(0,))
def if_(cond: Any, *, then_branch: Graph, else_branch: Graph) -> list[Any]:
  return (then_branch if _truth(cond) else else_branch)()

@op("Loop", static=(0,))
def loop(trip: Any, cond: Any, *carried: Any, body: Graph) -> list[Any]:
  """Runs the body while the iteration count is under trip (when given) and its condition holds; the scan outputs (the
  body's outputs after the carried ones) are stacked along a new first axis."""
  n = int(np.asarray(trip).reshape(-1)[0]) if trip is not None else None
  go = _truth(cond) if cond is not None else True
  vals, scans, i = list(carried), [], 0
  while go and (n is None or i < n):
    outs = body(np.array(i, dtype=np.int64), np.array(go), *vals)
    go, vals = _truth(outs[0]), outs[1:1 + len(carried)]
    scans.append(outs[1 + len(carried):])
    i += 1
  k = len(body.outputs) - 1 - len(carried)
  if not scans and k: raise OnnxError("Loop: scan outputs of a loop that runs no iteration (their shape is unknown)")
  stacked = [Tensor.stack(*[_tensor_of(s[j]) for s in scans], dim=0) for j in range(k)]
  return vals + stacked

def _slice_at(x: Tensor, ax: int, i: int) -> Tensor: return x.shrink([(i, i + 1) if d == ax else None for d in range(x.ndim)]).squeeze(ax)

def _scan(states: list[Any], xs: list[Tensor], body: Graph, in_axes: Sequence[int], in_dirs: Sequence[int], out_axes: Sequence[int],
          out_dirs: Sequence[int]) -> list[Any]:
  axes = [_ax(a, x.ndim) for a, x in zip(in_axes, xs)]
  steps = xs[0].shape[axes[0]]
  outs: list[list[Tensor]] = []
  for t in range(steps):
    ins = [_slice_at(x, a, steps - 1 - t if d else t) for x, a, d in zip(xs, axes, in_dirs)]
    res = body(*states, *ins)
    states = res[:len(states)]
    outs.append([_tensor_of(r) for r in res[len(states):]])
  k = len(body.outputs) - len(states)
  ys = []
  for j in range(k):
    parts = [o[j] for o in outs]
    if out_dirs[j]: parts = parts[::-1]
    y = Tensor.stack(*parts, dim=0)
    ys.append(y.movedim(0, _ax(out_axes[j], y.ndim)))
  return list(states) + ys

@op("Scan")
def scan(*xs: Any, body: Graph, num_scan_inputs: int, scan_input_axes: Sequence[int] | None = None, scan_input_directions: Sequence[int] | None = None,
         scan_output_axes: Sequence[int] | None = None, scan_output_directions: Sequence[int] | None = None, directions: Sequence[int] | None = None,
         _opset: int = 13) -> list[Any]:
  """Iterates the body over slices of the scan inputs, threading the state inputs through (opset 8: a leading batch axis,
  each batch item scanned on its own; sequence_lens is not supported)."""
  k = len(body.outputs) - (len(xs) - num_scan_inputs - (1 if _opset < 9 else 0))
  if _opset < 9:
    if xs[0] is not None: raise OnnxError("Scan: input sequence_lens (opset 8)")
    xs = xs[1:]
    n_state = len(xs) - num_scan_inputs
    dirs = list(directions or [0] * num_scan_inputs)
    per = [_scan([_tensor_of(s)[b] for s in xs[:n_state]], [x[b] for x in xs[n_state:]], body, [0] * num_scan_inputs, dirs, [0] * k, [0] * k)
           for b in range(xs[n_state].shape[0])]
    return [Tensor.stack(*[_tensor_of(p[j]) for p in per], dim=0) for j in range(len(per[0]))]
  n_state = len(xs) - num_scan_inputs
  return _scan(list(xs[:n_state]), list(xs[n_state:]), body, scan_input_axes or [0] * num_scan_inputs,
               scan_input_directions or [0] * num_scan_inputs, scan_output_axes or [0] * k, scan_output_directions or [0] * k)

# *** sequences (Seq lists of Tensors) and optionals (the value, or None when empty) ***

@op("SequenceConstruct")
def sequence_construct(*xs: Tensor) -> Seq: return Seq(xs)
@op("SequenceEmpty")
def sequence_empty(*, dtype: int = 1) -> Seq: return Seq()
@op("SequenceLength")
def sequence_length(s: Seq) -> np.ndarray: return np.array(len(s), dtype=np.int64)
@op("SequenceAt", static=(1,))
def sequence_at(s: Seq, pos: Any) -> Tensor: return s[_ints(pos)[0]]
@op("SequenceInsert", static=(2,))
def sequence_insert(s: Seq, x: Tensor, pos: Any = None) -> Seq:
  out = Seq(s)
  out.insert(_ints(pos)[0] if pos is not None else len(s), x)
  return out
@op("SequenceErase", static=(1,))
def sequence_erase(s: Seq, pos: Any = None) -> Seq:
  out = Seq(s)
  del out[_ints(pos)[0] if pos is not None else -1]
  return out
@op("ConcatFromSequence")
def concat_from_sequence(s: Seq, *, axis: int, new_axis: int = 0) -> Tensor:
  if new_axis: return Tensor.stack(*s, dim=_ax(axis, s[0].ndim + 1))
  return s[0].cat(*s[1:], dim=axis) if len(s) > 1 else s[0]
@op("SplitToSequence", static=(1,))
def split_to_sequence(x: Tensor, sizes: Any = None, *, axis: int = 0, keepdims: int = 1) -> Seq:
  ax = _ax(axis, x.ndim)
  if sizes is None:   # one piece per index along axis
    return Seq(_slice_at(x, ax, i) if not keepdims else x.shrink([(i, i + 1) if d == ax else None for d in range(x.ndim)]) for i in range(x.shape[ax]))
  sz = _ints(sizes)
  if np.asarray(sizes).ndim == 0:   # a scalar: equal pieces of that size, the last one shorter
    n = x.shape[ax]
    sz = [sz[0]] * (n // sz[0]) + ([n % sz[0]] if n % sz[0] else [])
  return Seq(split(x, np.array(sz, dtype=np.int64), axis=ax))
@op("SequenceMap")
def sequence_map(s: Seq, *others: Any, body: Graph) -> list[Seq]:
  outs: list[Seq] = [Seq() for _ in body.outputs]
  for i in range(len(s)):
    res = body(s[i], *[o[i] if isinstance(o, Seq) else o for o in others])
    for acc, r in zip(outs, res): acc.append(_tensor_of(r))
  return outs
@op("Optional")
def optional(x: Any = None, *, type: Any = None) -> Any: return EMPTY if x is None else x
@op("OptionalHasElement")
def optional_has_element(x: Any = None) -> np.ndarray: return np.array(x is not None)
@op("OptionalGetElement")
def optional_get_element(x: Any) -> Any:
  if x is None: raise OnnxError("OptionalGetElement: the optional is empty")
  return x

# *** recurrent-state ops of opset 27 and ai.onnx.preview ***

@op("CausalConvWithState")
def causal_conv_with_state(x: Tensor, w: Tensor, b: Tensor | None = None, past: Tensor | None = None, *, activation: str = "none") -> tuple[Tensor, Tensor]:
  """Depthwise causal conv1d over (batch, channels, length) with the last k-1 positions carried as state."""
  if activation not in ("none", "silu", "swish"): raise OnnxError(f"CausalConvWithState: attribute activation={activation!r}")
  k = w.shape[2]
  padded = x.pad([None, None, (k - 1, 0)]) if past is None else past.cast(x.dtype).cat(x, dim=2)
  y = conv(padded, w, b, group=x.shape[1]).cast(x.dtype)
  if activation != "none": y = (y.float() * y.float().sigmoid()).cast(x.dtype)
  return y, padded[:, :, padded.shape[2] - (k - 1):]

@op("LinearAttention")
def linear_attention(q: Tensor, k: Tensor, v: Tensor, past: Tensor | None = None, decay: Tensor | None = None, beta: Tensor | None = None, *,
                     q_num_heads: int, kv_num_heads: int, scale: float = 0.0, update_rule: str = "gated_delta", chunk_size: int = 64) -> tuple[Tensor, Tensor]:
  """The recurrence S_t = [exp(g_t)] S_{t-1} + k_t (x) v_t (delta rules: v_t replaced by beta_t (v_t - S^T k_t)), o_t = scale q_t^T S_t,
  unrolled over the (static) sequence in float32; chunk_size is a tuning hint without effect on the result."""
  if update_rule not in ("linear", "gated", "delta", "gated_delta"): raise OnnxError(f"LinearAttention: attribute update_rule={update_rule!r}")
  gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
  if gated != (decay is not None) or delta != (beta is not None): raise OnnxError(f"LinearAttention: update_rule {update_rule!r} with these inputs")
  bsz, t, _ = q.shape
  def heads(x: Tensor, h: int) -> Tensor: return x.float().reshape(bsz, t, h, -1).transpose(1, 2)   # (B, H, T, D)
  q4, k4, v4 = heads(q, q_num_heads), heads(k, kv_num_heads), heads(v, kv_num_heads)
  dk, dv, group = q4.shape[-1], v4.shape[-1], q_num_heads // kv_num_heads
  g4 = heads(decay, kv_num_heads) if decay is not None else None       # (B, Hkv, T, 1 or dk)
  b4 = beta.float().reshape(bsz, t, beta.shape[-1], 1).transpose(1, 2) if beta is not None else None   # (B, Hkv or 1, T, 1)
  state = past.float() if past is not None else Tensor.zeros(bsz, kv_num_heads, dk, dv, device=q.device)
  sc = scale if scale else 1 / math.sqrt(dk)
  outs = []
  for i in range(t):
    kt, vt = k4[:, :, i], v4[:, :, i]
    if g4 is not None: state = state * g4[:, :, i].exp().unsqueeze(-1)
    if b4 is not None: vt = b4[:, :, i] * (vt - (state * kt.unsqueeze(-1)).sum(-2))
    state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    read = state.repeat_interleave(group, dim=1) if group > 1 else state
    outs.append((q4[:, :, i].unsqueeze(-1) * read).sum(-2) * sc)   # (B, Hq, dv)
  y = Tensor.stack(*outs, dim=2).transpose(1, 2).reshape(bsz, t, q_num_heads * dv)
  return y.cast(q.dtype), state.cast(past.dtype if past is not None else q.dtype)

_SOFTMAX_DTYPES = {1: dtypes.float32, 10: dtypes.float16, 11: dtypes.float64, 16: dtypes.bfloat16}

@op("ai.onnx.preview.FlexAttention")
def flex_attention(q: Tensor, k: Tensor, v: Tensor, *, scale: float | None = None, score_mod: Graph | None = None, prob_mod: Graph | None = None,
                   softmax_precision: int | None = None) -> Tensor:
  """Attention whose scores (after Q K^T scale) and probabilities (after softmax) pass through optional subgraphs."""
  if softmax_precision is not None and softmax_precision not in _SOFTMAX_DTYPES:
    raise OnnxError(f"FlexAttention: attribute softmax_precision={softmax_precision}")
  cdt = _SOFTMAX_DTYPES[softmax_precision] if softmax_precision is not None else (dtypes.float64 if q.dtype is dtypes.float64 else dtypes.float32)
  if q.shape[1] != k.shape[1]: k, v = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1), v.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
  s = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
  scores = ((q * s) @ (k * s).transpose(-1, -2)).cast(cdt)
  if score_mod is not None: scores = _tensor_of(score_mod(scores)[0], q).cast(cdt)
  probs = scores.softmax(-1)
  if prob_mod is not None: probs = _tensor_of(prob_mod(probs)[0], q).cast(cdt)
  return (probs @ v.cast(cdt)).cast(v.dtype)

# *** ai.onnx.preview.training optimizers: one update step for n tensors (inputs: R, T, then n X's, n G's, n of each state) ***

def _groups(xs: Sequence[Tensor], k: int) -> list[list[Tensor]]:
  n = len(xs) // k
  return [list(xs[j * n:(j + 1) * n]) for j in range(k)]

@op("ai.onnx.preview.training.Adagrad", static=(0, 1))
def adagrad(r: Any, t: Any, *xs: Tensor, decay_factor: float = 0.0, epsilon: float = 1e-6, norm_coefficient: float = 0.0) -> list[Tensor]:
  lr = float(np.asarray(r).reshape(-1)[0]) / (1 + float(np.asarray(t).reshape(-1)[0]) * decay_factor)
  new_x, new_h = [], []
  for x, g, h in zip(*_groups(xs, 3)):
    g = x * norm_coefficient + g
    h2 = h + g * g
    new_x.append((x - lr * g / (h2.sqrt() + epsilon)).cast(x.dtype))
    new_h.append(h2.cast(h.dtype))
  return new_x + new_h

@op("ai.onnx.preview.training.Adam", static=(0, 1))
def adam(r: Any, t: Any, *xs: Tensor, alpha: float = 0.9, beta: float = 0.999, epsilon: float = 1e-6, norm_coefficient: float = 0.0,
         norm_coefficient_post: float = 0.0) -> list[Tensor]:
  lr, step = float(np.asarray(r).reshape(-1)[0]), float(np.asarray(t).reshape(-1)[0])
  if step > 0: lr = lr * math.sqrt(1 - beta ** step) / (1 - alpha ** step)   # bias correction
  new_x, new_v, new_h = [], [], []
  for x, g, v, h in zip(*_groups(xs, 4)):
    g = x * norm_coefficient + g
    v2, h2 = v * alpha + g * (1 - alpha), h * beta + g * g * (1 - beta)
    new_x.append(((x - lr * v2 / (h2.sqrt() + epsilon)) * (1 - norm_coefficient_post)).cast(x.dtype))
    new_v.append(v2.cast(v.dtype))
    new_h.append(h2.cast(h.dtype))
  return new_x + new_v + new_h

@op("ai.onnx.preview.training.Momentum", static=(0, 1))
def momentum(r: Any, t: Any, *xs: Tensor, alpha: float, beta: float, mode: str, norm_coefficient: float) -> list[Tensor]:
  if mode not in ("standard", "nesterov"): raise OnnxError(f"Momentum: attribute mode={mode!r}")
  lr, step = float(np.asarray(r).reshape(-1)[0]), float(np.asarray(t).reshape(-1)[0])
  b = beta if step > 0 else 1.0
  new_x, new_v = [], []
  for x, g, v in zip(*_groups(xs, 3)):
    g = x * norm_coefficient + g
    v2 = v * alpha + g * b
    new_x.append((x - lr * (g + v2 * alpha if mode == "nesterov" else v2)).cast(x.dtype))
    new_v.append(v2.cast(v.dtype))
  return new_x + new_v

# *** RoiAlign: the sampling geometry depends on the boxes' sizes (adaptive sampling_ratio), so the boxes are read on the host
# like NonMaxSuppression's; the feature map stays on the device and is gathered there ***

def _roi_taps(box: np.ndarray, h: int, w: int, oh: int, ow: int, ratio: int, scale: float, half_pixel: bool) -> tuple[np.ndarray, np.ndarray]:
  """For one box: the 4 bilinear taps (flat positions, weights) of every sample of every output bin, (oh*ow, samples*4)."""
  off = 0.5 if half_pixel else 0.0
  x0, y0, x1, y1 = (float(v) * scale - off for v in box)
  rw, rh = x1 - x0, y1 - y0
  if not half_pixel: rw, rh = max(rw, 1.0), max(rh, 1.0)
  bh, bw = rh / oh, rw / ow
  gh = ratio if ratio > 0 else int(math.ceil(rh / oh))
  gw = ratio if ratio > 0 else int(math.ceil(rw / ow))
  pos, wts = np.zeros((oh * ow, gh * gw * 4), np.int64), np.zeros((oh * ow, gh * gw * 4), np.float64)
  for p, (ph, pw) in enumerate(itertools.product(range(oh), range(ow))):
    for s, (iy, ix) in enumerate(itertools.product(range(gh), range(gw))):
      y, x = y0 + ph * bh + (iy + 0.5) * bh / gh, x0 + pw * bw + (ix + 0.5) * bw / gw
      if y < -1.0 or y > h or x < -1.0 or x > w: continue   # outside: a zero-weight sample (it still counts)
      y, x = max(y, 0.0), max(x, 0.0)
      yl, xl = int(y), int(x)
      if yl >= h - 1: yl = yh = h - 1; y = yl
      else: yh = yl + 1
      if xl >= w - 1: xl = xh = w - 1; x = xl
      else: xh = xl + 1
      ly, lx = y - yl, x - xl
      pos[p, s * 4:s * 4 + 4] = [yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh]
      wts[p, s * 4:s * 4 + 4] = [(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx]
  return pos, wts

@op("RoiAlign", static=(1, 2))
def roi_align(x: Tensor, rois: Any, batch_indices: Any, *, coordinate_transformation_mode: str = "half_pixel", mode: str = "avg",
              output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0) -> Tensor:
  if mode not in ("avg", "max"): raise OnnxError(f"RoiAlign: attribute mode={mode!r}")
  n, c, h, w = x.shape
  boxes, bidx = np.asarray(rois, np.float64).reshape(-1, 4), _ints(batch_indices)
  taps = [_roi_taps(b, h, w, output_height, output_width, sampling_ratio, spatial_scale, coordinate_transformation_mode == "half_pixel")
          for b in boxes]
  k = max(t[0].shape[1] for t in taps)   # rois sample different counts: pad to the most, padded taps masked out
  r, p = len(taps), output_height * output_width
  pos, wts, real = np.zeros((r, p, k), np.int64), np.zeros((r, p, k), np.float32), np.zeros((r, 1, 1, k), bool)
  for i, (ps, ws) in enumerate(taps):
    pos[i, :, :ps.shape[1]], wts[i, :, :ws.shape[1]], real[i, ..., :ps.shape[1]] = ps, ws, True
  feats = x.reshape(n, c, h * w)[Tensor(np.array(bidx, np.int64), device=x.device)]   # (r, c, h*w)
  idx = Tensor(pos.reshape(r, 1, p * k), device=x.device).expand(r, c, p * k)
  vals = feats.gather(2, idx).reshape(r, c, p, k).float() * Tensor(wts, device=x.device).reshape(r, 1, p, k)
  if mode == "avg":
    counts = np.array([max(t[0].shape[1] // 4, 1) for t in taps], np.float32).reshape(r, 1, 1)
    out = vals.sum(-1) / Tensor(counts, device=x.device)
  else: out = Tensor(real, device=x.device).where(vals, -math.inf).max(-1)
  return out.reshape(r, c, output_height, output_width).cast(x.dtype)

@op("MelWeightMatrix", static=(0, 1, 2, 3, 4))
def mel_weight_matrix(num_mel_bins: Any, dft_length: Any, sample_rate: Any, lower_hz: Any, upper_hz: Any, *, output_datatype: int = 1) -> np.ndarray:
  """Triangular mel filters (dft_length // 2 + 1, num_mel_bins): a constant of its scalar inputs, built on the host like Range."""
  nmel, nfft, rate = (int(np.asarray(v).reshape(-1)[0]) for v in (num_mel_bins, dft_length, sample_rate))
  lo, hi = (float(np.asarray(v).reshape(-1)[0]) for v in (lower_hz, upper_hz))
  def mel(f: float) -> float: return 2595 * math.log10(1 + f / 700)
  # num_mel_bins + 2 edges, equally spaced in mel from lo (the step divides the span by the edge count), as spectrogram bins
  step = (mel(hi) - mel(lo)) / (nmel + 2)
  hz = 700 * (10 ** ((np.arange(nmel + 2) * step + mel(lo)) / 2595) - 1)
  edges = (((nfft + 1) * hz) // rate).astype(np.int64)
  out = np.zeros((nfft // 2 + 1, nmel), np.float64)
  for i in range(nmel):
    left, mid, right = (int(v) for v in edges[i:i + 3])
    if mid == left: out[mid, i] = 1
    else: out[left:mid + 1, i] = (np.arange(left, mid + 1) - left) / (mid - left)
    if right > mid: out[mid:right, i] = (right - np.arange(mid, right)) / (right - mid)
  return out.astype(to_np(onnx_dtype(output_datatype, "MelWeightMatrix: ")))

@op("DeformConv")
def deform_conv(x: Tensor, w: Tensor, offset: Tensor, b: Tensor | None = None, mask: Tensor | None = None, *, dilations: Sequence[int] | None = None,
                group: int = 1, kernel_shape: Sequence[int] | None = None, offset_group: int = 1, pads: Sequence[int] | None = None,
                strides: Sequence[int] | None = None) -> Tensor:
  """2-d convolution whose taps sample the input at learned offsets (bilinear, zero outside the image), optionally masked:
  the sampled columns (N, C*kh*kw, oh*ow) are gathered on the device, then multiplied by the weights per group."""
  if x.ndim != 4: raise OnnxError(f"DeformConv: {x.ndim - 2}-d input (only 2-d)")
  n, c, h, wd = x.shape
  oc, cg, kh, kw = w.shape
  dh, dw = dilations or (1, 1)
  sh, sw = strides or (1, 1)
  ph, pw = (pads or (0, 0, 0, 0))[:2]
  oh, ow = offset.shape[-2:]
  g, k, p = offset_group, kh * kw, oh * ow
  ki, kj = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
  oy, ox = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
  base_y = (ki.reshape(k, 1) * dh + oy.reshape(1, p) * sh - ph).astype(np.float32)   # (k, p): where each tap reads before the offset
  base_x = (kj.reshape(k, 1) * dw + ox.reshape(1, p) * sw - pw).astype(np.float32)
  off = offset.float().reshape(n, g, k, 2, p)
  py, px = off[:, :, :, 0] + Tensor(base_y, device=x.device), off[:, :, :, 1] + Tensor(base_x, device=x.device)   # (n, g, k, p)
  y0, x0 = py.floor(), px.floor()
  ly, lx = py - y0, px - x0
  xf = x.float().reshape(n, g, c // g, h * wd)
  cols: Tensor | None = None
  for dy, dx in itertools.product((0, 1), repeat=2):
    yy, xx = y0 + dy, x0 + dx
    inside = (yy >= 0) & (yy <= h - 1) & (xx >= 0) & (xx <= wd - 1)
    wgt = inside.where((ly if dy else 1 - ly) * (lx if dx else 1 - lx), 0.0)
    lin = (yy.clip(0, h - 1) * wd + xx.clip(0, wd - 1)).cast(dtypes.int32).reshape(n, g, 1, k * p).expand(n, g, c // g, k * p)
    term = xf.gather(3, lin) * wgt.reshape(n, g, 1, k * p)
    cols = term if cols is None else cols + term
  assert cols is not None
  if mask is not None: cols = cols * mask.float().reshape(n, g, 1, k * p)
  cols = cols.reshape(n, group, cg * k, p)
  y = w.float().reshape(1, group, oc // group, cg * k) @ cols   # (n, group, oc/group, p)
  y = y.reshape(n, oc, oh, ow)
  if b is not None: y = y + b.float().reshape(1, oc, 1, 1)
  return y.cast(x.dtype)

# *** ai.onnx.ml: Binarizer, ArrayFeatureExtractor, TreeEnsemble (the string encoders and the older classifiers are not supported) ***

@op("ai.onnx.ml.Binarizer")
def binarizer(x: Tensor, *, threshold: float = 0.0) -> Tensor: return (x > threshold).cast(x.dtype)
@op("ai.onnx.ml.ArrayFeatureExtractor")
def array_feature_extractor(x: Tensor, idx: Tensor) -> Tensor:
  """The elements at idx along the last axis (a 1-d input gives a (1, len(idx)) row)."""
  out = x[..., _norm_idx(idx.reshape(-1), x.shape[-1])]
  return out.reshape(1, -1) if x.ndim == 1 else out

_TREE_AGG = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}

@op("ai.onnx.ml.TreeEnsemble")
def tree_ensemble(x: Tensor, *, tree_roots: Sequence[int], nodes_featureids: Sequence[int], nodes_splits: Any, nodes_modes: Any,
                  nodes_truenodeids: Sequence[int], nodes_falsenodeids: Sequence[int], nodes_trueleafs: Sequence[int],
                  nodes_falseleafs: Sequence[int], leaf_targetids: Sequence[int], leaf_weights: Any, n_targets: int,
                  membership_values: Any = None, nodes_missing_value_tracks_true: Sequence[int] | None = None, nodes_hitrates: Any = None,
                  aggregate_function: int = 1, post_transform: int = 0) -> Tensor:
  """Every tree walks all samples at once on the device, one level per step (a leaf stays put), for as many steps as there are
  interior nodes; the leaves' weights are then summed (or averaged, min'd, max'd) per target."""
  if post_transform != 0: raise OnnxError(f"TreeEnsemble: attribute post_transform={post_transform} (only 0, NONE)")
  if aggregate_function not in _TREE_AGG: raise OnnxError(f"TreeEnsemble: attribute aggregate_function={aggregate_function}")
  dev, n = x.device, x.shape[0]
  modes, splits = np.asarray(nodes_modes).reshape(-1).astype(np.int64), np.asarray(nodes_splits, np.float64).reshape(-1)
  nn = len(modes)
  sets = np.full((nn, 1), np.nan)   # each MEMBER node's set, in node order, from the nan-separated membership_values
  if membership_values is not None and (modes == 6).any():
    groups: list[list[float]] = [[]]
    for mv in np.asarray(membership_values, np.float64).reshape(-1).tolist():
      if math.isnan(mv): groups.append([])
      else: groups[-1].append(mv)
    sets = np.full((nn, max(len(g) for g in groups)), np.nan)
    for at, g in zip(np.flatnonzero(modes == 6), groups): sets[at, :len(g)] = g
  def table(v: Any, dt: Any = dtypes.int32) -> Tensor: return Tensor(np.asarray(v), device=dev).cast(dt)   # per-node (or per-leaf) values
  feat, mode, split = table(nodes_featureids), table(modes), table(splits, x.dtype)
  t_id, f_id, t_leaf, f_leaf = table(nodes_truenodeids), table(nodes_falsenodeids), table(nodes_trueleafs, dtypes.bool), table(nodes_falseleafs, dtypes.bool)
  tracks = table(nodes_missing_value_tracks_true if nodes_missing_value_tracks_true is not None else [0] * nn, dtypes.bool)
  member = table(sets, x.dtype)
  trees = len(tree_roots)
  node = Tensor(np.tile(np.asarray(tree_roots, np.int32), (n, 1)), device=dev)   # (n, trees)
  leaf = node.zeros_like().cast(dtypes.bool)
  for _ in range(nn):
    v = x.gather(1, feat[node].cast(dtypes.int64))   # (n, trees): the feature each tree's current node tests
    s, m = split[node], mode[node]
    cond = (m == 0).where(v <= s, (m == 1).where(v < s, (m == 2).where(v >= s, (m == 3).where(v > s, (m == 4).where(v == s,
            (m == 5).where(v != s, (v.unsqueeze(-1) == member[node]).any(-1)))))))
    cond = (v.isnan() & tracks[node]) | (~v.isnan() & cond)
    nxt, nxt_leaf = cond.where(t_id[node], f_id[node]), cond.where(t_leaf[node], f_leaf[node])
    node, leaf = leaf.where(node, nxt), leaf | nxt_leaf
  w = table(leaf_weights, x.dtype)[node]   # (n, trees)
  hit = table(leaf_targetids)[node].unsqueeze(-1) == Tensor.arange(n_targets, device=dev).reshape(1, 1, n_targets)   # (n, trees, targets)
  agg = _TREE_AGG[aggregate_function]
  if agg in ("SUM", "AVERAGE"):
    out = hit.where(w.unsqueeze(-1), 0).sum(1)
    return (out / trees if agg == "AVERAGE" else out).cast(x.dtype)
  big = float(np.finfo(to_np(x.dtype)).max)   # a target no tree reaches keeps the start value: the largest finite (MIN), its negation (MAX)
  best = hit.where(w.unsqueeze(-1), big if agg == "MIN" else -big)
  return (best.min(1) if agg == "MIN" else best.max(1)).cast(x.dtype)
