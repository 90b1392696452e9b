"""The LLVM renderer marks a pack copy's loops (AxisType.OUTER) llvm.loop.unroll.disable where they take more than
COPY_UNROLL_MAX steps or hold loops (renderer._llvm_copy_end): LLVM unrolled a 1x1 stride-2 conv's 14-step copied row fully,
a large share of its compile, for no speed. A copy loop of a few steps with none inside (a 3x3 conv's kh) may still be
unrolled. So are a plain copy kernel's innermost loops along which every load and store steps by its width (stream_copy_loops:
ResNet-18's input copied into its padded buffer, 14 vectors a row on an AVX-512 host, whose unrolled row LLVM's loop passes took
~40% of its compile to analyse), and that kernel's loops with loops inside (LLVM unrolled the copy's channel and row loops
around its row: ~3/4 of its compile), but not one with a gated (masked) load or store or one that strides. Results against
numpy."""
import numpy as np
import pytest
from cpu_kernels import Linear, buf, c, device, host_like_renderer, rng, run, run_item, sink_item, unroll_disabled, unroll_disabled_steps
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import UOp
from core.codegen.program import get_program, program_source
from plugin_cpu.renderer import COPY_UNROLL_MAX, host_flags

def _downsample(x: np.ndarray, w: np.ndarray) -> Tensor: return Tensor(x).conv2d(Tensor(w), stride=2)

@pytest.mark.parametrize("simd", [32, 64])
def test_a_copied_row_of_many_steps_is_not_unrolled(simd):
  src = program_source(get_program(sink_item(_downsample(np.zeros((2, 128, 28, 28), np.float32), np.zeros((256, 128, 1, 1), np.float32))).ast,
                                   host_like_renderer("LLVM", simd, threads=0)))
  # the copy's row of 14 pixels and its channel loop: both marked, each with a distinct loop id
  assert 14 in unroll_disabled_steps(src) and len(unroll_disabled_steps(src)) == len({md for _, md in unroll_disabled(src)}) >= 2, src

def test_a_copy_loop_of_a_few_steps_with_no_loop_inside_may_be_unrolled():
  # a 16-channel weight panel (512 input channels: 32 channels would pass PACK_MAX_BYTES); a 32-channel panel's kh step loads
  # two vectors' rows and is marked (test_row_copy_no_unroll)
  src = program_source(get_program(sink_item(Tensor(np.zeros((2, 512, 7, 7), np.float32)).conv2d(Tensor(np.zeros((32, 512, 3, 3), np.float32)), padding=1)).ast,
                                   host_like_renderer("LLVM", 64, threads=0)))
  # the weight panel's copy: its channel loop (512) is marked, its kh loop (3 steps, the innermost) is not
  assert unroll_disabled_steps(src) == [512] and all(n > COPY_UNROLL_MAX for n in unroll_disabled_steps(src))

def test_copies_that_are_not_unrolled_give_numpys_values():
  r = np.random.default_rng(5)
  x, w = r.standard_normal((2, 128, 28, 28)).astype(np.float32), r.standard_normal((256, 128, 1, 1)).astype(np.float32)
  bufs, src = run_item(sink_item(_downsample(x, w)), host_like_renderer("LLVM", 64 if "avx512f" in host_flags() else 32, threads=0))
  assert unroll_disabled_steps(src)
  ref = np.einsum("nchw,oc->nohw", x[:, :, ::2, ::2].astype(np.float64), w[:, :, 0, 0])
  np.testing.assert_allclose(bufs[0].numpy().reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)

def _row_copy(gated: bool = False, src_step: int = 16) -> list[UOp]:
  """out[row*336 + 5 + 16r : +16] = x[row*320 + src_step*r : +16] for 3 rows of 20 vector steps (the last one's store gated if
  `gated`): a pad's copy into the interior of its rows (a stride of src_step // 16 vectors reads every other one)."""
  out, x, v16 = buf(0, dtypes.float32, 3 * 336), buf(1, dtypes.float32, 3 * 320 * 2), dtypes.float32.vec(16)
  lin = Linear()
  lin.add(out, x)
  row = lin.add(rng(3, 0))
  r = lin.add(rng(20, 1))
  val = x.index(row * c(320 * src_step // 16) + r * c(src_step)).load(dtype=v16)
  dst = out.index(row * c(336) + r * c(16) + c(5), valid=r < c(19)) if gated else out.index(row * c(336) + r * c(16) + c(5))
  lin.add(dst.store(val).end(r).end(row))
  return lin.uops

@pytest.mark.parametrize("gated,src_step", [(False, 16), (True, 16), (False, 32)])
def test_a_plain_copys_contiguous_row_loop_is_not_unrolled(gated, src_step):
  src = device("LLVM").renderer.render("row_copy", _row_copy(gated, src_step))
  # the contiguous, ungated row of 20 vectors is marked, and so is its outer loop of 3 rows (STREAM_OUTER_NO_UNROLL); a gated
  # or strided copy is left to LLVM
  assert unroll_disabled_steps(src) == ([20, 3] if not gated and src_step == 16 else []), src
  x = np.arange(3 * 320 * 2, dtype=np.float32)
  (got, _) = run("LLVM", _row_copy(gated, src_step), [np.zeros(3 * 336, np.float32), x])
  ref = np.zeros((3, 336), np.float32)
  for row in range(3):
    for r in range(19 if gated else 20):
      s0 = row * 320 * src_step // 16 + r * src_step
      ref[row, 5 + 16 * r:21 + 16 * r] = x[s0:s0 + 16]
  np.testing.assert_array_equal(got.reshape(3, 336), ref)
