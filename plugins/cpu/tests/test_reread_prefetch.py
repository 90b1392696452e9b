"""A product whose column-side input lies beyond half the L2 but whose panels few row blocks reuse (heuristic.PANEL_STREAM_REUSE:
the conv1x1 bench row, 32x256x28x28 -> 64 in 8 row blocks of 8 channels) reads it in place, not packed, and those loads prefetch
the next panel (plugin_cpu/prefetch.reread_offsets). Kernels that pack, that read in place from the L2, and convs with windows
render as before. Opts and sources from both CPU renderers at AVX2 and AVX-512 widths (rendered, not run); results against numpy
on the host with each renderer."""
from __future__ import annotations
import re
import numpy as np
import pytest
from cpu_kernels import host_like_renderer as _renderer, run_on_renderer
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
import plugin_cpu.prefetch as prefetch

# the prefetched address's distance from the loaded one, in elements, as each renderer writes it
PREFETCH = {"LLVM": r"= getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch.p0", "C": r"__builtin_prefetch\(.*?\)\+(\d+), 0, \d\)"}
# each prefetch's locality hint
LOCALITY = {"LLVM": r"call void @llvm.prefetch.p0\(ptr %\w+, i32 0, i32 (\d), i32 1\)", "C": r"__builtin_prefetch\(.*?\)\+\d+, 0, (\d)\)"}

def _items(n: int, c: int, hw: int, o: int, kernel: int = 1, stride: int = 1) -> list:
  x, w = Tensor(np.zeros((n, c, hw, hw), np.float32)), Tensor(np.zeros((o, c, kernel, kernel), np.float32))
  items, _, _ = create_schedule([x.conv2d(w, stride=stride, padding=kernel // 2).uop])
  return items

# a 1x1 conv beyond the L2 share whose panels 8 row blocks read: 8 rows x 64 channels on AVX-512 (2 x 8 tile), 4 x 32 on AVX2
FEW_BLOCKS = {32: (4, 256, 28, 32), 64: (4, 256, 28, 64)}

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
def test_few_row_blocks_read_in_place_and_prefetch_the_next_panel(simd_bytes, ren):
  rnd = _renderer(ren, simd_bytes)
  (item,) = _items(*FEW_BLOCKS[simd_bytes])
  k = hand_coded(Kernel(item.ast, rnd))
  assert not any(o.op is OptOps.PACK for o in k.applied), k.applied
  ups = [o for o in k.applied if o.op is OptOps.UPCAST]
  cols = int(np.prod([o.amt for o in ups if o.axis == ups[0].axis]))   # the tile's pixels: the next panel starts that far on
  offs = re.findall(PREFETCH[ren], program_source(get_program(k.ast, rnd, optimize=False)))
  assert offs and set(offs) == {str(cols)}, (cols, offs)

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("l1_kib, shape, to_l2", [
  (48, (4, 256, 28, 64), True),    # 2 vectors x 256 channels: panels of 32 KiB
  (48, (4, 144, 56, 24), True),    # 4 vectors x 144: 36 KiB
  (48, (4, 96, 56, 24), False),    # 4 x 96: 24 KiB, two fit the L1
  (32, (4, 96, 56, 24), True),     # not a 32 KiB one
], ids=["32KiB", "36KiB", "24KiB", "24KiB-in-32KiB-L1"])
def test_next_panel_prefetch_goes_to_the_l2_beyond_half_the_l1(l1_kib, shape, to_l2, ren, monkeypatch):
  # the L1 holds the panel every row block reads again: a next one that can't fit beside it is prefetched into the L2 only
  monkeypatch.setattr(prefetch, "L1_BYTES", l1_kib << 10)
  # (the C renderer has no masked vectors to pad 49 vectors to 50: one at a time, panels of 16 KiB)
  if ren == "C" and shape == (4, 256, 28, 64): to_l2 = False
  rnd = _renderer(ren, 64)
  (item,) = _items(*shape)
  k = hand_coded(Kernel(item.ast, rnd))
  assert not any(o.op is OptOps.PACK for o in k.applied), k.applied
  hints = re.findall(LOCALITY[ren], program_source(get_program(k.ast, rnd, optimize=False)))
  want = prefetch.L2_LOCALITY if to_l2 else prefetch.L1_LOCALITY
  assert hints and set(hints) == {str(want)} and prefetch.L2_LOCALITY < prefetch.L1_LOCALITY, hints

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("shape", [(1, 96, 24, 24), (4, 256, 28, 256), (2, 64, 28, 64, 3), (8, 256, 14, 512, 1, 2)],
                         ids=["in the L2", "32+ row blocks: packed", "3x3", "stride 2: a packed panel of lanes"])
@pytest.mark.parametrize("threads", [1, 2])
def test_other_products_render_as_without_the_rule(shape, simd_bytes, ren, threads, monkeypatch):
  def sources() -> list[str]:   # a renderer of its own each time: programs are cached by renderer
    rnd = _renderer(ren, simd_bytes, threads)
    return [program_source(get_program(hand_coded(Kernel(it.ast, rnd)).ast, rnd, optimize=False)) for it in _items(*shape)]
  with_rule = sources()
  monkeypatch.setattr(prefetch, "reread_offsets", lambda *args: {})
  assert sources() == with_rule

def test_matmul_1024_renders_as_without_the_rule(monkeypatch):
  (item,), _, _ = create_schedule([(Tensor(np.zeros((1024, 1024), np.float32)) @ Tensor(np.zeros((1024, 1024), np.float32))).uop])
  def source() -> str:
    rnd = _renderer("LLVM", 64)
    return program_source(get_program(hand_coded(Kernel(item.ast, rnd)).ast, rnd, optimize=False))
  with_rule = source()
  monkeypatch.setattr(prefetch, "reread_offsets", lambda *args: {})
  assert source() == with_rule

@pytest.mark.parametrize("ren", ["LLVM", "C"])
def test_in_place_products_give_numpys_results(ren):
  # in a process of its own: DEV=CPU:<ren> picks the renderer; inputs beyond half a 1 MiB L2, 8 and 4 row blocks, a padded last panel
  run_on_renderer(ren, (
    "for n, c, hw, o in ((4, 256, 28, 64), (4, 256, 28, 32), (2, 144, 56, 24), (3, 64, 32, 64)):\n"
    "  r = np.random.default_rng(n * c + hw + o)\n"
    "  x, w = r.standard_normal((n, c, hw, hw), dtype=np.float32), r.standard_normal((o, c, 1, 1), dtype=np.float32)\n"
    "  want = np.einsum('nchw,oc->nohw', x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))\n"
    "  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w)).numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())\n"
    "print('ok')\n"), CPU_PREFETCH="1")

# AVX2 (32-byte vectors): a reduce step reads one 64-byte line of the panel as two 8-float vectors, and the next panel is prefetched
# once per line, in one row block of each power of two (prefetch.SPREAD_BELOW_REGS; the LLVM renderer's): LLVM's 2 x 6 tile cuts
# 32 channels (padded to 36) into 6 row blocks, 64 (padded to 66) into 11; the C renderer's 2 x 4 cuts 32 into 8, each of which
# prefetches (its compiler may be gcc, which built the gated prefetch slower). Panels of 16 KiB: with the next, a 32 KiB L1
SPREAD_MASK = {("LLVM", 32): 3, ("LLVM", 64): 7, ("C", 32): None}
GATE = {"LLVM": r"= and i32 %ridx\d+, (\d+)\n", "C": r"\(ridx\w+&(\d+)\)==\(ridx\w+&\d+\)"}

def _in_place_source(ren: str, simd_bytes: int, shape: tuple[int, ...]) -> tuple[str, int]:
  """The kernel's source and its reduce unroll (reduce steps per loop iteration)."""
  rnd = _renderer(ren, simd_bytes)
  (item,) = _items(*shape)
  k = hand_coded(Kernel(item.ast, rnd))
  assert not any(o.op is OptOps.PACK for o in k.applied), k.applied
  return program_source(get_program(k.ast, rnd, optimize=False)), int(np.prod([o.amt for o in k.applied if o.op is OptOps.UNROLL]))

@pytest.mark.parametrize("ren, o", list(SPREAD_MASK))
def test_avx2_next_panel_line_prefetched_once_and_by_one_llvm_row_block_of_each_power_of_two(ren, o, monkeypatch):
  monkeypatch.setattr(prefetch, "L1_BYTES", 32 << 10)
  src, unroll = _in_place_source(ren, 32, (4, 256, 28, o))
  assert len(re.findall(PREFETCH[ren], src)) == unroll, src   # one line per reduce step, not one per vector
  gates, mask = re.findall(GATE[ren], src), SPREAD_MASK[(ren, o)]
  assert (set(gates) == {str(mask)} if mask is not None else not gates), gates

def test_avx2_panel_that_fits_the_l1_twice_over_is_prefetched_by_every_row_block(monkeypatch):
  # 128 channels: 8 KiB panels, two of them leave the L1 half free: every row block prefetches (once per line)
  monkeypatch.setattr(prefetch, "L1_BYTES", 32 << 10)
  src, unroll = _in_place_source("LLVM", 32, (4, 128, 28, 64))
  assert len(re.findall(PREFETCH["LLVM"], src)) == unroll and not re.findall(GATE["LLVM"], src), src

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("shape", [(4, 256, 28, 64), (4, 256, 28, 32), (4, 96, 56, 24)])
def test_avx512_in_place_panels_render_as_before_the_once_per_line_and_spread_rules(ren, shape, monkeypatch):
  # 16-float vectors are a line each, and 32 registers keep every row block's prefetch (unmeasured there)
  monkeypatch.setattr(prefetch, "L1_BYTES", 32 << 10)
  src, _ = _in_place_source(ren, 64, shape)
  monkeypatch.setattr(prefetch, "SPREAD_BELOW_REGS", 0)
  monkeypatch.setattr(prefetch, "_once_per_line", lambda offs: offs)
  assert _in_place_source(ren, 64, shape)[0] == src

@pytest.mark.parametrize("ren, l2, mask", [("LLVM", 2 << 20, 7), ("LLVM", 1 << 20, None), ("C", 2 << 20, None)],
                         ids=["LLVM 2 MiB", "LLVM 1 MiB", "C 2 MiB"])
def test_big_l2_avx512_next_panel_prefetched_by_one_row_block_of_each_power_of_two(ren, l2, mask):
  # the Intel AVX-512 server core (heuristic.big_l2: a 2 MiB L2) spreads the next panel's prefetch too (SPREAD_BIG_L2): the
  # conv1x1 bench shape's 8 row blocks of 8 channels, 32 KiB panels; the Zen 5's 1 MiB and the C renderer keep every block's
  rnd = _renderer(ren, 64)
  rnd.l2_bytes = l2
  (item,) = _items(4, 256, 28, 64)
  k = hand_coded(Kernel(item.ast, rnd))
  src = program_source(get_program(k.ast, rnd, optimize=False))
  assert re.findall(PREFETCH[ren], src), src
  gates = re.findall(GATE[ren], src)
  assert (set(gates) == {str(mask)} if mask is not None else not gates), gates
