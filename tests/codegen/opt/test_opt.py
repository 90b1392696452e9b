"""The kernel optimizer: every Opt gives the NOOPT numbers, invalid ones raise, the expander vectorizes, BEAM caches its pick."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.device.registry import Device
from core.schedule.kernelize import create_schedule
from core.engine.run import buffer_of
from core.codegen.program import get_program
from opt_helpers import run_ast
from core.codegen.lowerer import lower_kernel
from core.codegen.opt import Kernel, Opt, OptOps, KernelOptError, apply_opts
from core.codegen.opt.heuristic import hand_coded
from core.codegen.opt.expander import expand_kernel
from core.helpers import Context

U, R, T, S = OptOps.UPCAST, OptOps.UNROLL, OptOps.THREAD, OptOps.SWAP
rng = np.random.default_rng(0)

def kernel_of(fn, *shapes):
  """The last kernel of fn(*inputs) with its inputs realized, the inputs, and numpy's answer."""
  xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  ts = [Tensor(x).realize() for x in xs]
  items, _, _ = create_schedule([fn(*ts).uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  return items[0], fn(*xs)

def run_with(item, opts, renderer=None):
  return run_ast(item, apply_opts(item.ast, opts, renderer or Device[Device.DEFAULT].renderer), renderer)

def matmul(a, b): return a @ b
def conv_like(x, w):  # a 1-D convolution as a sum of shifted products: a reduce over a window
  if isinstance(x, Tensor): return sum(x[:, i:i + 30] * w[:, i:i + 1] for i in range(3))
  return sum(x[:, i:i + 30] * w[:, i:i + 1] for i in range(3))
def padded(x):
  if isinstance(x, Tensor): return x.pad(((1, 1), (2, 2))) * 2 + 1
  return np.pad(x, ((1, 1), (2, 2))) * 2 + 1

CASES = {
  "elementwise": (lambda a, b: a * b + 1, [(16, 32), (16, 32)]),
  "matmul": (matmul, [(16, 24), (24, 32)]),
  "matmul_odd": (matmul, [(6, 9), (9, 12)]),
  "reduce_rows": (lambda a: a.sum(axis=1), [(8, 64)]),
  "reduce_cols": (lambda a: a.sum(axis=0), [(64, 8)]),
  "reduce_all": (lambda a: a.max(), [(256,)]),
  "conv_like": (conv_like, [(4, 32), (4, 3)]),
  "padded": (padded, [(6, 12)]),
  "transposed": (lambda a: a.T * 3, [(12, 8)]),
}
# opts by axis role, applied when they fit: (role to find, op, amount)
OPT_SETS = [
  [("out", U, 4)], [("out", U, 2), ("out2", U, 3)], [("red", R, 4)], [("red", R, 0)], [("out", U, 4), ("red", R, 2)],
  [("out", U, 8), ("out2", U, 2), ("red", R, 4)], [("out", U, 6)], [("out", S, 0)],
]

def _resolve(k: Kernel, role: str, op: OptOps, amt: int) -> Opt:
  loops = [i for i, r in enumerate(k.axes) if r.arg[1] is AxisType.LOOP]
  reds = [i for i, r in enumerate(k.axes) if r.arg[1] is AxisType.REDUCE]
  pick = {"out": loops[-1:], "out2": loops[:-1][-1:], "red": reds[:1]}[role]
  if not pick: raise KernelOptError("no such axis")
  if op is S:
    if len(loops) < 2: raise KernelOptError("one loop")
    return Opt(S, loops[0], loops[-1])
  return Opt(op, pick[0], amt)

@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("opt_set", range(len(OPT_SETS)))
def test_opts_match_numpy(case, opt_set):
  fn, shapes = CASES[case]
  item, want = kernel_of(fn, *shapes)
  k = Kernel(item.ast, Device[Device.DEFAULT].renderer)
  applied = []
  for role, op, amt in OPT_SETS[opt_set]:
    try:
      o = _resolve(k, role, op, amt)
      k = k.apply(o)
      applied.append(o)
    except KernelOptError: pass
  got, _ = run_with(item, applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)

def test_hand_coded_opts_match_numpy_and_block_registers():
  item, want = kernel_of(matmul, (64, 48), (48, 64))
  k = hand_coded(Kernel(item.ast, Device[Device.DEFAULT].renderer))
  got, _ = run_with(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  if Device[Device.DEFAULT].renderer.supports_float4:
    assert sum(1 for o in k.applied if o.op is U) >= 2, k.applied   # two output axes in registers

def test_invalid_opts_raise():
  item, _ = kernel_of(matmul, (6, 9), (9, 12))
  k = Kernel(item.ast)
  types = k.types()
  red, loop = types.index(AxisType.REDUCE), types.index(AxisType.LOOP)
  with pytest.raises(KernelOptError, match="does not divide"): k.apply(Opt(U, loop, 4))
  with pytest.raises(KernelOptError, match="output axis"): k.apply(Opt(U, red, 3))
  with pytest.raises(KernelOptError, match="reduce axis"): k.apply(Opt(R, loop, 2))
  with pytest.raises(KernelOptError, match="axes"): k.apply(Opt(U, 99, 2))
  with pytest.raises(KernelOptError, match="thread pool"): k.apply(Opt(T, loop, 2))
  item, _ = kernel_of(matmul, (32, 32), (32, 32))
  k = Kernel(item.ast).apply(Opt(U, 0, 32)).apply(Opt(U, 0, 32))   # 1024 register elements: the limit
  with pytest.raises(KernelOptError, match="register elements"): k.apply(Opt(R, k.types().index(AxisType.REDUCE), 2))

def _loop_sizes(k: Kernel) -> list[int | None]: return [n for n, t in zip(k.sizes(), k.types()) if t is AxisType.LOOP]

def test_merge_joins_axes_every_address_walks_as_one():
  # a permute NCHW -> NHWC: h and w are one row-major extent in both the input and the output; n and c are not
  item, want = kernel_of(lambda x: x.transpose(0, 2, 3, 1) * 1.0 if isinstance(x, np.ndarray) else x.permute(0, 2, 3, 1).contiguous(), (2, 3, 5, 7))
  k = Kernel(item.ast)
  assert _loop_sizes(k) == [2, 5, 7, 3]
  merged = k.apply(Opt(OptOps.MERGE, 1, 2))
  assert _loop_sizes(merged) == [2, 35, 3]
  got, _ = run_with(item, merged.applied)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
  # then split again for vectors along the merged extent: still the permute
  got, _ = run_with(item, [Opt(OptOps.MERGE, 1, 2), Opt(U, 1, 5)])
  np.testing.assert_array_equal(got.reshape(want.shape), want)
  # w and c: the output walks them as one (w*3 + c), the input does not (c*35 + w)
  with pytest.raises(KernelOptError, match="not used as one"): k.apply(Opt(OptOps.MERGE, 2, 3))
  # a broadcast along one of them keeps them apart: b[j] reads j alone
  item, want = kernel_of(lambda a, b: a + b, (4, 6), (6,))
  with pytest.raises(KernelOptError, match="not used as one"): Kernel(item.ast).apply(Opt(OptOps.MERGE, 0, 1))
  # a pad: the output rows are longer than the input's (16 vs 12), so no one stride serves both
  item, want = kernel_of(padded, (6, 12))
  with pytest.raises(KernelOptError, match="not used as one"): Kernel(item.ast).apply(Opt(OptOps.MERGE, 0, 1))

def test_hand_coded_merges_a_1x1_convs_pixels():
  # 1x1 conv: out[n, o, h, w] = sum_c w[o, c] x[n, c, h, w]; h and w merge into 36 pixels (vectors along them, not along 6)
  def conv1x1(x, w):
    if isinstance(x, Tensor): return x.conv2d(w)
    return np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0])
  item, want = kernel_of(conv1x1, (2, 8, 6, 6), (4, 8, 1, 1))
  rnd = Device[Device.DEFAULT].renderer
  if rnd.has_local: pytest.skip("loops merge where the renderer has no workgroups (has_local): a GPU-style one launches them")
  k = hand_coded(Kernel(item.ast, rnd))
  assert any(o.op is OptOps.MERGE for o in k.applied), k.applied
  got, _ = run_with(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)

def test_hand_coded_strided_conv_reuses_gathered_input_across_output_channels():
  # stride 2: no load is contiguous along the output width; the input's gathered vectors are reused across output channels
  # (the axis the input does not use), not across output rows, which the weights would reuse
  def conv(x, w):
    if isinstance(x, Tensor): return x.conv2d(w, stride=2)
    win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return np.einsum("nchwij,ocij->nohw", win, w)
  item, want = kernel_of(conv, (2, 3, 37, 37), (8, 3, 3, 3))
  rnd = Device[Device.DEFAULT].renderer
  k = hand_coded(Kernel(item.ast, rnd))
  got, _ = run_with(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  if rnd.supports_float4 and rnd.threads:
    assert Kernel(item.ast).types()[:4] == [AxisType.LOOP] * 4   # n, cout, oh, ow
    assert [o for o in k.applied if o.op is U][1].axis == 1, k.applied   # after the width's vectors: the output channels

def _count_vector_mem(uops) -> int:
  return sum(1 for u in uops if u.op in (Ops.LOAD, Ops.STORE) and (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count > 1)

def test_expander_vectorizes_contiguous_loads_and_stores():
  item, _ = kernel_of(lambda a, b: a * b + 1, (16, 32), (16, 32))
  ast = apply_opts(item.ast, [Opt(U, 1, 8)])
  vec = expand_kernel(ast, vectorize=True)
  mem = [u for u in vec.toposort() if u.op in (Ops.LOAD, Ops.STORE)]
  assert len(mem) == 3 and _count_vector_mem(mem) == 3                     # 2 loads + 1 store, 8 lanes each
  assert all((u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count == 8 for u in mem)
  assert not any(u.op is Ops.RANGE and u.arg[1] is AxisType.UPCAST for u in vec.toposort())
  scalar = expand_kernel(ast, vectorize=False)                             # a renderer without vectors: 8 unrolled copies
  mem = [u for u in scalar.toposort() if u.op in (Ops.LOAD, Ops.STORE)]
  assert len(mem) == 24 and _count_vector_mem(mem) == 0

def test_expander_gathers_strided_loads_and_sums_unrolled_reduce_in_registers():
  item, _ = kernel_of(lambda a: a.T * 3, (12, 8))          # out[i, j] = a[j, i]: the load along the upcast axis is strided
  vec = expand_kernel(apply_opts(item.ast, [Opt(U, 1, 4)]), vectorize=True)
  loads = [u for u in vec.toposort() if u.op is Ops.LOAD]
  assert len(loads) == 4 and all(u.dtype.count == 1 for u in loads)
  assert any(u.op is Ops.STORE and u.src[1].dtype.count == 4 for u in vec.toposort())
  item, _ = kernel_of(lambda a: a.sum(axis=1), (8, 64))
  vec = expand_kernel(apply_opts(item.ast, [Opt(R, 1, 16)]), vectorize=True)
  reds = [u for u in vec.toposort() if u.op is Ops.REDUCE]
  assert len(reds) == 1 and reds[0].dtype.count == 16                      # one vector accumulator, folded after the loop
  # the fold: halves added as vectors (16 -> 8 -> 4 lanes, a half at least 16 bytes), then the last 4 lanes as scalars
  assert sorted(u.dtype.count for u in vec.toposort() if u.op is Ops.GEP) == [1, 1, 1, 1, 4, 4, 8, 8]

def test_thread_split_makes_gidx_blocks():
  class Threaded(type(Device[Device.DEFAULT].renderer)):  # type: ignore[misc]
    threads = 2
  item, _ = kernel_of(matmul, (16, 24), (24, 32))
  k = Kernel(item.ast, Threaded()).apply(Opt(T, 0, 4))
  assert [r.arg[1] for r in k.axes][:2] == [AxisType.GLOBAL, AxisType.LOOP] and k.sizes()[:2] == [4, 4]
  sink, gsize, _ = lower_kernel(expand_kernel(k.ast), None, threads=2)
  specials = [u for u in sink.toposort() if u.op is Ops.SPECIAL]
  assert gsize == (4, 1, 1) and [u.arg for u in specials] == ["gidx0"]
  assert not any(u.op is Ops.RANGE and u.arg[1] is AxisType.GLOBAL for u in sink.toposort())
  if Device[Device.DEFAULT].renderer.threads:   # a CPU with a thread pool runs the blocks
    got, spec = run_with(item, k.applied)
    a, b = [buffer_of(x).numpy().reshape(s) for x, s in zip(item.bufs[1:], [(16, 24), (24, 32)])]
    np.testing.assert_allclose(got.reshape(16, 32), a @ b, rtol=1e-4, atol=1e-4)
    assert spec.arg.global_size == (4, 1, 1)

def test_beam_finds_caches_and_reuses_an_opt(tmp_path, monkeypatch):
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path))
  from core.codegen.opt.search import beam_search
  item, want = kernel_of(matmul, (32, 32), (32, 32))
  rnd = Device[Device.DEFAULT].renderer
  k = beam_search(Kernel(item.ast, rnd), 2, max_candidates=10)
  files = list((tmp_path / "beam").iterdir())
  assert len(files) == 1
  got, _ = run_with(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  # the second search reads the cache: the same opts without timing anything
  import core.codegen.opt.search as search
  monkeypatch.setattr(search, "Timer", None)
  assert beam_search(Kernel(item.ast, rnd), 2).applied == k.applied

def test_beam_env_goes_through_get_program(tmp_path, monkeypatch):
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path))
  import core.codegen.opt.search as search
  real = search.beam_search
  monkeypatch.setattr(search, "beam_search", lambda k, amt: real(k, amt, max_candidates=4))
  item, want = kernel_of(lambda a, b: a * b + 1, (64, 64), (64, 64))
  with Context(BEAM=1):
    spec = get_program(item.ast, Device[Device.DEFAULT].renderer)
  assert (tmp_path / "beam").is_dir()
  assert spec.arg.name == item.ast.arg

def test_interleave_deals_the_blocks_out_and_keeps_the_numbers():
  # INTERLEAVE: block g does block (g mod n/amt) * amt + g div n/amt's work (6 blocks on 3 threads: 0 3 1 4 2 5)
  import copy
  rnd = copy.copy(Device["CPU"].renderer)
  rnd.threads = 3
  item, want = kernel_of(lambda a: a * 2 + 1, (6, 40))
  k0 = Kernel(item.ast, rnd).apply(Opt(T, 0, 6))
  k = k0.apply(Opt(OptOps.INTERLEAVE, 0, 3))
  if Device.DEFAULT == "CPU":   # the kernels run on the default device: the CPU renderer's on the CPU only
    got, _ = run_ast(item, k.ast, rnd)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6)
  (g,) = k.of_type(AxisType.GLOBAL)
  st = next(u for u in k.ast.toposort() if u.op is Ops.STORE)
  from core.ir.symbolic import simplify
  from core.ir.ops import UOp
  zero = {r: UOp.const(r.dtype, 0) for r in k.axes if r is not g}
  assert [simplify(st.src[0].src[1].substitute({**zero, g: UOp.const(g.dtype, b)})).arg // 40 for b in range(6)] == [0, 3, 1, 4, 2, 5]
  for bad in (Opt(OptOps.INTERLEAVE, 1, 3), Opt(OptOps.INTERLEAVE, 0, 4), Opt(OptOps.INTERLEAVE, 0, 6)):   # a loop; 6 % 4; one run each
    with pytest.raises(KernelOptError): k0.apply(bad)
  with pytest.raises(KernelOptError): k.apply(Opt(OptOps.INTERLEAVE, 0, 3))   # dealt already
