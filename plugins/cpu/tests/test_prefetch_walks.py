"""The prefetch rules' walks at render time (first calls): loop_deps gives a value its sources' set where they add no loop (a
union per value was most of its time), and sweep_offsets asks a load's steps (each new one a substitution into its index and a
simplify) only where one of its loops could be a sweep."""
from __future__ import annotations
from cpu_kernels import Linear, buf, c, rng
from core.ir.dtype import dtypes
from plugin_cpu import prefetch

def _gather_copy(rows: int, cols: int):
  """out[i*cols + j] = x[j*rows + i]: one global load outside reduce loops, under loops i (rows) and j (cols) inside it."""
  out, x = buf(0, dtypes.float32, rows * cols), buf(1, dtypes.float32, rows * cols)
  lin = Linear()
  lin.add(out, x)
  i = lin.add(rng(rows, 0))
  j = lin.add(rng(cols, 1))
  ld = x.index(j * c(rows) + i).load()
  lin.add(out.index(i * c(cols) + j).store(ld).end(j).end(i))
  return lin.uops, ld, i, j

def test_loop_deps_values_and_shared_sets():
  uops, ld, i, j = _gather_copy(16, 16)
  deps = prefetch.loop_deps(uops)
  assert deps[ld.src[0].src[1]] == {i, j} and deps[ld] == {i, j} and deps[c(16)] == frozenset()
  scaled = j * c(16)
  assert deps[scaled] == {j} and deps[scaled] is deps[j]   # a constant adds no loop: the same set, not a new one

def _sweep(uops):
  return prefetch.sweep_offsets(uops, prefetch.loop_deps(uops), {u: k for k, u in enumerate(uops)})

def test_no_steps_asked_without_a_loop_long_enough_to_sweep():
  # loops of 8: no sweep of a page at a line a step (SWEEP_MIN_BYTES) on any cache line below 512 bytes (loops of 16 would
  # ask on a 256-byte line, A64FX's)
  uops, _, _, _ = _gather_copy(8, 8)
  prefetch._steps.clear()
  misses = prefetch._steps.misses
  assert _sweep(uops) == {}
  assert prefetch._steps.misses == misses

def test_a_sweep_is_still_found():
  # rows of 1024 floats (a page along i), each step's 16 rows a page apart (j): the sweep steps one element along i
  uops, ld, _, _ = _gather_copy(1024, 16)
  assert _sweep(uops) == {ld: 1}

def test_the_pack_copy_is_found_once_a_kernel(monkeypatch):
  # prefetch_offsets scans the kernel for a pack's copy once and hands it to the passes that ask (they scanned 3-5 times)
  uops, _, _, _ = _gather_copy(1024, 16)
  calls: list[int] = []
  copied = prefetch._copied
  monkeypatch.setattr(prefetch, "_copied", lambda u: calls.append(len(u)) or copied(u))
  for regs in (16, 32):
    calls.clear()
    want = prefetch.prefetch_offsets(uops, panel_budget=1 << 20, simd_regs=regs, simd_width=32)
    assert calls == [len(uops)]
    assert prefetch.prefetch_offsets(uops, panel_budget=1 << 20, simd_regs=regs, simd_width=32) == want

def test_prefetch_offsets_takes_the_renderers_loop_deps(monkeypatch):
  # the LLVM renderer asks loop_deps for its own rules and hands it to prefetch_offsets: one walk of the kernel, not two
  uops, _, _, _ = _gather_copy(1024, 16)
  want = prefetch.prefetch_offsets(uops, panel_budget=1 << 20, simd_regs=16, simd_width=32)
  deps = prefetch.loop_deps(uops)
  monkeypatch.setattr(prefetch, "loop_deps", lambda u: (_ for _ in ()).throw(AssertionError("walked again")))
  assert prefetch.prefetch_offsets(uops, panel_budget=1 << 20, simd_regs=16, simd_width=32, deps=deps) == want

def test_the_renderer_walks_loop_deps_once_a_kernel(monkeypatch):
  from plugin_cpu import renderer as R
  uops, _, _, _ = _gather_copy(1024, 16)
  calls: list[int] = []
  deps = prefetch.loop_deps
  monkeypatch.setattr(prefetch, "loop_deps", lambda u: calls.append(len(u)) or deps(u))
  monkeypatch.setattr(R, "loop_deps", prefetch.loop_deps)
  src = R.CPULLVMRenderer("znver3").render("gather", uops)
  assert "define" in src and calls == [len(uops)]
