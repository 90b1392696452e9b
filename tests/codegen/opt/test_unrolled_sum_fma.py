"""A float sum over register axes alone (a depthwise conv's 3x3 taps, unrolled whole) is summed in runs of
expander.UNROLLED_SUM_CHAIN terms, each an accumulator that a renderer with a fused multiply-add updates with one FMA per product
(lowerer.pm_fuse_mulacc), the runs added in a tree: every tap a MULACC where it was a multiply and an add. Values against numpy
in float64 on renderers with and without the FMA rules, and the program's MULACCs and adds counted."""
from __future__ import annotations
import copy
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops
from core.ir.dtype import dtypes
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, expander
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import program_uops
from opt_helpers import run_ast, host_renderer

rng = np.random.default_rng(31)

def _dw_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
  """relu(depthwise conv(x, w) + b), stride 1, 'same' padding, in float64."""
  k = w.shape[-1]
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
  return np.maximum(np.einsum("nchwij,cij->nchw", win, w[:, 0].astype(np.float64)) + b[:, None, None], 0)

def _dw_kernel(c: int, hw: int, k: int, rnd, dt=np.float32):
  """(the conv kernel's schedule item, its hand-coded Kernel on `rnd`, numpy's output); the padded input's copy is run."""
  x = rng.standard_normal((1, c, hw, hw)).astype(dt)
  w = rng.standard_normal((c, 1, k, k)).astype(dt)
  b = rng.standard_normal(c).astype(dt)
  out = Tensor(x).realize().conv2d(Tensor(w).realize(), Tensor(b).realize(), groups=c, padding=k // 2).relu()
  items, _, _ = create_schedule([out.uop])
  for it in items[:-1]: run_ast(it, hand_coded(Kernel(it.ast, rnd)).ast, rnd)
  return items[-1], hand_coded(Kernel(items[-1].ast, rnd)), _dw_ref(x, w, b)

@pytest.mark.parametrize("simd_bytes", [32, 64])
@pytest.mark.parametrize("c, hw, k", [(64, 24, 3), (144, 12, 3), (8, 56, 3)])   # whole-row tiles: the taps unrolled whole
def test_every_tap_one_mulacc(c, hw, k, simd_bytes):
  rnd = host_renderer(simd_bytes)
  item, kern, want = _dw_kernel(c, hw, k, rnd)
  got, spec = run_ast(item, kern.ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  uops = program_uops(spec)
  stores = [u for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  # the output vectors (whole rows, padded to vectors: stored masked, or lane by lane where the renderer masks none); k*k taps
  # each, every one fused
  vecs = len({s.src[1].src[0] if s.src[1].op is Ops.GEP else s.src[1] for s in stores})
  assert sum(u.op is Ops.MULACC for u in uops) == k * k * vecs
  assert not any(u.op is Ops.MUL and dtypes.is_float(u.dtype) for u in uops)
  # in runs of UNROLLED_SUM_CHAIN (short FMA chains, added in a tree): one accumulator each
  accs = [u for u in uops if u.op is Ops.DEFINE_REG and u.dtype.size == 1]
  assert len(accs) == -(-k * k // expander.UNROLLED_SUM_CHAIN) * vecs

@pytest.mark.parametrize("fma", [True, False])
@pytest.mark.parametrize("c, hw, k", [(64, 24, 3), (8, 20, 5), (16, 7, 3), (4, 9, 7)])
def test_values(c, hw, k, fma):
  # a renderer without pm_fuse_mulacc keeps each run's multiplies and adds (its accumulator starts at 0)
  rnd = copy.copy(host_renderer(32))
  if not fma: rnd.extra_matcher = None
  item, kern, want = _dw_kernel(c, hw, k, rnd)
  got, spec = run_ast(item, kern.ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  if not fma: assert not any(u.op is Ops.MULACC for u in program_uops(spec))

def test_float64_values():
  rnd = host_renderer(64)
  item, kern, want = _dw_kernel(8, 12, 3, rnd, np.float64)
  got, spec = run_ast(item, kern.ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-12, atol=1e-12)
