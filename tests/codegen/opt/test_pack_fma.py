"""PACK (a reused input copied into a contiguous thread-private panel) and fused multiply-add accumulator updates: each gives
numpy's numbers, lands where it should in the program, and the heuristic picks it for matmul and conv shapes."""
from __future__ import annotations
import copy
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.ir.dtype import AddrSpace
from core.device.registry import Device
from core.schedule.kernelize import create_schedule
from opt_helpers import run_ast, kernel_of as _kernel_of
from core.codegen.lowerer import pm_fuse_mulacc
from core.codegen.opt import Kernel, Opt, OptOps, KernelOptError
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import program_uops

U, R, S, P = OptOps.UPCAST, OptOps.UNROLL, OptOps.SWAP, OptOps.PACK
rng = np.random.default_rng(1)

def kernel_of(fn, *shapes): return _kernel_of(fn, *shapes, rng=rng)

def run(item, k: Kernel, renderer=None):
  return run_ast(item, k.ast, renderer or k.renderer)

def _loop(k: Kernel, size: int) -> int:
  return next(i for i, r in enumerate(k.axes) if r.arg[1] is AxisType.LOOP and r.src[0].arg == size)

def _pack_regs(spec) -> list:
  return [u for u in program_uops(spec) if u.op is Ops.DEFINE_REG and u.dtype.size > 1]

@pytest.mark.parametrize("name, fn, shapes, rows", [
  ("matmul", lambda a, b: a @ b, [(24, 40), (40, 32)], 24),
  ("matmul_bt", lambda a, b: a @ b.T, [(24, 40), (32, 40)], 24),     # the panel is the transpose of what b holds
])
def test_pack_matches_numpy_and_copies_once_per_column_block(name, fn, shapes, rows):
  item, want = kernel_of(fn, *shapes)
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  k = k.apply(Opt(U, _loop(k, 32), 8)).apply(Opt(U, _loop(k, rows), 4))
  k = k.apply(Opt(S, _loop(k, rows // 4), _loop(k, 4)))                      # column blocks outside the row loop
  row = _loop(k, rows // 4)
  packed = k.apply(Opt(P, row))
  assert [r.arg[1] for r in packed.axes].count(AxisType.OUTER) == 1              # one copy loop over the reduce (40)
  got, spec = run(item, packed)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  regs = _pack_regs(spec)
  assert len(regs) == 1 and regs[0].dtype.size == 40 * 8 and regs[0].dtype.addrspace is AddrSpace.REG
  if k.renderer.has_local: return   # a GPU-style renderer launches the column and row blocks (gidx): each work item copies its panel
  # the copy (a STORE into the panel) runs inside the column loop and before the row loop opens
  ranges = [u for u in program_uops(spec) if u.op is Ops.RANGE]
  pos = {u: i for i, u in enumerate(program_uops(spec))}
  copy = next(u for u in program_uops(spec) if u.op is Ops.STORE and u.src[0].src[0] is regs[0])
  row_rng = next(r for r in ranges if r.src[0].arg == rows // 4)
  col_rng = next(r for r in ranges if r.src[0].arg == 4 and pos[r] < pos[row_rng])
  assert pos[col_rng] < pos[copy] < pos[row_rng]

def test_pack_of_a_gated_load_keeps_the_padding():
  # the reused input is read through a PAD (a gated load): the copy reads through the gate, so the panel holds the zeros
  def fn(a, b):
    if isinstance(a, Tensor): return a @ b.pad(((1, 1), (0, 0)))
    return a @ np.pad(b, ((1, 1), (0, 0)))
  item, want = kernel_of(fn, (16, 16), (14, 32))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  assert any(u.op is Ops.INDEX and len(u.src) > 2 for u in k.ast.toposort())
  k = k.apply(Opt(U, _loop(k, 32), 8)).apply(Opt(U, _loop(k, 16), 4))
  k = k.apply(Opt(S, _loop(k, 4), _loop(k, 4) + 1))
  got, spec = run(item, k.apply(Opt(P, [i for i, r in enumerate(k.axes) if r.arg[1] is AxisType.LOOP][1])))
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  assert len(_pack_regs(spec)) == 1

def test_pack_refuses_kernels_without_a_reused_input():
  item, _ = kernel_of(lambda a, b: a * b + 1, (16, 32), (16, 32))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  with pytest.raises(KernelOptError, match="no input"): k.apply(Opt(P, 0))
  item, _ = kernel_of(lambda a, b: a @ b, (8, 8), (8, 8))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  with pytest.raises(KernelOptError, match="LOOP"): k.apply(Opt(P, k.types().index(AxisType.REDUCE)))
  # the copy loop PACK adds is the optimizer's own: splitting it (into vector lanes or thread blocks) is refused
  packed = k.apply(Opt(P, 0))
  outer = packed.types().index(AxisType.OUTER)
  with pytest.raises(KernelOptError, match="output axis"): packed.apply(Opt(U, outer, 2))
  with pytest.raises(KernelOptError): packed.apply(Opt(OptOps.THREAD, outer, 2))
  with pytest.raises(KernelOptError, match="no input"): packed.apply(Opt(P, packed.types().index(AxisType.LOOP)))  # already packed

def test_fused_multiply_add_in_reduce_updates():
  item, want = kernel_of(lambda a, b: a @ b, (16, 64), (64, 16))
  rnd = Device[Device.DEFAULT].renderer
  k = Kernel(item.ast, rnd).apply(Opt(U, 1, 4)).apply(Opt(R, 2, 4))
  got, spec = run(item, k)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  if rnd.extra_matcher is pm_fuse_mulacc:
    # four unrolled products per step: a chain of four multiply-adds into the accumulator, no separate multiplies left
    assert sum(1 for u in program_uops(spec) if u.op is Ops.MULACC) == 4
    assert not any(u.op is Ops.MUL and u.dtype.scalar().name == "float32" for u in program_uops(spec))

def test_fuse_mulacc_leaves_other_updates_alone():
  item, want = kernel_of(lambda a: (a + 1).sum(axis=1), (8, 32))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  got, spec = run(item, k)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  assert not any(u.op is Ops.MULACC for u in program_uops(spec))

def _cpu_renderer():
  """The default device's renderer as on a 2-core AVX2 host (8 float32 lanes, 16 vector registers, 2 threads): the plans
  hand_coded makes depend on them (a.T @ b keeps one panel with 16 lanes or 8 threads; the register tile on the registers),
  so the plans asserted here are the same on every host."""
  rnd = Device[Device.DEFAULT].renderer
  if not (rnd.supports_float4 and rnd.threads >= 0 and not rnd.has_local): pytest.skip("a CPU-style renderer")
  rnd = copy.copy(rnd)
  rnd.simd_width, rnd.simd_regs, rnd.threads = 32, 16, 2
  return rnd

def _hand_coded_matmul_packs(shapes, tol: float):
  """hand_coded on a @ b of `shapes` packs a panel, and the kernel gives numpy's numbers."""
  item, want = kernel_of(lambda a, b: a @ b, *shapes)
  k = hand_coded(Kernel(item.ast, _cpu_renderer()))
  assert P in [o.op for o in k.applied], k.applied
  got, _ = run(item, k)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=tol, atol=tol)

def test_hand_coded_packs_matmul_and_unrolls_conv_window():
  rnd = _cpu_renderer()
  _hand_coded_matmul_packs([(64, 96), (96, 1024)], 1e-4)   # b's rows 4 KiB apart (a small b is read in place: _panel_in_place)
  # conv: the 3x3 window unrolled whole, output channels in registers, same numbers as the reference
  x, w = rng.standard_normal((2, 8, 10, 18)).astype(np.float32), rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
  items, _, _ = create_schedule([Tensor(x).realize().conv2d(Tensor(w).realize()).uop])
  k = hand_coded(Kernel(items[-1].ast, rnd))
  assert [o.amt for o in k.applied if o.op is R].count(0) == 2, k.applied
  got, _ = run(items[-1], k)
  win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))
  np.testing.assert_allclose(got.reshape(2, 8, 8, 16), np.einsum("nchwij,ocij->nohw", win, w), rtol=1e-4, atol=1e-4)

def test_hand_coded_packs_a_long_reduce_panel():
  # a 16-float panel of K=4096 is 256 KiB: unpacked, its rows sit a page apart in a few cache sets (a 1024x4096x1024
  # matmul ran at a third of the packed speed), so it is packed too; the pool threads' stacks hold it
  _hand_coded_matmul_packs([(32, 4096), (4096, 32)], 1e-3)
  a, b = rng.standard_normal((64, 4096)).astype(np.float32), rng.standard_normal((4096, 64)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-3, atol=1e-3)

def test_tile_splits_a_loop_with_the_inner_part_innermost():
  item, want = kernel_of(lambda a, b: a @ b, (32, 24), (24, 16))
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  t = k.apply(Opt(OptOps.TILE, _loop(k, 32), 8))
  loops = [r for r in t.axes if r.arg[1] is AxisType.LOOP]
  assert [r.src[0].arg for r in loops] == [4, 16, 8]   # rows outer part, the columns, then the rows' inner part
  got, _ = run(item, t)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  with pytest.raises(KernelOptError, match="LOOP"): k.apply(Opt(OptOps.TILE, k.types().index(AxisType.REDUCE), 4))

def test_hand_coded_packs_both_inputs_of_a_transposed_product():
  # a.T @ b reads a a whole row apart per reduce step: row blocks of it are packed once and reused by every column panel
  rnd = _cpu_renderer()
  # (192 rows: whole row tiles of AVX2's 2x6, test_transposed_tile; rows it pads are read in place)
  item, want = kernel_of(lambda a, b: a.T @ b, (256, 192), (256, 256))
  k = hand_coded(Kernel(item.ast, rnd))
  ops = [o.op for o in k.applied]
  assert ops.count(P) == 2 and OptOps.TILE in ops and S not in ops, k.applied
  got, spec = run(item, k)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  assert len(_pack_regs(spec)) == 2
  # a @ b (rows contiguous along the reduce axis) keeps the one-panel plan: its rows are not packed (its column panels may be
  # grouped, a TILE of the columns: test_panel_group)
  item, _ = kernel_of(lambda a, b: a @ b, (128, 96), (96, 1024))   # (a small b is read in place: _panel_in_place)
  ops = [o.op for o in hand_coded(Kernel(item.ast, rnd)).applied]
  assert ops.count(P) == 1
  # so does a short reduce (the MLP's weight gradients over a batch of 128): the row block's copy is not repaid
  item, _ = kernel_of(lambda a, b: a.T @ b, (128, 128), (128, 256))
  assert OptOps.TILE not in [o.op for o in hand_coded(Kernel(item.ast, rnd)).applied]
  a, b = rng.standard_normal((256, 200)).astype(np.float32), rng.standard_normal((256, 120)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a).T @ Tensor(b)).numpy(), a.T @ b, rtol=1e-3, atol=1e-3)
