"""float32 exp2/log2 as vector arithmetic (core.codegen.decompose.pm_vector_math, in both CPU renderers' rules): no libm call
per lane, within a few ulp of float64 over the whole range, IEEE special values exact."""
from __future__ import annotations
import re, warnings
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, launch_vals, program_source
from cpu_kernels import RENDERERS, device

gen = np.random.default_rng(0)
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 2.0, 0.5]
EXP2_X = np.concatenate([gen.uniform(-160, 140, 100000), gen.uniform(-2, 2, 30000),
                         [127.9999, 128, -126, -149, -149.5, -150, -151, -1e30, 1e30, 1e-8, -1e-8] + SPECIAL]).astype(np.float32)
LOG2_X = np.concatenate([gen.uniform(0, 10, 30000), np.exp(gen.uniform(-100, 88, 50000)), gen.uniform(0.9, 1.1, 30000),
                         [-1, 1e-40, 1e-45, 3e38, 1.4142135, 1.4142137] + SPECIAL]).astype(np.float32)

def _run(ren: str, fn, x: np.ndarray, renderer=None) -> tuple[np.ndarray, str]:
  """fn over x as one kernel rendered by `ren` (or by `renderer`, compiled by `ren`'s device), run on the CPU device; (result,
  rendered source)."""
  items, _, _ = create_schedule([fn(Tensor(np.zeros_like(x))).uop])
  (item,) = [it for it in items if it.ast.op is Ops.SINK]
  dev = device(ren)
  spec = get_program(item.ast, renderer or dev.renderer)
  prg = dev.runtime(spec.arg.name, dev.compiler.compile(program_source(spec)))
  out, inp = dev.allocator.alloc(x.nbytes), dev.allocator.alloc(x.nbytes)
  dev.allocator._copyin(inp, memoryview(x).cast("B"))
  prg(out, inp, global_size=spec.arg.global_size, vals=launch_vals(spec.arg, {}), wait=True)   # its lifted literals
  got = np.empty_like(x)
  dev.allocator._copyout(memoryview(got).cast("B"), out)
  return got, program_source(spec)

def _ulps(got: np.ndarray, x: np.ndarray, exact_fn) -> float:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    exact = exact_fn(x.astype(np.float64))
    e32 = exact.astype(np.float32)
  finite = np.isfinite(e32) & (e32 != 0)
  # everything else (inf, NaN, an exact or flushed zero) must come out bit-for-bit as float64 rounded to float32
  np.testing.assert_array_equal(got[~finite], e32[~finite])
  return float((np.abs(got[finite].astype(np.float64) - exact[finite]) / np.spacing(np.abs(e32[finite])).astype(np.float64)).max())

@pytest.mark.parametrize("ren", RENDERERS)
def test_exp2_within_one_and_a_bit_ulp(ren):
  got, src = _run(ren, lambda t: t.exp2(), EXP2_X)
  assert not re.search(r"exp2", src), "a libm/intrinsic exp2 call was left in the kernel"
  assert _ulps(got, EXP2_X, np.exp2) <= 1.5

@pytest.mark.parametrize("ren", RENDERERS)
def test_log2_within_three_ulp(ren):
  got, src = _run(ren, lambda t: t.log2(), LOG2_X)
  assert not re.search(r"log2", src), "a libm/intrinsic log2 call was left in the kernel"
  assert _ulps(got, LOG2_X, np.log2) <= 3.0

def test_exp_log_and_softmax_through_tensors():
  x = gen.standard_normal((64, 100)).astype(np.float32) * 10
  np.testing.assert_allclose(Tensor(x).exp().numpy(), np.exp(x.astype(np.float64)), rtol=2e-6)
  np.testing.assert_allclose(Tensor(np.abs(x) + 1e-3).log().numpy(), np.log(np.abs(x).astype(np.float64) + 1e-3), rtol=3e-6, atol=1e-7)
  e = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)

def test_exp2_polynomial_is_degree_six():
  # a near-minimax degree 6 (within 4e-9 relative on |f| <= 1/2): one multiply-add fewer than the Taylor series of degree 7
  from core.ir.dtype import dtypes
  from core.ir.ops import UOp
  from core.codegen.decompose import fast_exp2
  e = fast_exp2(UOp.variable("x", -1.0, 1.0, dtypes.float32))
  assert sum(u.op is Ops.MULACC for u in e.toposort()) == 6

def _exact_products(e) -> list[float]:
  """Every float multiply's exact (float64) product in e, a graph of constants, evaluated node by node in its own dtypes."""
  import struct
  from core.ir.alu import exec_alu
  from core.ir.dtype import dtypes
  val, prods = {}, []
  for u in e.toposort():
    s = [val[x] for x in u.src]
    if u.op is Ops.CONST: val[u] = u.arg
    elif u.op is Ops.BITCAST:
      fmt = lambda d: "<f" if dtypes.is_float(d) else "<i"
      val[u] = struct.unpack(fmt(u.dtype), struct.pack(fmt(u.src[0].dtype), s[0]))[0]
    else:
      if u.op in (Ops.MUL, Ops.MULACC) and dtypes.is_float(u.dtype): prods.append(float(s[0]) * float(s[1]))
      val[u] = exec_alu(u.op, u.dtype, tuple(s))
  return prods

@pytest.mark.parametrize("x", [float("-inf"), -1e30, -300.0, -254.0])
def test_exp2_far_below_range_takes_no_subnormal_product(x):
  # a softmax's masked lanes are exp(-inf): a product whose exact value is a subnormal costs a microcode assist on x86 (a causal
  # 12x256x256 softmax took 1.26 ms against 0.80 unmasked), so far below the range 2**n's factors are 0.0 and every product is 0
  from core.ir.dtype import dtypes
  from core.ir.ops import UOp
  from core.codegen.decompose import fast_exp2
  prods = _exact_products(fast_exp2(UOp.const(dtypes.float32, x)))
  assert prods and all(p == 0 or abs(p) >= 2.0 ** -126 for p in prods), prods
