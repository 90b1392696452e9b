"""A packed product's panel copy (core.codegen.opt.pack) prefetches the next panel (plugin_cpu/prefetch.panel_offsets): each load
of the copy also prefetches the place one panel on, the panel's width in elements. Checked on the rendered source of both CPU
renderers at AVX2 and AVX-512 widths (the source is rendered, not run, for the wider one); results against numpy on the host."""
from __future__ import annotations
import re
import numpy as np
import pytest
from cpu_kernels import host_like_renderer as _renderer
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
from plugin_cpu.prefetch import COPY_AHEAD_LINES, line_bytes

# the prefetched address's distance from the loaded one, in elements, as each renderer writes it
# (into the L1, as the copies prefetch: a matmul's next row tile goes to the L2, test_row_tile_prefetch)
PREFETCH = {"LLVM": r"= getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch.p0\(ptr %\w+, i32 0, i32 3,", "C": r"__builtin_prefetch\(.*?\)\+(\d+), 0, 3\)"}

def _conv1x1(n: int, c: int, hw: int, o: int):
  x, w = Tensor(np.zeros((n, c, hw, hw), np.float32)), Tensor(np.zeros((o, c, 1, 1), np.float32))
  (item,), _, _ = create_schedule([x.conv2d(w).uop])
  return item

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("hw", [32, 28], ids=["whole panels", "last panel padded"])
def test_panel_copy_prefetches_the_next_panel(simd_bytes, ren, hw):
  # a 1x1 conv's pixels are the product's columns: a panel of the input holds the tile's columns of every input channel, and the
  # next panel starts that many pixels on
  rnd = _renderer(ren, simd_bytes)
  item = _conv1x1(4, 64, hw, 128)   # 0.8-1 MiB, panels reused by 16+ row blocks: packed
  k = hand_coded(Kernel(item.ast, rnd))
  assert any(o.op is OptOps.PACK for o in k.applied), k.applied
  ups = [o for o in k.applied if o.op is OptOps.UPCAST]
  cols = int(np.prod([o.amt for o in ups if o.axis == ups[0].axis]))   # the tile's vectors along the pixels x their lanes
  src = program_source(get_program(k.ast, rnd, optimize=False))
  offs = re.findall(PREFETCH[ren], src)
  assert offs and set(offs) == {str(cols)}, (cols, offs)

@pytest.mark.parametrize("shape", [(3, 64, 28, 64), (4, 96, 24, 24), (2, 128, 32, 128)])   # inputs over half a 1 MiB L2: packed
def test_prefetching_panels_give_numpys_results(shape):
  n, c, hw, o = shape
  rng = np.random.default_rng(n * c + hw)
  x, w = rng.standard_normal((n, c, hw, hw), dtype=np.float32), rng.standard_normal((o, c, 1, 1), dtype=np.float32)
  got = Tensor(x).conv2d(Tensor(w)).numpy()
  want = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

def test_prefetching_panels_give_numpys_results_matmul():
  rng = np.random.default_rng(5)
  a, b = rng.standard_normal((256, 512), dtype=np.float32), rng.standard_normal((512, 320), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)

def _matmul(n: int):
  a, b = Tensor(np.zeros((n, n), np.float32)), Tensor(np.zeros((n, n), np.float32))
  (item,), _, _ = create_schedule([(a @ b).uop])
  return item

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("n", [1024, 2048])
def test_threaded_matmul_copy_prefetches_its_own_rows_ahead(simd_bytes, ren, n):
  # on 2 threads the loop over B's column panels is the THREAD axis (heuristic._panel_blocks): no loop steps to the next panel,
  # so the copy's loads prefetch COPY_AHEAD_LINES of its lines ahead along its own reduce rows (64 columns, 256 bytes, a row)
  rnd = _renderer(ren, simd_bytes)
  k = hand_coded(Kernel(_matmul(n).ast, rnd))
  assert [o.op for o in k.applied][-2:] == [OptOps.PACK, OptOps.THREAD], k.applied
  src = program_source(get_program(k.ast, rnd, optimize=False))
  offs = re.findall(PREFETCH[ren], src)
  rows = COPY_AHEAD_LINES * line_bytes() // 256
  assert rows >= 1 and len(offs) >= 2 and set(offs) == {str(rows * n)}, (rows, offs)

@pytest.mark.parametrize("ren", ["LLVM", "C"])
def test_unthreaded_matmul_copy_still_prefetches_the_next_panel(ren):
  # a single thread keeps the panel loop in the kernel: its copy prefetches the next group of panels (64 columns on), not ahead
  rnd = _renderer(ren, 32)
  rnd.threads = 0
  k = hand_coded(Kernel(_matmul(1024).ast, rnd))
  src = program_source(get_program(k.ast, rnd, optimize=False))
  assert set(re.findall(PREFETCH[ren], src)) == {"64"}

@pytest.mark.parametrize("shape", [(512, 1024, 1024), (64, 2048, 1024)])
def test_threaded_matmuls_copying_ahead_give_numpys_results(shape):
  m, kk, n = shape
  rng = np.random.default_rng(m + n)
  a, b = rng.standard_normal((m, kk), dtype=np.float32), rng.standard_normal((kk, n), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
