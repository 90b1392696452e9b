"""PADTO: an output axis rounded up to a multiple of a tile (the extra iterations load nothing and store nothing), so odd
sizes (1023, 1000) still get vector registers and packed panels."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.device.registry import Device
from opt_helpers import run_ast, kernel_of as _kernel_of
from core.codegen.opt import Kernel, Opt, OptOps, KernelOptError
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import program_uops

U, S, P, PT = OptOps.UPCAST, OptOps.SWAP, OptOps.PACK, OptOps.PADTO
rng = np.random.default_rng(3)

def kernel_of(fn, *shapes): return _kernel_of(fn, *shapes, rng=rng)

def _param_stores(spec) -> list:
  return [u for u in program_uops(spec) if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]

@pytest.mark.parametrize("opts", [
  [Opt(PT, 1, 16)],
  [Opt(PT, 1, 16), Opt(U, 1, 8), Opt(PT, 0, 4), Opt(U, 0, 4)],
  [Opt(PT, 1, 16), Opt(U, 1, 8), Opt(U, 1, 2), Opt(PT, 0, 4), Opt(U, 0, 4), Opt(S, 0, 1), Opt(P, 1)],
])
def test_padded_matmul_matches_numpy_and_gates_every_store(opts):
  item, want = kernel_of(lambda a, b: a @ b, (23, 37), (37, 29))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  for o in opts: k = k.apply(o)
  assert k.sizes()[:2] != [23, 29] and 37 in k.sizes()
  got, spec = run_ast(item, k.ast)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  stores = _param_stores(spec)
  assert stores and all(len(s.src[0].src) > 2 for s in stores)   # the padded columns and rows are never written

def test_padded_elementwise_kernel():
  item, want = kernel_of(lambda a, b: a * b + 1, (5, 29), (5, 29))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  axis = k.sizes().index(29)
  k = k.apply(Opt(PT, axis, 8)).apply(Opt(U, axis, 8))
  got, _ = run_ast(item, k.ast)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6)

def test_padto_refusals():
  item, _ = kernel_of(lambda a, b: a @ b, (24, 37), (37, 29))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  with pytest.raises(KernelOptError, match="no padding"): k.apply(Opt(PT, 0, 8))                 # 24 is a multiple of 8
  up = k.apply(Opt(U, 0, 8))
  with pytest.raises(KernelOptError, match="LOOP or REDUCE"): up.apply(Opt(PT, up.types().index(AxisType.UPCAST), 3))
  with pytest.raises(KernelOptError, match="doubles"): k.apply(Opt(PT, 1, 64))                    # 29 -> 64

def test_hand_coded_pads_odd_matmuls_and_packs():
  rnd = Device[Device.DEFAULT].renderer
  if not (rnd.supports_float4 and rnd.threads >= 0 and not rnd.has_local): pytest.skip("a CPU-style renderer")
  item, want = kernel_of(lambda a, b: a @ b, (61, 250), (250, 127))
  k = hand_coded(Kernel(item.ast, rnd))
  ops = [o.op for o in k.applied]
  assert ops.count(PT) == 2 and P in ops, k.applied
  got, _ = run_ast(item, k.ast)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-3, atol=1e-3)
  a, b = rng.standard_normal((125, 250)).astype(np.float32), rng.standard_normal((250, 1023)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-3, atol=1e-3)

def test_hand_coded_does_not_pad_without_a_packed_panel():
  # a product with no reused input to pack (an elementwise-times-reduce over one matrix): padding would only gather, unless the
  # renderer masks the padded lanes of whole vector loads (masked_vectors): then it pads, and no load is left lane by lane
  rnd = Device[Device.DEFAULT].renderer
  item, want = kernel_of(lambda a: (a * a).sum(axis=0), (40, 127))
  k = hand_coded(Kernel(item.ast, rnd))
  got, spec = run_ast(item, k.ast)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  if not rnd.masked_vectors:
    assert PT not in [o.op for o in k.applied], k.applied
  elif PT in [o.op for o in k.applied]:
    loads = [u for u in program_uops(spec) if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
    assert loads and all(u.dtype.count > 1 for u in loads), [u.dtype for u in loads]
