"""Streaming stores: big outputs' vector stores stream past the caches (x86-64, both renderers) and results still match numpy."""
from __future__ import annotations
import copy, re
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import AxisType, UOp, Ops
from core.ir.pattern import PatternMatcher, UPat, graph_rewrite
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source, program_uops
from core.codegen.stash import STASH_ARG
from plugin_cpu.compiler import host_flags
from plugin_cpu.streaming import NT_ARG, NT_MIN_BYTES, host_streams, nt_min_bytes, pm_streaming_stores, store_width, stream_width
from cpu_kernels import AVX512, RENDERERS, Linear, device, buf, rng, c, run

BIG = 1 << 24   # 64 MiB of float32: past any last-level cache
MARKS = {"C": ("CORE_STREAM", "__builtin_ia32_sfence();"), "LLVM": ("!nontemporal", "call void @llvm.x86.sse.sfence()")}

def _program(ren: str, n: int):
  a, b = Tensor(np.zeros(n, np.float32)), Tensor(np.zeros(n, np.float32))
  items, _, _ = create_schedule([(a * b + 1).uop])
  ks = [it for it in items if it.ast.op is Ops.SINK]
  assert len(ks) == 1
  return get_program(ks[0].ast, device(ren).renderer)

def _launch(ren: str, spec, arrays: list[np.ndarray], out_offset: int = 0) -> np.ndarray:
  """Runs `spec` on copies of `arrays` (arrays[0] is the output); the output buffer starts `out_offset` bytes into its block."""
  dev = device(ren)
  prg = dev.runtime(spec.arg.name, dev.compiler.compile(program_source(spec)))
  hs = []
  for i, a in enumerate(arrays):
    extra = out_offset if i == 0 else 0
    h = dev.allocator.alloc(a.nbytes + extra)
    if extra: h = dev.allocator._offset(h, a.nbytes, extra)
    dev.allocator._copyin(h, memoryview(a).cast("B"))
    hs.append(h)
  prg(*hs, global_size=spec.arg.global_size, wait=True)
  out = np.empty_like(arrays[0])
  dev.allocator._copyout(memoryview(out).cast("B"), hs[0])
  return out

@pytest.mark.parametrize("ren", RENDERERS)
def test_big_elementwise_streams_and_fences_small_does_not(ren):
  store, fence = MARKS[ren]
  big, small = _program(ren, BIG), _program(ren, 1 << 16)
  assert any(u.op is Ops.STORE and u.arg == NT_ARG for u in program_uops(big)) == host_streams()
  assert (store in program_source(big) and fence in program_source(big)) == host_streams(), program_source(big)
  assert store not in program_source(small) and fence not in program_source(small) and "sfence" not in program_source(small)
  assert not any(u.op is Ops.STORE and u.arg == NT_ARG for u in program_uops(small))

@pytest.mark.parametrize("ren", RENDERERS)
@pytest.mark.parametrize("out_offset", [0, 4])
def test_streamed_mul_add_matches_numpy(ren, out_offset):
  # offset 4: the output is a view whose address is not vector aligned; the kernel must take its plain stores (no fault)
  spec = _program(ren, BIG)
  r = np.random.default_rng(1)
  a, b = r.standard_normal(BIG, dtype=np.float32), r.standard_normal(BIG, dtype=np.float32)
  got = _launch(ren, spec, [np.full(BIG, np.nan, np.float32), a, b], out_offset)
  np.testing.assert_array_equal(got, a * b + np.float32(1))

def test_tensor_mul_add_and_sums_match_numpy():
  r = np.random.default_rng(2)
  a, b = r.standard_normal(BIG, dtype=np.float32), r.standard_normal(BIG, dtype=np.float32)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  for _ in range(2):   # the second run reuses the first's (cached) output buffer
    np.testing.assert_array_equal((ta * tb + 1).numpy(), a * b + np.float32(1))
  u = r.random(BIG, dtype=np.float32)
  tu = Tensor(u).realize()
  assert float(tu.sum().numpy()) == pytest.approx(u.astype(np.float64).sum(), rel=1e-6)
  np.testing.assert_allclose(tu.reshape(4096, 4096).sum(axis=1).numpy(), u.reshape(4096, 4096).astype(np.float64).sum(axis=1), rtol=1e-5)

@pytest.mark.skipif(not host_streams(), reason="streaming stores are rendered on x86-64 hosts only")
@pytest.mark.parametrize("ren", RENDERERS)
@pytest.mark.parametrize("dt,count", [(dtypes.float32, 4), (dtypes.float32, 8), (dtypes.float32, 16), (dtypes.int32, 8), (dtypes.float64, 4)])
def test_marked_stores_render_and_run(ren, dt, count):
  # every width the renderers split a vector into (16 and 32 bytes here; 64 on AVX-512), of floats and ints
  n = 1024
  out, inp = buf(0, dt, n), buf(1, dt, n)
  lin = Linear()
  lin.add(out, inp)
  r = lin.add(rng(n // count))
  i = r * c(count)
  v = UOp(Ops.LOAD, dt.vec(count), (inp.index(i),))
  lin.add(UOp(Ops.STORE, dtypes.void, (out.index(i), v + v), NT_ARG).end(r))
  assert MARKS[ren][0] in device(ren).renderer.render("nt_kernel", lin.uops)
  x = (np.arange(n) - 300).astype(np.float64 if dt is dtypes.float64 else np.float32 if dt is dtypes.float32 else np.int32)
  got = run(ren, lin.uops, [np.zeros_like(x), x], name="nt_kernel")[0]
  np.testing.assert_array_equal(got, x + x)

# *** the rule by itself: which stores it marks ***

def _store(n: int, idx_fn, count: int = 8, gated: bool = False) -> UOp:
  out, inp = buf(0, dtypes.float32, n), buf(1, dtypes.float32, n)
  r = rng(n // count)
  i = idx_fn(r)
  val = UOp(Ops.LOAD, dtypes.float32.vec(count), (inp.index(i),))
  index = out.index(i, valid=r < c(3)) if gated else out.index(i)
  return UOp(Ops.STORE, dtypes.void, (index, val)).end(r)

def _marked(sink: UOp, min_bytes: int = 1024, simd: int = 32) -> bool:
  return any(u.op is Ops.STORE and u.arg == NT_ARG for u in graph_rewrite(sink, pm_streaming_stores(min_bytes, simd)).toposort())

def test_rule_marks_only_whole_aligned_vector_stores_into_big_buffers():
  assert _marked(_store(4096, lambda r: r * c(8)))
  assert not _marked(_store(4096, lambda r: r * c(8)), min_bytes=1 << 20)         # a small buffer
  assert not _marked(_store(4096, lambda r: r * c(8) + c(1)))                    # index not a multiple of the vector
  assert not _marked(_store(4096, lambda r: r * c(8), count=2))                  # 8 bytes: no streaming store that narrow
  assert _marked(_store(4096, lambda r: r * c(8), gated=True))                   # gated: streams where the gate is true
  assert _marked(_store(4096, lambda r: r * c(4), count=4))                      # 16 bytes, 16-aligned: SSE width

def test_rule_counts_the_buffers_the_value_reads():
  # 16 KiB out + 16 KiB in: the output alone is under 24 KiB, the kernel's data is not, and can't all stay cached
  assert _marked(_store(4096, lambda r: r * c(8)), min_bytes=24 << 10)
  assert not _marked(_store(4096, lambda r: r * c(8)), min_bytes=40 << 10)
  # a small output of a big input (a column sum's) stays plain: the next kernel may read it back from the cache
  out, inp = buf(0, dtypes.float32, 1024), buf(1, dtypes.float32, 1 << 16)
  r = rng(128)
  v = UOp(Ops.LOAD, dtypes.float32.vec(8), (inp.index(r * c(8)),))
  assert not _marked(UOp(Ops.STORE, dtypes.void, (out.index(r * c(8)), v)).end(r), min_bytes=64 << 10)
  assert _marked(UOp(Ops.STORE, dtypes.void, (out.index(r * c(8)), v)).end(r), min_bytes=16 << 10)

def test_rule_takes_the_widest_store_the_alignment_allows():
  # rows of 1000 floats start 32 bytes apart: a 64-byte vector streams as two 32-byte stores where the CPU has AVX-512
  assert _marked(_store(4096, lambda r: r * c(1000) + c(16), count=16), simd=64)
  assert not _marked(_store(4096, lambda r: r * c(1001) + c(16), count=16), simd=64)   # 4-byte aligned: none
  x = _store(4096, lambda r: r * c(1000), count=16).src[0]
  assert store_width(x, 64) == 32 and store_width(x, 16) == 16
  assert store_width(_store(4096, lambda r: r * c(1001), count=16).src[0], 64) == 64   # unknown: the run-time check decides

def test_rule_leaves_a_value_read_back_from_the_output_plain():
  # out[i] = 2 * out[i] (softmax scales its stashed exps in place): the lines are in the cache already
  out = buf(0, dtypes.float32, 4096)
  r = rng(512)
  i = r * c(8)
  v = UOp(Ops.LOAD, dtypes.float32.vec(8), (out.index(i),))
  assert not _marked(UOp(Ops.STORE, dtypes.void, (out.index(i), v + v)).end(r))

def test_rule_marks_what_the_store_patterns_did():
  # the rule tests STORE(INDEX(PARAM, i[, gate]), val, ...) itself: it marks what the two source patterns it replaced marked
  from plugin_cpu.streaming import _streamable
  def by_patterns(x: UOp, min_bytes: int, simd: int) -> bool:
    def mark(x: UOp, buf: UOp, i: UOp, val: UOp, g: UOp | None = None) -> UOp | None:
      if g is not None and g.dtype.count not in (1, val.dtype.count): return None
      return x.replace(arg=NT_ARG) if _streamable(x, buf, i, val, min_bytes, simd) else None
    index = (UPat(Ops.PARAM, name="buf"), UPat.var("i"))
    pm = PatternMatcher([(UPat(Ops.STORE, src=(UPat(Ops.INDEX, src=index), UPat.var("val")), name="x", allow_any_len=True), mark),
                         (UPat(Ops.STORE, src=(UPat(Ops.INDEX, src=index + (UPat.var("g"),)), UPat.var("val")), name="x",
                               allow_any_len=True), mark)])
    return pm.rewrite(x) is not None
  out, inp, reg = buf(0, dtypes.float32, 4096), buf(1, dtypes.float32, 4096), UOp(Ops.DEFINE_REG, dtypes.float32.ptr(8), (), 0)
  r = rng(512)
  i = r * c(8)
  v = UOp(Ops.LOAD, dtypes.float32.vec(8), (inp.index(i),))
  lanes = UOp(Ops.VECTORIZE, dtypes.bool.vec(8), tuple(r < c(k) for k in range(8)))
  half = UOp(Ops.VECTORIZE, dtypes.bool.vec(4), tuple(r < c(k) for k in range(4)))
  stores = [UOp(Ops.STORE, dtypes.void, (out.index(i), v)), UOp(Ops.STORE, dtypes.void, (out.index(i, valid=r < c(3)), v)),
            UOp(Ops.STORE, dtypes.void, (out.index(i, valid=lanes), v)), UOp(Ops.STORE, dtypes.void, (out.index(i, valid=half), v)),
            UOp(Ops.STORE, dtypes.void, (out.index(i), v, r)), UOp(Ops.STORE, dtypes.void, (reg.index(c(0)), v)),
            UOp(Ops.STORE, dtypes.void, (out.index(i), v.gep(0))), UOp(Ops.STORE, dtypes.void, (out.index(i), v), NT_ARG)]
  rule = pm_streaming_stores(1024, 32)
  got = [rule.rewrite(x) is not None for x in stores]
  assert got == [by_patterns(x, 1024, 32) for x in stores]
  assert got == [True, True, True, False, True, False, False, False]
  big = pm_streaming_stores(1 << 30, 32)
  assert [big.rewrite(x) is not None for x in stores] == [by_patterns(x, 1 << 30, 32) for x in stores] == [False] * 8

def test_rule_walks_no_store_into_a_small_output(monkeypatch):
  # an output under a quarter of min_bytes stays plain whatever the value reads: decided before a walk of the store's graph (one
  # per vector store of the kernel), as the bounds of the buffers it reads need
  walked = []
  orig = UOp.toposort
  def toposort(self: UOp, gate=None):
    if self.op is Ops.STORE: walked.append(self)
    return orig(self, gate)
  monkeypatch.setattr(UOp, "toposort", toposort)
  assert not _marked(_store(4096, lambda r: r * c(8)), min_bytes=1 << 20) and not walked
  assert _marked(_store(4096, lambda r: r * c(8))) and walked

def _kernel_marked(t: Tensor, min_bytes: int, scratch_bytes: int | None = None) -> list[bool]:
  """Whether the rule marks a store of each of t's kernels, optimized and lowered as get_program does before the renderer rules
  (`scratch_bytes`: the renderer's Renderer.scratch_bytes unless given)."""
  from core.codegen.opt import optimize
  from core.codegen.opt.expander import expand_kernel
  from core.codegen.lowerer import lower_kernel
  items, _, _ = create_schedule([t.uop])
  rnd = device("LLVM").renderer
  sb = rnd.scratch_bytes if scratch_bytes is None else scratch_bytes
  sinks = [lower_kernel(expand_kernel(optimize(it.ast, rnd)), None, rnd.threads, sb)[0] for it in items if it.ast.op is Ops.SINK]
  return [_marked(s, min_bytes) for s in sinks]

def test_layernorm_permute_and_softmax_stream():
  # the output alone under the bound, with its input over it: layernorm's and a permute's outputs stream; softmax's too where
  # its exps are stashed in a per-thread row (core.codegen.stash), not where they are stashed in the output and scaled there
  x = Tensor(np.zeros((64, 256), np.float32)).realize()
  w = Tensor(np.zeros(256, np.float32)).realize()
  nbytes = 64 * 256 * 4
  assert _kernel_marked(x.layernorm(axis=-1) * w + w, nbytes + 1) == [True]
  assert _kernel_marked(x.reshape(4, 16, 16, 16).permute(0, 2, 3, 1).contiguous(), nbytes + 1) == [True]
  assert _kernel_marked(x.reshape(4, 16, 16, 16).permute(0, 2, 3, 1).contiguous(), 2 * nbytes + 1) == [False]
  assert _kernel_marked(x.softmax(-1), 1, scratch_bytes=4096) == [True]
  assert _kernel_marked(x.softmax(-1), 1, scratch_bytes=0) == [False]

@pytest.mark.parametrize("shape", [(4096, 1024), (3000, 1000)])
def test_big_layernorm_matches_numpy(shape):
  # 16 MiB in and out on (4096, 1024): streamed wherever 7/8 of the last-level cache is under 32 MiB + 8 KiB
  r = np.random.default_rng(3)
  x, w, b = r.standard_normal(shape, dtype=np.float32), r.standard_normal(shape[1], dtype=np.float32), r.standard_normal(shape[1], dtype=np.float32)
  got = (Tensor(x).layernorm(axis=-1) * Tensor(w) + Tensor(b)).numpy()
  x64 = x.astype(np.float64)
  want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w + b
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

def test_stream_width():
  assert [stream_width(b, 32) for b in (16, 32, 64, 8, 48)] == [16, 32, 32, 0, 16]
  assert [stream_width(64, 64, a) for a in (64, 128, 32, 16, 8, 0)] == [64, 64, 32, 16, 0, 64]
  assert [stream_width(b, 64) for b in (64, 128, 32)] == [64, 64, 32]
  assert NT_MIN_BYTES >= 4 << 20

def test_stream_bound_counts_at_most_a_ccx_l3():
  # 7/8 of the last-level cache, at least 4 MiB, and at most 7/8 of 32 MiB whatever sysfs reports (a VM guest reads its socket's L3)
  assert [nt_min_bytes(b << 20) for b in (32, 16, 2, 0, 480)] == [28 << 20, 14 << 20, 4 << 20, 4 << 20, 28 << 20]

def _padded_rows(rows: int, cols: int, count: int, scalar_gate: bool) -> list[UOp]:
  """out = in + in over rows of `cols` floats in vectors of `count` lanes, the last one gated per lane (heuristic._row_pass's
  padded row), or every vector of the last row off by a scalar gate; the store marked NT_ARG."""
  out, inp = buf(0, dtypes.float32, rows * cols), buf(1, dtypes.float32, rows * cols)
  lin = Linear()
  lin.add(out, inp)
  row, v = lin.add(rng(rows, 0)), lin.add(rng(-(-cols // count), 1))
  i = row * c(cols) + v * c(count)
  gate = row < c(rows - 1) if scalar_gate else \
    UOp(Ops.VECTORIZE, dtypes.bool.vec(count), tuple(v * c(count) + c(k) < c(cols) for k in range(count)))
  ld = UOp(Ops.LOAD, dtypes.float32.vec(count), (inp.index(i, valid=gate),))
  lin.add(UOp(Ops.STORE, dtypes.void, (out.index(i, valid=gate), ld + ld), NT_ARG).end(v).end(row))
  return lin.uops

@pytest.mark.skipif(not host_streams(), reason="streaming stores are rendered on x86-64 hosts only")
@pytest.mark.parametrize("ren,scalar_gate", [("LLVM", False), ("LLVM", True), ("C", True)])
@pytest.mark.parametrize("cols", [1000, 1001, 1024, 12])
def test_gated_marked_stores_render_and_run(ren, scalar_gate, cols):
  # whole pieces of a padded row's last vector stream, a partial piece is a masked store, an all-off piece stores nothing (rows
  # of 1000: 32-byte aligned pieces; 1001: misaligned, plain at run time); a row gated off entirely is left as it was
  rows, count = 3, 8 if scalar_gate else 16
  uops = _padded_rows(rows, cols if not scalar_gate else cols - cols % count, count, scalar_gate)
  n = rows * (cols if not scalar_gate else cols - cols % count)
  assert MARKS[ren][0] in device(ren).renderer.render("nt_kernel", uops)
  x = np.arange(n, dtype=np.float32) - 300
  got = run(ren, uops, [np.full(n, -1, np.float32), x], name="nt_kernel")[0]
  want = x + x
  if scalar_gate: want[-n // rows:] = -1
  np.testing.assert_array_equal(got, want)

def _streamed_renderer(ren: str, min_bytes: int, scratch_bytes: int):
  """A copy of `ren`'s renderer whose rules stream stores of kernels of `min_bytes` and more, with `scratch_bytes` of stash."""
  from plugin_cpu import renderer as R
  rnd = copy.copy(device(ren).renderer)
  old, R.NT_MIN_BYTES = R.NT_MIN_BYTES, min_bytes
  try: rnd.extra_matcher = R.llvm_rules(rnd.flags, rnd.simd_width) if ren == "LLVM" else R.extra_rules(rnd.simd_width)
  finally: R.NT_MIN_BYTES = old
  rnd.scratch_bytes = scratch_bytes
  return rnd

@pytest.mark.skipif(not host_streams(), reason="streaming stores are rendered on x86-64 hosts only")
@pytest.mark.parametrize("ren", RENDERERS)
@pytest.mark.parametrize("shape", [(64, 1000), (16, 1001), (8, 1024), (5, 7), (4, 3000)])
def test_streamed_softmax_matches_numpy(ren, shape):
  # the stash in a per-thread row (scratch 8 KiB: rows of 3000 floats stash in the output) and every store that can stream
  # streamed, gated (AVX-512's padded rows of 1000 and 1001) or not, aligned or not
  from core.engine.run import CompiledRunner
  from core.device.buffer import Buffer
  x = np.random.default_rng(4).standard_normal(shape).astype(np.float32) * 3
  items, _, _ = create_schedule([Tensor(np.zeros(shape, np.float32)).realize().softmax(-1).uop])
  (ast,) = [it.ast for it in items if it.ast.op is Ops.SINK]
  prog = get_program(ast, _streamed_renderer(ren, 1, 8 << 10))
  uops = list(program_uops(prog))
  # a row held in registers (7 columns padded to one 8-lane vector on AVX2) has no reduction loop and nothing to stash
  if any(u.op is Ops.RANGE and u.arg[-1] is AxisType.REDUCE for u in uops):
    stash = next(u for u in uops if u.op is Ops.STORE and u.arg == STASH_ARG)
    to = stash.src[0].src[0]
    while to.op is Ops.AFTER: to = to.src[0]
    assert to.op is (Ops.DEFINE_REG if shape[1] <= 1024 else Ops.PARAM)
  else: assert shape[1] < 8 and not any(u.op is Ops.STORE and u.arg == STASH_ARG for u in uops)
  if shape[1] in (1000, 1024): assert MARKS[ren][0] in program_source(prog)
  out, inp = Buffer("CPU", x.size, dtypes.float32).allocate(), Buffer("CPU", x.size, dtypes.float32).allocate()
  inp.copyin(memoryview(x))
  CompiledRunner(prog, device(ren))([out, inp], wait=True)
  got = np.empty_like(x)
  out.copyout(memoryview(got))
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)

HEADS = re.compile(r"icmp slt i32 %ridx\d+, (\d+)\n  br i1 %t\d+, label %loop\d+\.body")
TAIL_GATE = re.compile(r"%v\d+ = icmp slt i32 %ridx\d+, \d+")   # a loop's gate of its last vector, in its body

@pytest.mark.skipif(not host_streams(), reason="streaming stores are rendered on x86-64 hosts only")
@pytest.mark.parametrize("out_offset", [0, 4])
def test_streamed_padded_rows_test_their_buffer_once_and_peel(monkeypatch, out_offset):
  # softmax over rows of 1000 floats in 16-lane vectors, every store streamed: the output loop's index is a known multiple of its
  # 32-byte pieces, so a piece is aligned exactly where the buffer is: its test is the buffer's (one for the kernel), not one per
  # piece, and the loop runs its 62 whole vectors unmasked, its partial last one peeled off after it (plugin_cpu.peel) with its
  # whole piece streamed too. An output 4 bytes off alignment takes the plain stores
  from plugin_cpu import renderer as R
  from core.codegen.program import launch_vals
  monkeypatch.setattr(R, "NT_MIN_BYTES", 1)
  rnd = copy.copy(device("LLVM").renderer)
  rnd.target(AVX512)   # its rules now stream every store
  x = np.random.default_rng(5).standard_normal((64, 1000)).astype(np.float32) * 3
  x[1, -1], x[2, -9] = x[1].max() + 1, -np.inf   # a row max and a -inf in the partial last vector
  (ast,) = [it.ast for it in create_schedule([Tensor(np.zeros(x.shape, np.float32)).realize().softmax(-1).uop])[0] if it.ast.op is Ops.SINK]
  spec = get_program(ast, rnd)
  src = program_source(spec)
  heads = HEADS.findall(src)
  assert "!nontemporal" in src and heads.count("62") == 2 and "63" not in heads, heads
  assert set(re.findall(r"ptrtoint ptr (%\w+) to i64", src)) == {"%data0"} and not TAIL_GATE.search(src), src
  if not AVX512 <= host_flags(): pytest.skip("values need AVX-512 (the structure is checked)")
  dev = device("LLVM")
  prg = dev.runtime(spec.arg.name, dev.compiler.compile(src))
  out = dev.allocator._offset(dev.allocator.alloc(x.nbytes + out_offset), x.nbytes, out_offset) if out_offset else dev.allocator.alloc(x.nbytes)
  inp = dev.allocator.alloc(x.nbytes)
  dev.allocator._copyin(out, memoryview(np.full(x.size, np.nan, np.float32)).cast("B"))
  dev.allocator._copyin(inp, memoryview(x).cast("B"))
  prg(out, inp, global_size=spec.arg.global_size, vals=launch_vals(spec.arg, {}), wait=True)
  got = np.empty_like(x)
  dev.allocator._copyout(memoryview(got).cast("B"), out)
  e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
  np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
