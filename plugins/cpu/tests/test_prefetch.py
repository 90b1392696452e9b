"""Row kernels (softmax, layernorm) prefetch the next row in their second pass (both CPU renderers), other kernels don't; results
match numpy. The choice is checked for AVX2 and AVX-512 vector widths alike (the source is rendered, not run, for the wider one)."""
from __future__ import annotations
import copy, re
import numpy as np
import pytest
from cpu_kernels import run_on_renderer
from core import Tensor
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
from core.ir.ops import Ops
from plugin_cpu.c_renderer import CPUCRenderer
from plugin_cpu.renderer import CPULLVMRenderer
import plugin_cpu.prefetch as prefetch
from core.codegen.opt.heuristic import big_l2

W = 1000   # a row of floats (4000 bytes): a multiple of neither vector width's unroll

def _layernorm(x, w, b): return x.layernorm() * w + b
def _softmax(x, w, b): return x.softmax(-1)
def _mul_add(x, w, b): return x * w + 1
def _sum(x, w, b): return x.sum(-1)
def _matmul(x, w, b): return x @ x[:W].T

# the prefetched address's distance from the loaded one, in elements, as each renderer writes it
PREFETCH = {"LLVM": r"= getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch.p0", "C": r"__builtin_prefetch\(.*\)\+(\d+), 0, 3\)"}

def _sources(fn, rows: int, simd_bytes: int, ren: str = "LLVM", width: int = W, l2_bytes: int | None = None) -> list[str]:
  rnd = copy.copy(CPULLVMRenderer() if ren == "LLVM" else CPUCRenderer())
  rnd.simd_width, rnd.simd_regs, rnd.threads = simd_bytes, 16 if simd_bytes == 32 else 32, 2
  if l2_bytes is not None: rnd.l2_bytes = l2_bytes
  # the plain order, whatever this host's: an AVX2 host's softmax reads the next row's max ahead (Renderer.max_ahead), whose
  # exp pass prefetches too (test_max_ahead)
  rnd.max_ahead = False
  x, w, b = Tensor(np.zeros((rows, width), np.float32)), Tensor(np.zeros(width, np.float32)), Tensor(np.zeros(width, np.float32))
  items, _, _ = create_schedule([fn(x, w, b).uop])
  return [program_source(get_program(it.ast, rnd)) for it in items if it.ast.op is Ops.SINK]

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("fn", [_layernorm, _softmax])
def test_row_kernels_prefetch_the_next_row(fn, simd_bytes, ren):
  srcs = _sources(fn, 4096, simd_bytes, ren)
  assert len(srcs) == 1
  # the prefetched address is the loaded one a row (W floats) or two on (rows_ahead: what fits this host's L1)
  offs = re.findall(PREFETCH[ren], srcs[0])
  assert offs and set(offs) == {str(W * _ahead(4 * W, ren))}, srcs[0]

def _ahead(row_bytes: int, ren: str) -> int:
  """The rows on that `ren`'s renderer on this host prefetches over a buffer past its L2 (more on a big L2: LLVM only)."""
  return prefetch.rows_ahead(row_bytes, ren == "LLVM" and big_l2(CPULLVMRenderer()))

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("l1_kib, width, ahead", [(32, 1024, 2), (32, 2048, 1), (48, 2048, 2), (48, 4096, 1)])
def test_row_kernels_prefetch_two_rows_on_where_they_fit_the_l1(l1_kib, width, ahead, ren, monkeypatch):
  # one row on, the next row's lines are asked for a fraction of a row's time before it is read; two rows on where the row and
  # the two after it fit half the L1 (4 KiB rows on 32 KiB; 8 KiB rows on 48 KiB, not on 32)
  monkeypatch.setattr(prefetch, "L1_BYTES", l1_kib << 10)
  (src,) = _sources(_layernorm, 256, 64, ren, width, l2_bytes=1 << 20)
  offs = [o for _, dists in _prefetching_loads(src, ren) for o in dists]
  assert offs and min(offs) == width * ahead, (sorted(set(offs)), src)

@pytest.mark.parametrize("l1_kib, width, ahead", [(48, 1024, 4), (32, 1024, 3), (48, 2048, 2), (48, 4096, 1)])
def test_row_kernels_prefetch_more_rows_on_a_big_l2_core(l1_kib, width, ahead, monkeypatch):
  # the Intel server core's 2 MiB L2 (heuristic.big_l2): ROWS_AHEAD_BIG_L2 rows on, fewer where they would not fit half the L1,
  # for rows from a buffer the L2 does not keep (over half of it); a 1 MiB L2 (the Zen 5's), or 1 MiB of rows, keeps ROWS_AHEAD
  monkeypatch.setattr(prefetch, "L1_BYTES", l1_kib << 10)
  for l2, rows, want in ((2 << 20, 2048, ahead), (1 << 20, 2048, min(ahead, 2)), (2 << 20, (1 << 20) // (4 * width), min(ahead, 2))):
    (src,) = _sources(_layernorm, rows, 64, "LLVM", width, l2_bytes=l2)
    offs = [o for _, dists in _prefetching_loads(src, "LLVM") for o in dists]
    assert offs and min(offs) == width * want, (l2, rows, sorted(set(offs)))

def _prefetching_loads(src: str, ren: str) -> list[tuple[int, list[int]]]:
  """(float lanes, prefetched distances in elements) of each load that prefetches, as each renderer writes it."""
  if ren == "LLVM":
    found = re.findall(r"= load <(\d+) x float>, ptr %(\w+)[^\n]*((?:\n  %\w+ = getelementptr float, ptr %\2, i64 \d+\n  call void @llvm.prefetch[^\n]*)+)", src)
    return [(int(n), [int(o) for o in re.findall(r"i64 (\d+)\n", g + "\n")]) for n, _, g in found]
  return [(int(re.search(r"floatx(\d+) ", ln).group(1)), [int(o) for o in re.findall(r"\)\+(\d+), 0, 3\)", ln)])
          for ln in src.splitlines() if "__builtin_prefetch" in ln]

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
def test_a_load_prefetches_every_line_of_its_vector(simd_bytes, ren):
  # rows of 1024: the layernorm's second pass loads two vectors' width at a time (32 floats on AVX-512: 128 bytes, two lines);
  # a prefetch fetches one line, so each line of the next row needs its own (one per load fetched every other line)
  from plugin_cpu.prefetch import line_bytes
  width, per_line = 1024, line_bytes() // 4
  (src,) = _sources(_layernorm, 4096, simd_bytes, ren, width)
  loads = _prefetching_loads(src, ren)
  assert loads, src
  row = width * _ahead(4 * width, ren)
  for lanes, offs in loads: assert offs == [row + k * per_line for k in range(-(-lanes // per_line))], (lanes, offs)
  assert max(lanes for lanes, _ in loads) * 4 >= simd_bytes, "the loads are narrower than a vector: the case this checks is gone"

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("fn", [_mul_add, _sum, _matmul])
def test_other_kernels_do_not_prefetch(fn, simd_bytes, ren, monkeypatch):
  monkeypatch.setattr(prefetch, "ROW_TILE_PREFETCH", False)   # (a matmul's next row tile on AVX2: test_row_tile_prefetch)
  monkeypatch.setattr(prefetch, "PACKED_PREFETCH", False)     # (its packed panel's loads on a 2 MiB L2: test_big_l2_tile)
  srcs = _sources(fn, 4096, simd_bytes, ren)
  assert srcs and not any("prefetch" in s for s in srcs)

@pytest.mark.parametrize("ren", ["LLVM", "C"])
def test_row_kernels_give_numpys_results(ren):
  # in a process of its own: DEV=CPU:<ren> picks the renderer (rows: one, a few, more than a thread block)
  run_on_renderer(ren, (
    f"W = {W}\n"
    "for rows in (1, 7, 300):\n"
    "  r = np.random.default_rng(rows)\n"
    "  x, w, b = r.standard_normal((rows, W), dtype=np.float32) * 3, r.standard_normal(W, dtype=np.float32), r.standard_normal(W, dtype=np.float32)\n"
    "  sm = np.exp(x - x.max(-1, keepdims=True)); sm /= sm.sum(-1, keepdims=True)\n"
    "  ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b\n"
    "  np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), sm, rtol=1e-4, atol=1e-6)\n"
    "  np.testing.assert_allclose((Tensor(x).layernorm() * Tensor(w) + Tensor(b)).numpy(), ln, rtol=1e-4, atol=1e-4)\n"
    "print('ok')\n"), CPU_PREFETCH="1")
