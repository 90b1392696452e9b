"""Float literals as kernel arguments (LIFT_CONSTS, on by default): `x * s + c` for many values of s and c is one compiled
program, with each kernel's values passed at launch; literals rules look for stay in the code."""
import math, struct
import numpy as np
from core import Tensor
from core.helpers import Context
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.codegen import program as P

def _f32(x: float) -> np.float32: return np.float32(x)

def test_scalar_operands_compile_one_program_for_every_value():
  a = Tensor(np.arange(32, dtype=np.float32)).realize()
  (a * 3.5 + 0.25).realize()
  n = P._binaries.misses   # misses, not len(): the cache is bounded, and a full one in a long test run stays the same size
  for i in range(8):
    s, c = 0.13 * i + 0.3, 1.5 - i   # never 0, 1 or -1 (x * 1 is a kernel of another structure)
    np.testing.assert_array_equal((a * s + c).numpy(), np.arange(32, dtype=np.float32) * _f32(s) + _f32(c))
  assert P._binaries.misses == n   # the same structure as the warm-up: no new program for any value

def test_without_lifting_every_value_is_a_new_program():
  # the switch works, and the count above would catch a regression
  a = Tensor(np.arange(32, dtype=np.float32)).realize()
  with Context(LIFT_CONSTS=0):
    n = P._binaries.misses
    for i in range(3): np.testing.assert_array_equal((a * (7.125 + i)).numpy(), np.arange(32, dtype=np.float32) * _f32(7.125 + i))
    assert P._binaries.misses == n + 3

def test_lift_keeps_identities_and_non_finite_values_as_literals():
  x = UOp.variable("x", 0, 10).cast(dtypes.float32)
  keep = [0.0, 1.0, -1.0, math.inf, -math.inf, math.nan]
  ast = UOp.sink(*[x * UOp.const(dtypes.float32, v) for v in keep] + [x * UOp.const(dtypes.float32, 2.5), x + UOp.const(dtypes.float32, 2.5)])
  lifted, consts = P.lift_constants(ast)
  assert [arg[0] for arg, _ in consts] == [f"{P.LIT_PREFIX}0"]   # 2.5, used twice, is one variable
  assert consts[0][1] == struct.unpack("<i", struct.pack("<f", 2.5))[0]
  left = {u.arg for u in lifted.toposort() if u.op is Ops.CONST and u.dtype is dtypes.float32}
  assert 2.5 not in left and {0.0, 1.0, -1.0, math.inf, -math.inf} <= left and any(isinstance(v, float) and math.isnan(v) for v in left)

def test_kernels_differing_only_in_literals_share_the_lifted_ast():
  x = UOp.variable("x", 0, 10).cast(dtypes.float32)
  a, b = (P.lift_constants(UOp.sink(x * UOp.const(dtypes.float32, v) + UOp.const(dtypes.float32, 0.5))) for v in (3.0, -7.25))
  assert a[0] is b[0] and a[1] != b[1]

def test_jit_replays_with_each_kernels_own_values():
  from core import Jit
  w = Tensor(np.linspace(-1, 1, 16).astype(np.float32)).realize()
  @Jit
  def f(x: Tensor) -> Tensor: return ((x * 0.75 + 2.5) * (w - 0.125) / 3.0).realize()
  for i in range(4):
    x = np.full(16, i, np.float32)
    want = (x * _f32(0.75) + _f32(2.5)) * (np.linspace(-1, 1, 16).astype(np.float32) - _f32(0.125)) / _f32(3.0)
    np.testing.assert_allclose(f(Tensor(x)).numpy(), want, rtol=1e-6)

def test_a_kernel_with_many_literals_keeps_them():
  x = UOp.variable("x", 0, 10).cast(dtypes.float32)
  many = UOp.sink(*[x * UOp.const(dtypes.float32, 0.5 + i) for i in range(P.MAX_LIFTED + 1)])
  assert P.lift_constants(many) == (many, ())
  few = UOp.sink(*[x * UOp.const(dtypes.float32, 0.5 + i) for i in range(P.MAX_LIFTED)])
  assert len(P.lift_constants(few)[1]) == P.MAX_LIFTED
