"""Evaluate one ALU op on Python values with the semantics of C on the target dtype."""
from __future__ import annotations
import math
from typing import Any, Callable
from core.ir.dtype import DType, dtypes, truncate
from core.ir.ops import Ops

def _idiv(a: int, b: int) -> int:
  """C division: truncates toward zero; x/0 is undefined in C, we answer 0."""
  if b == 0: return 0
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q

def _mod(a: int, b: int) -> int:
  """C remainder: takes the sign of the dividend, so a == (a/b)*b + a%b."""
  if b == 0: return 0
  return a - _idiv(a, b) * b

def _fdiv(a: float, b: float) -> float:
  if b == 0:
    if a == 0 or math.isnan(a): return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)
  return a / b

def _safe(fn: Callable[[float], float], lo: float | None = None) -> Callable[[float], float]:
  def wrapped(x: float) -> float:
    if math.isnan(x): return math.nan
    if lo is not None and x < lo: return math.nan
    try: return fn(x)
    except OverflowError: return math.inf
    except ValueError: return math.nan
  return wrapped

def _log2(x: float) -> float:
  if math.isnan(x) or x < 0: return math.nan
  if x == 0: return -math.inf
  if math.isinf(x): return math.inf
  return math.log2(x)

def _sin(x: float) -> float: return math.nan if math.isinf(x) or math.isnan(x) else math.sin(x)
def _recip(x: float) -> float: return _fdiv(1.0, x)
def _trunc(x: float) -> float: return x if math.isinf(x) or math.isnan(x) else math.copysign(float(math.trunc(x)), x)  # C keeps -0.0
def _pow(a: float, b: float) -> float:
  try: return math.pow(a, b)
  except OverflowError: return math.inf
  except ValueError: return math.nan
def _max(a: Any, b: Any) -> Any:
  if isinstance(a, float) and math.isnan(a): return a
  if isinstance(b, float) and math.isnan(b): return b
  return max(a, b)

def _shift_count(dtype: DType, b: int) -> int: return b & (8 * dtype.scalar().itemsize - 1) if dtype is not dtypes.index else b

PYTHON_ALU: dict[Ops, Callable[..., Any]] = {
  Ops.NEG: lambda x: -x if not isinstance(x, bool) else not x,
  Ops.EXP2: _safe(lambda x: 2.0 ** x), Ops.LOG2: _log2, Ops.SIN: _sin, Ops.SQRT: _safe(math.sqrt, 0.0),
  Ops.RECIPROCAL: _recip, Ops.TRUNC: _trunc,
  Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
  Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.FDIV: _fdiv, Ops.MAX: _max, Ops.POW: _pow,
  Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b,
  Ops.XOR: lambda a, b: a ^ b, Ops.OR: lambda a, b: a | b, Ops.AND: lambda a, b: a & b,
  Ops.WHERE: lambda c, a, b: a if c else b, Ops.MULACC: lambda a, b, c: a * b + c,
}

def exec_alu(op: Ops, dtype: DType, operands: tuple[Any, ...]) -> Any:
  """The value of `op(*operands)` as computed in `dtype` (the result dtype), truncated like C."""
  if dtype.count > 1:  # elementwise over vector constants
    return tuple(exec_alu(op, dtype.scalar(), tuple(o[i] if isinstance(o, tuple) else o for o in operands)) for i in range(dtype.count))
  if op is Ops.SHL: ret = operands[0] << _shift_count(dtype, operands[1])
  elif op is Ops.SHR: ret = operands[0] >> _shift_count(dtype, operands[1])
  elif op in (Ops.IDIV, Ops.MOD) and not dtypes.is_int(dtype):
    raise TypeError(f"{op.name} needs an integer dtype, got {dtype}")
  else: ret = PYTHON_ALU[op](*operands)
  return truncate(dtype, ret)
