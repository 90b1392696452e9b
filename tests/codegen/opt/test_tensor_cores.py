"""The TC option: matmuls and convolutions computed by a renderer's tensor core (Ops.WMMA), run on the PYTHON device, whose
interpreter executes WMMA lane by lane from the same layout description a real target's renderer relies on (PythonRenderer(tc=
"METAL") / PYTHON_TC=NV). Results are compared with numpy."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.helpers import Context
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType
from core.device.tensor_core import TENSOR_CORES, LaneLayout, tensor_core
from core.device.python import PythonRenderer, PythonProgram, run_wmma
from core.codegen.opt import Kernel, Opt, OptOps, KernelOptError
from core.codegen.opt.heuristic import hand_coded, TC
from core.codegen.opt.tc import lane_index
from core.codegen.program import get_program, program_uops, program_source
from core.engine.run import buffer_of
from core.schedule.kernelize import create_schedule

rng = np.random.default_rng(11)

def kernel(fn, *xs: np.ndarray):
  items, _, _ = create_schedule([fn(*[Tensor(x).realize() for x in xs]).uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  return items[0]

def run(item, renderer: PythonRenderer, opts: list[Opt] | None = None) -> tuple[np.ndarray, list[UOp]]:
  """The kernel's output after one run on the PYTHON interpreter with `opts` (None: the hand-coded heuristic), and its uops."""
  k = Kernel(item.ast, renderer)
  if opts is None: k = hand_coded(k)
  else:
    for o in opts: k = k.apply(o)
  p = get_program(k.ast, renderer, optimize=False)
  bufs = [buffer_of(b) for b in item.bufs]
  raw = [np.ascontiguousarray(b.numpy()).view(np.uint8).reshape(-1).copy() if b.is_allocated() else np.zeros(b.nbytes, np.uint8) for b in bufs]
  PythonProgram(p.arg.name, program_source(p).encode())(*raw, global_size=p.arg.global_size, local_size=p.arg.local_size)
  return raw[0].view(np.dtype(bufs[0].dtype.fmt)), list(program_uops(p))

def wmmas(uops: list[UOp]) -> list[UOp]: return [u for u in uops if u.op is Ops.WMMA]

# *** the layouts ***

@pytest.mark.parametrize("tc", [tc for tcs in TENSOR_CORES.values() for tc in tcs], ids=lambda tc: tc.key)
def test_layouts_are_one_to_one(tc):
  for lay in (tc.a, tc.b, tc.c):
    seen = {lay.coords(lane, e) for lane in range(tc.threads) for e in range(lay.elements)}
    assert seen == {(r, c) for r in range(lay.rows) for c in range(lay.cols)}
    assert all(lay.owner(*lay.coords(lane, e)) == (lane, e) for lane in range(tc.threads) for e in range(lay.elements))

def test_nv_layout_is_the_ptx_isa_table():
  # PTX ISA "Matrix Fragments for mma.m16n8k16": groupID = lane >> 2, threadID_in_group = lane % 4
  tc = tensor_core("NV:m16n8k16:float16:float32")
  for lane in range(32):
    g, t = lane >> 2, lane % 4
    assert [tc.a.coords(lane, i) for i in range(8)] == [(g + 8 * (i // 2 % 2), 2 * t + i % 2 + 8 * (i // 4)) for i in range(8)]
    assert [tc.b.coords(lane, i) for i in range(4)] == [(2 * t + i % 2 + 8 * (i // 2), g) for i in range(4)]
    assert [tc.c.coords(lane, i) for i in range(4)] == [(g + 8 * (i // 2), 2 * t + i % 2) for i in range(4)]

def test_metal_layout_pairs_neighbours():
  # simdgroup 8x8: each lane's two elements are neighbours in one row; the 32 lanes tile the matrix
  tc = tensor_core("METAL:m8n8k8:float16:float32")
  for lane in range(32):
    (r0, c0), (r1, c1) = tc.a.coords(lane, 0), tc.a.coords(lane, 1)
    assert (r1, c1) == (r0, c0 + 1) and c0 % 2 == 0
  assert tc.a.coords(0, 0) == (0, 0) and tc.a.coords(1, 0) == (0, 2) and tc.a.coords(2, 0) == (1, 0) and tc.a.coords(8, 0) == (0, 4)

def test_bad_layout_is_refused():
  with pytest.raises(ValueError, match="one-to-one"): LaneLayout(4, 4, (("r", 0), ("r", 0)), (("c", 0), ("c", 1))).check()

@pytest.mark.parametrize("key", ["METAL:m8n8k8:float16:float32", "NV:m16n8k16:float16:float32"])
def test_lane_index_expression_matches_layout(key):
  from core.ir.symbolic import symbolic
  from core.ir.pattern import graph_rewrite
  tc = tensor_core(key)
  lane = UOp.range(tc.threads, 0, AxisType.LOCAL)
  for lay in (tc.a, tc.b, tc.c):
    for e in range(lay.elements):
      for dim, pos in (("r", 0), ("c", 1)):
        expr = lane_index(lay, lane, e, dim)
        got = [graph_rewrite(expr.substitute({lane: UOp.const(dtypes.index, ln)}), symbolic).arg for ln in range(tc.threads)]
        assert got == [lay.coords(ln, e)[pos] for ln in range(tc.threads)]

@pytest.mark.parametrize("key", ["METAL:m8n8k8:float16:float32", "METAL:m8n8k8:float32:float32", "NV:m16n8k16:float16:float32"])
def test_run_wmma_is_a_warp_matmul(key):
  # fragments scattered from whole matrices by the layout: two warps' worth, so the warps must not mix
  tc = tensor_core(key)
  M, N, K = tc.dims
  A, B, C = rng.standard_normal((2, M, K)), rng.standard_normal((2, K, N)), rng.standard_normal((2, M, N))
  def frags(mats, lay):
    return np.array([[mats[w][lay.coords(ln, e)] for e in range(lay.elements)] for w in range(2) for ln in range(tc.threads)])
  A16, B16 = A.astype(np.float16).astype(np.float64), B.astype(np.float16).astype(np.float64)
  d = run_wmma(key, frags(A16, tc.a), frags(B16, tc.b), frags(C, tc.c), 2 * tc.threads)
  want = frags(A16 @ B16 + C, tc.c)
  np.testing.assert_allclose(d, want, rtol=1e-6, atol=1e-5)

# *** the option on matmuls and convolutions ***

MATMULS = [(32, 48, 16), (16, 16, 8), (20, 30, 12), (9, 17, 5)]

@pytest.mark.parametrize("vendor", ["METAL", "NV"])
@pytest.mark.parametrize("shape", MATMULS, ids=lambda s: "x".join(map(str, s)))
def test_half_matmul_float_acc(vendor, shape):
  m, k, n = shape
  a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
  item = kernel(lambda x, y: x.float() @ y.float(), a, b)
  out, uops = run(item, PythonRenderer(tc=vendor))
  assert len(wmmas(uops)) == 1 and wmmas(uops)[0].arg.startswith(f"{vendor}:")
  np.testing.assert_allclose(out.reshape(m, n), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("vendor", ["METAL", "NV"])
def test_half_matmul_half_out(vendor):
  # half @ half sums in float: the product rounded to half and widened is what the tensor core computes exactly
  a, b = rng.standard_normal((24, 40)).astype(np.float16), rng.standard_normal((40, 16)).astype(np.float16)
  out, uops = run(kernel(lambda x, y: x @ y, a, b), PythonRenderer(tc=vendor))
  assert wmmas(uops)
  np.testing.assert_allclose(out.reshape(24, 16).astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=2e-3, atol=2e-2)

def test_float_matmul_uses_the_float_tensor_core():
  a, b = rng.standard_normal((16, 24)).astype(np.float32), rng.standard_normal((24, 40)).astype(np.float32)
  out, uops = run(kernel(lambda x, y: x @ y, a, b), PythonRenderer(tc="METAL"))
  assert [u.arg for u in wmmas(uops)] == ["METAL:m8n8k8:float32:float32"]
  np.testing.assert_allclose(out.reshape(16, 40), a @ b, rtol=1e-5, atol=1e-5)

def test_float_matmul_has_no_nv_tensor_core():
  a, b = rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((16, 16)).astype(np.float32)
  item = kernel(lambda x, y: x @ y, a, b)
  with pytest.raises(KernelOptError, match="float16"): Kernel(item.ast, PythonRenderer(tc="NV")).apply(Opt(OptOps.TC, 0))
  out, uops = run(item, PythonRenderer(tc="NV"))
  assert not wmmas(uops)
  np.testing.assert_allclose(out.reshape(16, 16), a @ b, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("vendor", ["METAL", "NV"])
def test_matmul_with_bias_and_relu_epilogue(vendor):
  a, b = rng.standard_normal((16, 32)).astype(np.float16), rng.standard_normal((32, 24)).astype(np.float16)
  bias = rng.standard_normal(24).astype(np.float32)
  out, uops = run(kernel(lambda x, y, z: (x.float() @ y.float() + z).relu(), a, b, bias), PythonRenderer(tc=vendor))
  assert wmmas(uops)
  np.testing.assert_allclose(out.reshape(16, 24), np.maximum(a.astype(np.float32) @ b.astype(np.float32) + bias, 0), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("vendor", ["METAL", "NV"])
def test_batched_matmul(vendor):
  a, b = rng.standard_normal((3, 16, 16)).astype(np.float16), rng.standard_normal((3, 16, 8)).astype(np.float16)
  out, uops = run(kernel(lambda x, y: x.float() @ y.float(), a, b), PythonRenderer(tc=vendor))
  assert wmmas(uops)
  np.testing.assert_allclose(out.reshape(3, 16, 8), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("vendor", ["METAL", "NV"])
def test_conv2d(vendor):
  x, w = rng.standard_normal((2, 16, 6, 6)).astype(np.float16), rng.standard_normal((16, 16, 3, 3)).astype(np.float16)
  out, uops = run(kernel(lambda x, w: x.float().conv2d(w.float()), x, w), PythonRenderer(tc=vendor))
  assert wmmas(uops)
  xf, wf = x.astype(np.float64), w.astype(np.float64)
  want = np.zeros((2, 16, 4, 4))
  for i in range(3):
    for j in range(3): want += np.einsum("bchw,oc->bohw", xf[:, :, i:i + 4, j:j + 4], wf[:, :, i, j])
  np.testing.assert_allclose(out.reshape(2, 16, 4, 4), want, rtol=1e-4, atol=1e-4)

# *** what it refuses ***

def test_refuses_what_is_not_a_product_of_loads():
  a, b = rng.standard_normal((16, 16)).astype(np.float16), rng.standard_normal((16, 16)).astype(np.float16)
  r = PythonRenderer(tc="METAL")
  with pytest.raises(KernelOptError, match="not loads"):
    Kernel(kernel(lambda x, y: (x.float() + 1) @ y.float(), a, b).ast, r).apply(Opt(OptOps.TC, 0))
  with pytest.raises(KernelOptError, match="not a sum of products"): Kernel(kernel(lambda x: x.float().sum(1), a).ast, r).apply(Opt(OptOps.TC, 0))
  with pytest.raises(KernelOptError, match="tensor cores"): Kernel(kernel(lambda x, y: x @ y, a, b).ast, PythonRenderer()).apply(Opt(OptOps.TC, 0))

def test_refuses_padding_that_more_than_doubles():
  a, b = rng.standard_normal((3, 16)).astype(np.float16), rng.standard_normal((16, 16)).astype(np.float16)
  with pytest.raises(KernelOptError, match="more than doubles"):
    Kernel(kernel(lambda x, y: x.float() @ y.float(), a, b).ast, PythonRenderer(tc="METAL")).apply(Opt(OptOps.TC, 0))

def test_tc_first_and_no_local_after():
  a, b = rng.standard_normal((16, 16)).astype(np.float16), rng.standard_normal((16, 16)).astype(np.float16)
  k = Kernel(kernel(lambda x, y: x.float() @ y.float(), a, b).ast, PythonRenderer(tc="METAL"))
  with pytest.raises(KernelOptError, match="first"): k.apply(Opt(OptOps.LOCAL, 0, 2)).apply(Opt(OptOps.TC, 0))
  t = k.apply(Opt(OptOps.TC, 0))
  loops = [i for i, r in enumerate(t.axes) if r.arg[1] is AxisType.LOOP]
  with pytest.raises(KernelOptError, match="innermost"): t.apply(Opt(OptOps.LOCAL, loops[0], 2))

def test_upcast_after_tc_unrolls_the_wmma():
  a, b = rng.standard_normal((32, 16)).astype(np.float16), rng.standard_normal((16, 16)).astype(np.float16)
  item = kernel(lambda x, y: x.float() @ y.float(), a, b)
  t = Kernel(item.ast, PythonRenderer(tc="METAL")).apply(Opt(OptOps.TC, 0))
  loop = next(i for i, r in enumerate(t.axes) if r.arg[1] is AxisType.LOOP and (r.src[0].arg or 0) % 2 == 0)
  out, uops = run(item, PythonRenderer(tc="METAL"), [Opt(OptOps.TC, 0), Opt(OptOps.UPCAST, loop, 2)])
  assert len(wmmas(uops)) == 2
  np.testing.assert_allclose(out.reshape(32, 16), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-5)

def test_tc_setting_turns_it_off():
  a, b = rng.standard_normal((16, 16)).astype(np.float16), rng.standard_normal((16, 16)).astype(np.float16)
  item = kernel(lambda x, y: x.float() @ y.float(), a, b)
  assert hand_coded(Kernel(item.ast, PythonRenderer(tc="METAL"))).applied[:1] == (Opt(OptOps.TC, 0),)
  with Context(TC=0): assert not any(o.op is OptOps.TC for o in hand_coded(Kernel(item.ast, PythonRenderer(tc="METAL"))).applied)
  assert int(TC) == 1

def test_python_tc_names_a_vendor():
  assert [t.key for t in PythonRenderer(tc="NV").tensor_cores] == ["NV:m16n8k16:float16:float32"]   # numpy has no bfloat16
  assert PythonRenderer(tc="").tensor_cores == ()
  with pytest.raises(ValueError, match="METAL"): PythonRenderer(tc="AMD")

# *** host builds (the MOCK devices' way of running a GPU kernel): each lane computes its WMMA results alone ***

@pytest.mark.parametrize("vendor", ["METAL", "NV"])
@pytest.mark.parametrize("shape", [(32, 48, 16), (20, 30, 12)], ids=lambda s: "x".join(map(str, s)))
def test_host_build_lowers_wmma_per_lane(vendor, shape):
  from core.codegen.hostbuild import host_build
  m, k, n = shape
  a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
  item = kernel(lambda x, y: x.float() @ y.float(), a, b)
  p = get_program(Kernel(item.ast, PythonRenderer(tc=vendor)).apply(Opt(OptOps.TC, 0)).ast, PythonRenderer(tc=vendor), optimize=False)
  assert wmmas(list(program_uops(p)))
  build = host_build(p.arg.name, program_uops(p))
  out = np.zeros((m, n), np.float32)
  bufs = [out, np.ascontiguousarray(a), np.ascontiguousarray(b)]   # the kernel's buffers: the output, then a and b
  build.run([x.ctypes.data for x in bufs], tuple(p.arg.global_size), tuple(p.arg.local_size))
  np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-5)
