"""A fused row kernel's row max folds ROW_MAX_VECTORS vectors a loop step (heuristic._row_pass), twice a row sum's: a max that keeps
NaNs is two dependent instructions on a CPU (vmaxps + vfixupimmps on AVX-512), so its loop-carried step waits twice an add's
latency. Softmax's row of 1000 on 16 lanes (63 padded vectors) takes 9 a step, was 3; layernorm's sums keep theirs. Values from
numpy on AVX2-like and AVX-512-like renderers."""
from __future__ import annotations
import copy
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_uops
from core.codegen.opt import Kernel
from core.codegen.opt import heuristic
from core.codegen.opt.heuristic import hand_coded
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(31)

def _item(t: Tensor):
  (item,) = [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]
  return item

def _max_step_loads(item, rnd) -> int:
  """Vector loads of the input folded into the row max's accumulator per loop step (the optimizer's MAX: renderer rules off)."""
  rnd = copy.copy(rnd)
  rnd.extra_matcher = None
  uops = list(program_uops(get_program(item.ast, rnd)))
  upds = [u for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_REG and u.src[1].op is Ops.MAX]
  # one max loop, or two where the next row's max runs ahead (Renderer.max_ahead: the first row's and the next's), alike
  (n,) = {len({u for u in upd.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM and
                u.dtype.count > 1}) for upd in upds}
  return n

def _softmax_ref(x: np.ndarray) -> np.ndarray:
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

@pytest.mark.parametrize("simd_bytes", [64, 32])
def test_softmax_row_max_takes_more_vectors_a_step(simd_bytes):
  # 1000 on 16 lanes: 63 padded (masked) vectors, 9 a step (3 with a sum's 4); on 8 lanes, or 16 without masked pad lanes
  # (8 lanes then: 125 vectors), 5 a step either way
  item = _item(Tensor(rng.standard_normal((64, 1000)).astype(np.float32)).softmax(-1))
  rnd = host_renderer(simd_bytes)
  assert _max_step_loads(item, rnd) == (9 if simd_bytes == 64 and rnd.masked_vectors else 5)

def test_row_sums_keep_their_vectors_a_step(monkeypatch):
  # layernorm's two sums: the same opts whatever a row max would take
  x, w, b = (Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((64, 1024), (1024,), (1024,)))
  item = _item(x.layernorm(-1) * w + b)
  rnd = host_renderer(64)
  new = hand_coded(Kernel(item.ast, rnd)).applied
  monkeypatch.setattr(heuristic, "ROW_MAX_VECTORS", 1)
  assert hand_coded(Kernel(item.ast, rnd)).applied == new

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("rows, cols", [(33, 1000), (7, 1001), (16, 256), (5, 96), (3, 4100), (2, 7000)])   # 7000: over the scratch row
def test_softmax_and_log_softmax_values(simd_bytes, rows, cols):
  x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
  x[1, cols // 3] = 40.0   # a row max far from the rest
  rnd = host_renderer(simd_bytes)
  # log_softmax: the float32 row sum's relative error (a few 1e-6 over thousands of terms) is an absolute one in its log
  for fn, ref, atol in ((lambda t: t.softmax(-1), _softmax_ref(x), 1e-6), (lambda t: t.log_softmax(-1), np.log(_softmax_ref(x)), 1e-5)):
    item = _item(fn(Tensor(x)))
    got, _ = run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)
    np.testing.assert_allclose(got.reshape(x.shape), ref, rtol=1e-5, atol=atol)

def test_row_max_values_with_nans():
  x = rng.standard_normal((6, 1000)).astype(np.float32)
  x[1, 500], x[2, 0], x[3, 999], x[4] = np.nan, np.nan, np.nan, -np.inf
  item = _item(Tensor(x).softmax(-1))
  rnd = host_renderer(64)
  got, _ = run_ast(item, hand_coded(Kernel(item.ast, rnd)).ast, rnd)
  assert np.isnan(got.reshape(x.shape)[1:5]).all() and not np.isnan(got.reshape(x.shape)[[0, 5]]).any()
  np.testing.assert_allclose(got.reshape(x.shape)[[0, 5]], _softmax_ref(x[[0, 5]]), rtol=1e-5, atol=1e-7)
