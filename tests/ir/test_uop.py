"""UOp.const's cache of tensor-level constants: repeated scalars share one graph, different values never do."""
import math
from core.ir.ops import UOp
from core.ir.dtype import dtypes

def test_tensor_level_const_cache_keeps_values_apart():
  a = UOp.const(dtypes.float32, 1.0, "CPU", (4,))
  assert UOp.const(dtypes.float32, 1.0, "CPU", (4,)) is a          # repeated scalar ops reuse one graph
  assert UOp.const(dtypes.float32, 1.0, "CPU", (5,)) is not a and UOp.const(dtypes.float32, 1.0, "CPU:1", (4,)) is not a
  assert UOp.const(dtypes.float16, 1.0, "CPU", (4,)) is not a
  z, nz = UOp.const(dtypes.float32, 0.0, "CPU", (2,)), UOp.const(dtypes.float32, -0.0, "CPU", (2,))
  assert z is not nz and math.copysign(1, nz.src[0].src[0].arg) == -1 and math.copysign(1, z.src[0].src[0].arg) == 1
  n = UOp.const(dtypes.float32, float("nan"), "CPU", (3,))
  assert math.isnan(n.src[0].src[0].arg) and n.shape == (3,)

def _counting(monkeypatch, name: str, fn):
  """Counts the calls UOp.const makes to `name` (a builtin or a core.ir.ops function), through a global of core.ir.ops."""
  import core.ir.ops as ops
  calls = []
  def counted(*a):
    calls.append(a)
    return fn(*a)
  monkeypatch.setattr(ops, name, counted, raising=False)
  return calls

def test_tensor_level_const_hit_tests_no_uop_isinstance(monkeypatch):
  # x + 1 in an eager loop: the cache is looked at first; isinstance against UOp (a class with a metaclass) is a slow test
  a = UOp.const(dtypes.float32, 1, "CPU", (7,))
  calls = _counting(monkeypatch, "isinstance", isinstance)
  assert UOp.const(dtypes.float32, 1, "CPU", (7,)) is a and UOp.const(dtypes.float32, 2.71, "CPU", (7, 1)).shape == (7, 1)
  assert UOp.const(dtypes.float32, 2.71, "CPU", (7, 1)) is UOp.const(dtypes.float32, 2.71, "CPU", (7, 1))
  assert [c[0] for c in calls if c[1] is UOp] == [2.71]   # the one miss (its first call); the hits test nothing
  assert UOp.const(dtypes.index, 3) is UOp.const(dtypes.index, 3) and len(calls) > 2   # not tensor-level: no cache, tests as before

def test_tensor_level_int_const_hit_makes_no_arg_key(monkeypatch):
  from core.ir.ops import _arg_key
  a = UOp.const(dtypes.float32, 3, "CPU", (5,))
  calls = _counting(monkeypatch, "_arg_key", _arg_key)
  assert UOp.const(dtypes.float32, 3, "CPU", (5,)) is a and calls == []   # an int is its own key
  assert UOp.const(dtypes.float32, 3.0, "CPU", (5,)).src[0].src[0].arg == 3.0 and calls   # a float's key is its bits

def test_tensor_level_const_hits_equal_misses_for_every_scalar_kind():
  # each value once from a cleared cache, then from it: the same node, and the values Python calls equal stay apart
  from core.ir.ops import _const_cache
  vals = [1, 1.0, True, 0.0, -0.0, float("nan"), float("inf"), -7, 2**40]
  for dt in (dtypes.float32, dtypes.int32, dtypes.float16):
    _const_cache.clear()
    first = [UOp.const(dt, v, "CPU", (3, 2)) for v in vals]
    again = [UOp.const(dt, v, "CPU", (3, 2)) for v in vals]
    assert all(x is y for x, y in zip(first, again)) and all(u.shape == (3, 2) and u.dtype is dt for u in first)
  assert first[3] is not first[4] and math.copysign(1, first[4].src[0].src[0].arg) == -1
  # a vector dtype's scalar is a VCONST whatever the device and shape say (no cache entry is made for it)
  v = UOp.const(dtypes.float32.vec(4), 1.0, "CPU", (4,))
  assert v.op.name == "VCONST" and v.arg == (1.0,) * 4 and UOp.const(dtypes.float32.vec(4), 1.0, "CPU", (4,)) is v

def test_unbroadcast_answers_the_repeated_value_only():
  x, y = UOp.variable("x", 0, 9), UOp.variable("y", 0, 9)
  splat, mixed = UOp.vectorize(x, x, x, x), UOp.vectorize(x, y, x, x)
  assert splat.unbroadcast() is x
  assert mixed.unbroadcast() is mixed      # lanes differ: not a broadcast
  assert x.unbroadcast() is x              # a scalar is its own value
  assert splat.gep((0, 1)).unbroadcast().op.name == "GEP"   # only a VECTORIZE is looked through
