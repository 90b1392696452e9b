"""core.codegen.decompose.fast_exp2's 2**n step: the exponent fields of its two factors straight from the rounded float's bits
(a shift each, no subtraction of the rounding constant first; n + 254 held there, so no exponent bias added either). Exactness
over the whole range is plugins/cpu/tests/test_vector_math."""
import struct
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.alu import exec_alu
from core.codegen.decompose import fast_exp2

def _eval(e: UOp) -> float:
  """e, a graph of constants, evaluated node by node in its own dtypes."""
  val: dict[UOp, object] = {}
  for u in e.toposort():
    s = [val[x] for x in u.src]
    if u.op is Ops.CONST: val[u] = u.arg
    elif u.op is Ops.BITCAST:
      fmt = lambda d: "<f" if dtypes.is_float(d) else "<I" if d.scalar() is dtypes.uint32 else "<i"
      val[u] = struct.unpack(fmt(u.dtype), struct.pack(fmt(u.src[0].dtype), s[0]))[0]
    else: val[u] = exec_alu(u.op, u.dtype, tuple(s))
  return float(val[e])  # type: ignore[arg-type]

def test_exp2_scale_takes_four_integer_ops():
  e = fast_exp2(UOp.variable("x", -1.0, 1.0, dtypes.float32))
  assert sum(u.op in (Ops.ADD, Ops.SUB, Ops.SHL, Ops.SHR) and not dtypes.is_float(u.dtype) for u in e.toposort()) == 4

@pytest.mark.parametrize("x", [-254.0, -200.5, -149.0, -127.25, -126.0, -1.5, 0.0, 0.75, 64.0, 127.0, 127.9999])
def test_exp2_scale_factors_across_the_range(x):
  x = struct.unpack("<f", struct.pack("<f", x))[0]   # the float32 the kernel sees
  got, want = _eval(fast_exp2(UOp.const(dtypes.float32, x))), 2.0 ** x
  assert got == want or abs(got - want) <= 2 * max(abs(want) * 2.0 ** -23, 2.0 ** -149), (got, want)
