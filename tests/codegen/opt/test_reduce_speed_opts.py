"""Hand-coded opts for memory-bound work: row reductions vectorize along the reduce axis, column reductions and elementwise
kernels along the output, and big sums still match numpy (float64) after split_reduce and the optimizer."""
from __future__ import annotations
import copy
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
from core.device.registry import Device
from core.device.renderer import Renderer
from core.schedule.kernelize import create_schedule
from core.engine.run import buffer_of
from core.codegen.program import get_program, program_uops, program_source
from core.codegen.opt import Kernel, OptOps, apply_opts
from core.codegen.opt.kernel import range_size
from core.codegen.opt.heuristic import hand_coded, _divmod_in
from core.codegen.opt.expander import expand_kernel

U, R, T = OptOps.UPCAST, OptOps.UNROLL, OptOps.THREAD

class AVX2(Renderer):
  """The capabilities hand_coded reads, as on a 2-core AVX2 host: 8 float32 lanes, a pool of 2 threads (the rest the base's)."""
  supports_float4, simd_width, threads, has_local = True, 32, 2, False

def _kernels(t: Tensor) -> list:
  items, _, _ = create_schedule([t.uop])
  return [it for it in items if it.ast.op is Ops.SINK]

def _single_kernel(fn, *shapes, seed=0):
  rng = np.random.default_rng(seed)
  xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  ks = _kernels(fn(*[Tensor(x).realize() for x in xs]))
  assert len(ks) == 1, [k.ast.arg for k in ks]
  return ks[0], fn(*xs)

def _run(item, opts):
  """`item` run with the plan `opts` (made for AVX2 below) on the default device. A renderer without a pool still runs the
  plan's THREAD blocks: a CPU one (one core, CPU_THREADS=1) one after another, a GPU-style one (PYTHON) as its launch grid; the
  plan's later opts (a TILE of a block's rows) count on the split."""
  dev = Device[Device.DEFAULT]
  ren = dev.renderer
  if not ren.threads:
    ren = copy.copy(ren)
    ren.threads = AVX2.threads
  spec = get_program(apply_opts(item.ast, opts, ren), ren, optimize=False)
  bufs = [buffer_of(b) for b in item.bufs]
  for b in bufs:
    if not b.is_allocated(): b.allocate()
  dev.runtime(spec.arg.name, dev.compiler.compile_cached(program_source(spec)))(*[b._buf for b in bufs], global_size=spec.arg.global_size, wait=True)
  return bufs[0].numpy()

def _loads_by_width(sink) -> list[int]: return sorted(u.dtype.count for u in sink.toposort() if u.op is Ops.LOAD)

def test_row_sum_vectorizes_along_the_reduce_axis():
  # out[i] = sum_j a[i, j]: the load runs along j, the store along i. Lanes across i would be gathers of 8 rows
  item, want = _single_kernel(lambda a: a.sum(axis=1), (64, 4096))
  k = hand_coded(Kernel(item.ast, AVX2()))
  ops = {o.op: o.amt for o in k.applied}
  assert U not in ops and ops[R] == 32, k.applied        # 4 vectors of 8 lanes: independent accumulators
  assert ops[T] in (2, 4, 8, 16, 32, 64) and ops[T] % AVX2.threads == 0, k.applied   # equal blocks per thread
  assert _loads_by_width(expand_kernel(k.ast)) == [32]    # one contiguous vector load per iteration, no gathers
  got = _run(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)

def test_each_thread_block_reads_four_far_apart_rows_at_once():
  # a block of many rows: four rows a quarter of the block apart are summed together (four memory streams in flight)
  item, want = _single_kernel(lambda a: a.sum(axis=1), (1024, 512))
  k = hand_coded(Kernel(item.ast, AVX2()))
  ops = [o.op for o in k.applied]
  assert ops[-2:] == [OptOps.TILE, U] and k.applied[-1].amt == 4, k.applied
  rows = [o for o in k.applied if o.op is OptOps.TILE][0].amt   # the distance between the streams, in rows
  assert rows * 4 * ops.count(T) * k.applied[ops.index(T)].amt == 1024, k.applied
  got = _run(item, k.applied)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)
  # a block of few rows reads them one after another
  item, _ = _single_kernel(lambda a: a.sum(axis=1), (64, 4096))
  assert OptOps.TILE not in [o.op for o in hand_coded(Kernel(item.ast, AVX2())).applied]

def test_matvec_streams_the_matrix_along_the_reduce_axis():
  item, want = _single_kernel(lambda m, v: (m * v.reshape(1, 512)).sum(axis=1), (96, 512), (512,))
  k = hand_coded(Kernel(item.ast, AVX2()))
  assert not any(o.op is U for o in k.applied) and any(o.op is R for o in k.applied), k.applied
  assert set(_loads_by_width(expand_kernel(k.ast))) == {32}   # matrix row and vector both as contiguous vectors
  got = _run(item, [o for o in k.applied if o.op is not T])
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)

def test_transpose_copies_through_register_tiles():
  # out[i, j] = a[j, i]: with lanes along j alone each output row reads one float from each of 2048 rows of a, a row (8 KiB)
  # apart: the same few cache sets over and over. A 16x16 tile reads a line (16 floats, two registers) of 16 rows, and tiles of
  # a thread block's rows run innermost, so the next tile reads the next lines of the same rows
  item, want = _single_kernel(lambda a: a.T.contiguous() if isinstance(a, Tensor) else a.T, (1024, 2048))
  k = hand_coded(Kernel(item.ast, AVX2()))
  # a line x 16 rows, then the tiles along the rows innermost or (AVX2's 16 x 16 tile, two registers per row, long rows) strips
  # of tiles along the output row around them (test_transpose_strips)
  assert [o.amt for o in k.applied if o.op is U] == [16, 16] and k.applied[-1].op in (OptOps.TILE, OptOps.SWAP, OptOps.THREAD), k.applied
  got = _run(item, k.applied)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
  # a broadcast along the rows is not a transpose; short output rows (NCHW -> NHWC, 64 channels) take the tile too: its
  # shuffles beat a gather of each lane where the lines stay in L1 as well
  item, _ = _single_kernel(lambda a, b: a + b.reshape(1024, 1), (1024, 1024), (1024,))
  assert [o.amt for o in hand_coded(Kernel(item.ast, AVX2())).applied if o.op is U] == [16]
  item, want = _single_kernel(lambda a: a.permute(0, 2, 3, 1).contiguous() if isinstance(a, Tensor) else a.transpose(0, 2, 3, 1), (2, 64, 8, 8))
  k = hand_coded(Kernel(item.ast, AVX2()))
  assert [o.amt for o in k.applied if o.op is U] == [16, 16], k.applied
  np.testing.assert_array_equal(_run(item, k.applied).reshape(want.shape), want)

def test_column_sum_keeps_lanes_on_the_output_axis():
  # out[j] = sum_i a[i, j]: both the load and the store run along j, so the lanes stay there (one vector load per row)
  item, want = _single_kernel(lambda a: a.sum(axis=0), (256, 64))
  k = hand_coded(Kernel(item.ast, AVX2()))
  # each reduce step reads four vectors of the row (two cache lines): a row apart per step, a few bytes would waste the line
  assert [o.amt for o in k.applied if o.op is U] == [8, 4], k.applied
  assert 8 in _loads_by_width(expand_kernel(k.ast))
  got = _run(item, [o for o in k.applied if o.op is not T])
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)

def test_elementwise_gets_vectors_and_equal_thread_blocks():
  item, want = _single_kernel(lambda a, b: a * b + 1, (1 << 16,), (1 << 16,))
  k = hand_coded(Kernel(item.ast, AVX2()))
  ops = {o.op: o.amt for o in k.applied}
  assert ops[U] == 16 and ops[T] % AVX2.threads == 0, k.applied
  assert k.types()[0] is AxisType.GLOBAL
  got = _run(item, [o for o in k.applied if o.op is not T])
  np.testing.assert_allclose(got, want, rtol=1e-6)

@pytest.mark.parametrize("simd_width, bound, step", [(32, 1 << 16, 32), (32, 1 << 30, 16), (64, 1 << 16, 32), (64, 1 << 30, 32)])
def test_streamed_elementwise_steps_two_lines(simd_width, bound, step):
  # buffers beyond the streaming bound (memory-bound): AVX2 code steps four ymm (two lines) a loop iteration, not two; cached
  # ones keep two vectors, and AVX-512 code steps two zmm (two lines) either way
  item, want = _single_kernel(lambda a, b: a * b + 1, (1 << 16,), (1 << 16,))
  rnd = AVX2()
  rnd.simd_width, rnd.stream_min_bytes = simd_width, bound
  k = hand_coded(Kernel(item.ast, rnd))
  assert [o.amt for o in k.applied if o.op is U] == [step], k.applied
  np.testing.assert_allclose(_run(item, [o for o in k.applied if o.op is not T]), want, rtol=1e-6)

@pytest.mark.parametrize("n", [1 << 20, (1 << 20) + 77])
def test_big_sum_matches_float64_and_its_partials_kernel_reads_vectors(n):
  x = np.random.default_rng(3).random(n, dtype=np.float32)
  t = Tensor(x).realize()
  ks = _kernels(t.sum())
  assert len(ks) == 2                                         # parallel partials, then a tiny total
  rnd = Device[Device.DEFAULT].renderer
  if rnd.supports_float4:
    part = get_program(ks[0].ast, rnd)
    inputs = [u for u in program_uops(part) if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM]
    assert inputs and all(u.dtype.count > 1 for u in inputs), program_source(part)   # no gathers across rows
  got = float(t.sum().numpy())
  assert abs(got - x.astype(np.float64).sum()) <= 1e-6 * n    # the row's check, with margin: atol_rel 0 and rtol 1e-3
  assert got == pytest.approx(x.astype(np.float64).sum(), rel=1e-6)

def test_channel_sum_of_a_pooling_gradient_does_not_gather_across_channels():
  # out[c] = sum_{n,h,w} dmaxpool(x)[n, c, h, w] (batchnorm backward after a pool): the loads reach c through div/mod, so
  # lanes across c would need one index expression per lane per unrolled copy (such a kernel took 20 s to compile)
  rng = np.random.default_rng(0)
  xn, gn = rng.standard_normal((8, 16, 4, 4)).astype(np.float32), rng.standard_normal((8, 16, 2, 2)).astype(np.float32)
  x = Tensor(xn, requires_grad=True).realize()
  (gx,) = x.max_pool2d(2).gradient(x, gradient=Tensor(gn).realize())
  out = gx.sum(axis=(0, 2, 3))
  last = _kernels(out)[-1]
  k = hand_coded(Kernel(last.ast, AVX2()))
  # lanes across c only where no load reaches c through div/mod (the index push-down of reshapes now leaves these affine)
  c = Kernel(last.ast).of_type(AxisType.LOOP)[0]
  loads = [u for u in last.ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
  if any(_divmod_in(ld.src[0].src[1], c) for ld in loads): assert not any(o.op is U for o in k.applied), k.applied
  assert len(expand_kernel(k.ast).toposort()) < 400
  # numpy: each window's gradient goes to its maximum (no ties in random normals)
  win = xn.reshape(8, 16, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(8, 16, 2, 2, 4)
  np.testing.assert_allclose(out.numpy(), (gn[..., None] * (win == win.max(-1, keepdims=True))).sum(axis=(0, 2, 3, 4)), rtol=1e-5, atol=1e-5)

def test_sliding_windows_are_told_from_other_small_reduce_axes():
  # conv: x[n, ci, oh+kh, ow+kw] * w[co, ci, kh, kw]; kh and kw slide along oh and ow (unrolled whole: neighbouring taps share
  # loads), ci (4 here, as small) does not and stays a loop
  from core.codegen.opt.heuristic import _sliding
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((2, 4, 10, 10)).astype(np.float32), rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
  ks = _kernels(Tensor(x).realize().conv2d(Tensor(w).realize()))
  assert len(ks) == 1, [k.ast.arg for k in ks]
  item = ks[0]
  want = np.einsum("ncijhw,ochw->noij", np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3)), w)
  k = Kernel(item.ast, AVX2())
  loads = [u for u in k.ast.toposort() if u.op is Ops.LOAD]
  outs, reds = k.of_type(AxisType.LOOP), k.of_type(AxisType.REDUCE)
  assert sorted(range_size(r) for r in reds) == [3, 3, 4]
  assert sorted(range_size(r) for r in reds if _sliding(r, outs, loads)) == [3, 3]
  k = hand_coded(k)
  assert sum(o.op is R for o in k.applied) == 2, k.applied
  got = _run(item, [o for o in k.applied if o.op is not T])
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-3)

def test_softmax_sum_puts_lanes_on_the_reduce_axis():
  # sum(exp(x - max), axis=1) also reads max[i], contiguous along the rows; lanes across rows would gather x, so the lanes
  # still go along the reduce axis (the axis x is contiguous in)
  x = Tensor(np.random.default_rng(0).standard_normal((64, 200)).astype(np.float32)).realize()
  m = x.max(-1, keepdim=True).realize()
  items, _, _ = create_schedule([(x - m).exp().sum(-1).uop])
  (item,) = [it for it in items if it.ast.op is Ops.SINK]
  k = hand_coded(Kernel(item.ast, AVX2()))
  assert [o.op for o in k.applied if o.op in (U, R)] == [R], k.applied

class AVX512(AVX2):
  simd_width = 64   # 16 float32 lanes

def test_row_no_full_vector_divides_reduces_along_it_in_narrower_vectors():
  # rows of 1000 (softmax's) on 16 lanes: 8-lane vectors along the row, five of them side by side as independent partial
  # maxima, where 16 lanes across rows would gather one element of each of 16 rows
  item, want = _single_kernel(lambda a: a.max(axis=1), (64, 1000))
  k = hand_coded(Kernel(item.ast, AVX512()))
  assert [(o.op, o.amt) for o in k.applied if o.op in (U, R)][:2] == [(R, 8), (R, 5)], k.applied
  assert _loads_by_width(expand_kernel(k.ast)) == [8] * 5, k.applied
  got = _run(item, k.applied)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
