"""A mask made of indices (attention's causal mask, folded from aranges by count_fold) is vector math in its kernel: the
int32 arange's casts move onto the index math (symbolic), which then simplifies to `row < col` and the expander computes
the lanes of `col` as one broadcast plus a constant vector (expander._index_lanes) instead of one scalar compare per lane."""
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from core.ir.symbolic import symbolic
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_uops
from tests.codegen.opt.opt_helpers import host_renderer
from tests.schedule.test_row_fusion import _np_sdpa

@pytest.mark.parametrize("L,S", [(256, 256), (37, 37), (1000, 1000), (5, 37), (37, 5)])
@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_matches_numpy(L, S, causal):
  rng = np.random.default_rng(L * 7 + S)
  heads, e = (2, 8) if L * S > 100_000 else (3, 16)
  q = rng.standard_normal((1, heads, L, e)).astype(np.float32)
  k, v = (rng.standard_normal((1, heads, S, e)).astype(np.float32) for _ in range(2))
  out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=causal).numpy()
  np.testing.assert_allclose(out, _np_sdpa(q, k, v, causal), rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("simd_bytes", [32, 64])   # AVX2 and AVX-512 hosts
def test_causal_mask_compares_in_vectors(simd_bytes):
  rng = np.random.default_rng(3)
  q, k, v = (Tensor(rng.standard_normal((1, 2, 64, 16)).astype(np.float32)).realize() for _ in range(3))
  items = [it for it in create_schedule([q.scaled_dot_product_attention(k, v, is_causal=True).uop])[0] if it.ast.op is Ops.SINK]
  softmax = [it for it in items if any(u.op is Ops.EXP2 for u in it.ast.toposort())]
  assert len(softmax) == 1
  uops = program_uops(get_program(softmax[0].ast, host_renderer(simd_bytes)))
  cmps = [u for u in uops if u.op is Ops.CMPLT and dtypes.is_int(u.src[0].dtype)]
  # before: 16 scalar compares of `(r//16+1)*16 + r%16+1 - 17` per vector of the row, in every pass over it
  assert cmps and all(u.dtype.count > 1 for u in cmps), [u.dtype for u in cmps]

def test_cast_index_math_moves_onto_indices():
  r = UOp.range(256, 1)
  i32 = lambda u: u.cast(dtypes.int32)   # noqa: E731
  # an int32 arange folded from running sums: (r//16 + 1)*16 + (r%16 + 1) - 17 is r
  e = i32(r // 16 + 1) * 16 + i32(r % 16 + 1) + -17
  assert graph_rewrite(e, symbolic) is i32(r)
  c = UOp.range(16, 2)
  cmp = graph_rewrite(e < i32(c * 16 + 3), symbolic)
  assert cmp.op is Ops.CMPLT and cmp.src[0] is r and cmp.src[0].dtype is dtypes.index

def test_cast_math_that_may_wrap_stays_int32():
  x = UOp.variable("x", 0, 2**31 - 1)
  e = x.cast(dtypes.int32) * 4
  # x*4 leaves int32's range: the int32 product wraps, the index product would not
  assert graph_rewrite(e, symbolic).op is Ops.MUL and graph_rewrite(e, symbolic).dtype is dtypes.int32
  assert graph_rewrite(e, symbolic).src[0].op is Ops.CAST
