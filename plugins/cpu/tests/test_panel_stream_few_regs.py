"""With 16 vector registers (AVX2) a product's panel from beyond the L2 is read in place, prefetched, where at most
heuristic.PANEL_STREAM_REUSE_FEW_REGS (12) row blocks reuse it and it fills at most half the ways of any L1 set: their 2 x 6 tile
cuts 64 output channels into 11 row blocks, where AVX-512's 2 x 8 has 8 (PANEL_STREAM_REUSE). More row blocks, or a panel with
more lines in a set, keep the packed copy; AVX-512 renders as with the old bound of 8.
Opts and sources rendered, not run, at both widths; values against numpy with the AVX2 renderer on the host."""
from __future__ import annotations
import re
import numpy as np
import pytest
from cpu_kernels import host_like_renderer as _renderer, run_rendered
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt import heuristic
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source

PREFETCH = {"LLVM": r"= getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch.p0", "C": r"__builtin_prefetch\(.*?\)\+(\d+), 0, \d\)"}

def _item(n: int, c: int, hw: int, o: int):
  x, w = Tensor(np.zeros((n, c, hw, hw), np.float32)), Tensor(np.zeros((o, c, 1, 1), np.float32))
  (item,), _, _ = create_schedule([x.conv2d(w).uop])
  return item

# (the LLVM renderer: the C renderer's tile for these has 4 rows, no masked vectors to pad the channels to 6: 16+ row blocks)
@pytest.mark.parametrize("ren", ["LLVM"])
@pytest.mark.parametrize("o", [64, 72])
def test_avx2_reads_eleven_and_twelve_row_blocks_in_place_and_prefetches(o, ren):
  # 4 x 256 x 28 x 28 floats (3.1 MiB) beyond half the 512 KiB L2; o channels in row blocks of 6 rows: 11 (64) and 12 (72)
  rnd = _renderer(ren, 32)
  k = hand_coded(Kernel(_item(4, 256, 28, o).ast, rnd))
  assert not any(x.op is OptOps.PACK for x in k.applied), k.applied
  ups = [x for x in k.applied if x.op is OptOps.UPCAST]
  assert sorted(x.amt for x in ups if x.axis != ups[0].axis) == [6], k.applied   # the 2 x 6 tile: 6 rows a block
  cols = int(np.prod([x.amt for x in ups if x.axis == ups[0].axis]))   # the tile's pixels: the next panel starts that far on
  offs = re.findall(PREFETCH[ren], program_source(get_program(k.ast, rnd, optimize=False)))
  assert offs and set(offs) == {str(cols)}, (cols, offs)

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("shape", [(4, 256, 28, 96), (4, 32, 112, 64), (4, 512, 28, 64)],
                         ids=["16 row blocks", "8 lines an L1 set: rows 784 lines apart", "8 lines an L1 set: 512 rows"])
def test_avx2_packs_more_row_blocks_or_panels_filling_the_l1_sets(shape, ren):
  # 96 channels are 16 row blocks of 6: the copy pays there (one Zen 3 thread: in place 1.06-1.10x its time); so it does where
  # the panel fills half the ways of an L1 set (8x32x112x112 -> 64: in place 1.08-1.22x), which the next panel shares
  k = hand_coded(Kernel(_item(*shape).ast, _renderer(ren, 32)))
  assert any(x.op is OptOps.PACK for x in k.applied), k.applied

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("shape", [(4, 256, 28, 64), (4, 256, 28, 96), (4, 256, 28, 144), (4, 64, 56, 48), (4, 512, 28, 72)])
def test_avx512_renders_as_with_the_bound_of_eight(shape, ren, monkeypatch):
  def source() -> str:   # a renderer of its own each time: programs are cached by renderer
    rnd = _renderer(ren, 64)
    return program_source(get_program(hand_coded(Kernel(_item(*shape).ast, rnd)).ast, rnd, optimize=False))
  now = source()
  monkeypatch.setattr(heuristic, "PANEL_STREAM_REUSE_FEW_REGS", heuristic.PANEL_STREAM_REUSE)
  assert source() == now

@pytest.mark.parametrize("n, c, hw, o", [(2, 256, 28, 64), (2, 128, 28, 72), (1, 64, 56, 64)])
def test_avx2_in_place_conv_matches_numpy(n, c, hw, o):
  rnd = _renderer("LLVM", 32)
  assert not any(x.op is OptOps.PACK for x in hand_coded(Kernel(_item(n, c, hw, o).ast, rnd)).applied)
  r = np.random.default_rng(n * c + hw + o)
  x, w = r.standard_normal((n, c, hw, hw), dtype=np.float32), r.standard_normal((o, c, 1, 1), dtype=np.float32)
  got, _ = run_rendered(rnd, lambda a, b: a.conv2d(b), x, w)
  want = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
