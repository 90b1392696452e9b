"""A copy whose rows are shorter than half an AVX-512 vector (ResNet's 7x7 maps copied into their padded 9x9 buffers) takes one
masked 8-lane vector a row (heuristic.hand_coded), where its 49 scalar copies a channel took LLVM's loop access analysis tens of
ms to compile and ran about 3x the time. Results match numpy."""
import numpy as np
import pytest
from cpu_kernels import host_like_renderer, run_item
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from plugin_cpu.renderer import host_flags

def _copy_item(x: np.ndarray):
  buf = Tensor.zeros(*x.shape[:2], x.shape[2] + 2, x.shape[3] + 2).contiguous().realize()
  (item,) = [it for it in create_schedule([buf[:, :, 1:-1, 1:-1].assign(Tensor(x).realize()).uop])[0] if it.ast.op is Ops.SINK]
  return item

def test_a_7_float_row_copy_is_one_masked_half_vector_with_numpys_values():
  x = np.random.default_rng(1).standard_normal((2, 16, 7, 7)).astype(np.float32)
  rnd = host_like_renderer("LLVM", 64, threads=0)
  item = _copy_item(x)
  from core.codegen.program import get_program, program_source
  src = program_source(get_program(item.ast, rnd))
  assert "store float" not in src and "@llvm.masked.store.v8f32.p0(<8 x float>" in src, src
  if "avx512f" not in host_flags(): pytest.skip("runs AVX-512 code")
  bufs, _ = run_item(item, rnd)
  out = bufs[0].numpy().reshape(2, 16, 9, 9)
  np.testing.assert_array_equal(out, np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))))
