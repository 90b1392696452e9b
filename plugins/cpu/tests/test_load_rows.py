"""Vectors gathered a lane at a time, lane k of the j-th at `base + k*S + j` (a 3x3 conv's weight panel, a residual add's NCHW
input), are read in AVX-512 code as the tile's rows: one masked vector load per lane's row, transposed in registers
(plugin_cpu.load_rows). Checked on the rule's output lane by lane, on the sources of a conv with a residual add for an AVX-512
target (any host), and against numpy."""
import re
import numpy as np
from cpu_kernels import AVX512, host_like_renderer, run_item
from core import Tensor
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from core.schedule.kernelize import create_schedule
import plugin_cpu.load_rows as LR
from plugin_cpu.load_rows import RowLoads, column_rows, pm_load_rows
from plugin_cpu.renderer import host_flags
from plugin_cpu.tile_rows import ROW_ARG

def _load_rows(sink: UOp) -> UOp | None:
  """The kernel with its tiles of gathered columns read as rows in one substitution (the reference for pm_load_rows' per-column
  rule), or None where it has none."""
  return sink.substitute(sub) if (sub := column_rows(sink)) else None

def _param(slot: int) -> UOp: return UOp(Ops.PARAM, dtypes.float32.ptr(4096), arg=slot)

def _gathers(buf: UOp, base: UOp, stride: int, cols: list[int], lanes: int = 16) -> list[UOp]:
  """Column j of `cols`: a VECTORIZE of `lanes` scalar loads at base + j + k*stride."""
  return [UOp.vectorize(*[UOp(Ops.LOAD, dtypes.float32, (buf.index(base + (j + k * stride)),)) for k in range(lanes)]) for j in cols]

def _sink(vecs: list[UOp], out: UOp) -> UOp:
  return UOp(Ops.SINK, dtypes.void, tuple(out.index(UOp.const(dtypes.int32, 16 * i)).store(v) for i, v in enumerate(vecs)))

def _lane(u: UOp, k: int) -> tuple[UOp, int]:
  """(the row load, its lane) that lane k of u is, through the transpose's GEPs and VECTORIZEs."""
  while u.op is not Ops.LOAD:
    if u.op is Ops.VECTORIZE: u, k = u.src[k], 0
    elif u.op is Ops.GEP: u, k = u.src[0], u.arg[k]
    else: raise AssertionError(u.op)
  return u, k

def _stored_values(sink: UOp) -> list[UOp]: return [s.src[1] for s in sink.src]

def test_gathered_columns_are_rows_transposed():
  buf, base = _param(1), UOp.variable("b", 0, 64)
  sink = _load_rows(_sink(_gathers(buf, base, 100, [5, 6, 7]), _param(0)))
  assert sink is not None
  rows = [u for u in sink.toposort() if u.op is Ops.LOAD]
  # 16 rows of 3 floats, each one vector of 4 lanes with the fourth masked off, none loaded a lane at a time
  assert len(rows) == 16 and all(r.dtype == dtypes.float32.vec(4) and r.arg == ROW_ARG for r in rows)
  assert all([g.arg for g in rows[0].src[0].src[2].src] == [True, True, True, False] for _ in rows)
  # column j's lane k is row k's lane j, row k reading at base + 5 + 100*k
  for j, col in enumerate(_stored_values(sink)):
    for k in range(16):
      row, lane = _lane(col, k)
      assert lane == j and row.src[0].src[0] is buf and row.src[0].src[1] is base + (5 + 100 * k)

def test_longer_rows_go_in_pieces_of_at_most_eight():
  buf, base = _param(1), UOp.variable("b", 0, 64)
  sink = _load_rows(_sink(_gathers(buf, base, 200, list(range(14))), _param(0)))
  rows = [u for u in sink.toposort() if u.op is Ops.LOAD]
  # 14 columns as 7 + 7: 32 rows of 8 lanes under a 7-lane mask
  assert len(rows) == 32 and all(r.dtype.count == 8 and [g.arg for g in r.src[0].src[2].src].count(True) == 7 for r in rows)
  for j, col in enumerate(_stored_values(sink)):
    for k in range(16):
      row, lane = _lane(col, k)
      assert lane == j % 7 and row.src[0].src[1] is base + (7 * (j // 7) + 200 * k)

def test_what_is_no_tile_keeps_its_gathers():
  buf, base = _param(1), UOp.variable("b", 0, 64)
  assert _load_rows(_sink(_gathers(buf, base, 100, [0]), _param(0))) is None   # one column
  assert _load_rows(_sink(_gathers(buf, base, 100, [0, 2]), _param(0))) is None   # columns not neighbours
  assert _load_rows(_sink(_gathers(buf, base, 0, [0, 1]), _param(0))) is None   # broadcasts
  # a buffer the kernel stores to: its loads keep their order with its stores
  sink = _sink(_gathers(buf, base, 100, [0, 1]), _param(0))
  assert _load_rows(sink.replace(src=sink.src + (buf.index(base).store(UOp.const(dtypes.float32, 1.0)),))) is None

def test_the_rule_replaces_each_column_as_the_substitution_does():
  # pm_load_rows with the kernel's RowLoads as ctx replaces each column where the walk meets it: the graph load_rows gives
  buf, base = _param(1), UOp.variable("b", 0, 64)
  for cols in ([5, 6, 7], list(range(14))):
    sink = _sink(_gathers(buf, base, 100, cols), _param(0))
    assert (out := graph_rewrite(sink, pm_load_rows, RowLoads(sink))) is _load_rows(sink) and out is not sink
  assert graph_rewrite(sink, pm_load_rows) is sink   # no ctx (the matcher on its own): nothing found

def test_the_renderers_rules_read_a_convs_rows_as_the_substituted_kernel():
  # the LLVM renderer's rules with its rules_ctx give the kernel whose columns were substituted first, then rewritten
  from core.codegen.program import get_program
  z = np.zeros((1, 32, 14, 14), np.float32)
  rnd = host_like_renderer("LLVM", 64, threads=0)
  rnd.target(AVX512)
  seen: list[UOp] = []
  make = rnd.rules_ctx
  rnd.rules_ctx = lambda sink: seen.append(sink) or make(sink)   # type: ignore[method-assign]
  get_program(_conv_item(z, np.zeros((32, 32, 3, 3), np.float32), z).ast, rnd)
  (sink,) = seen
  assert (rows := _load_rows(sink)) is not None
  out = graph_rewrite(sink, rnd.extra_matcher, make(sink))
  assert out is graph_rewrite(rows, rnd.extra_matcher) and not any(_column_of_loads(u) for u in out.toposort())

def _column_of_loads(u: UOp) -> bool: return u.op is Ops.VECTORIZE and u.dtype.count > 1 and all(s.op is Ops.LOAD for s in u.src)

def _conv_item(x: np.ndarray, w: np.ndarray, res: np.ndarray):
  out = (Tensor(x).conv2d(Tensor(w), padding=1) + Tensor(res)).relu()
  (item,) = [it for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK]
  return item

def _ref(x: np.ndarray, w: np.ndarray, res: np.ndarray) -> np.ndarray:
  n, c, h, wd = x.shape
  p = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  out = sum(np.einsum("nchw,oc->nohw", p[:, :, i:i + h, j:j + wd], w[:, :, i, j]) for i in range(3) for j in range(3))
  return np.maximum(out + res, 0)

def test_a_conv_reads_its_weight_panel_and_residual_as_rows():
  from core.codegen.program import get_program, program_source
  z = np.zeros((1, 32, 14, 14), np.float32)
  rnd = host_like_renderer("LLVM", 64, threads=0)
  rnd.target(AVX512)
  src = program_source(get_program(_conv_item(z, np.zeros((32, 32, 3, 3), np.float32), z).ast, rnd))
  masks = re.findall(r"@llvm.masked.load.v(\d+)f32.p0\(ptr %\w+, i32 4, <\d+ x i1> <([^>]*)>", src)
  # the weights and the residual: 32 channels' rows of 3 taps (a vector of 4, 3 lanes on) and of 7 pixels (8, 7 on)
  assert sum(n == "4" and m.count("true") == 3 for n, m in masks) == 32, src
  assert sum(n == "8" and m.count("true") == 7 for n, m in masks) == 32, src
  # what is left loaded a float at a time: the input pixels each tap broadcasts (9), not the 96 + 224 gathered lanes
  assert src.count("= load float") <= 9

def test_conv_with_residual_gives_numpys_values():
  r = np.random.default_rng(3)
  shape = (2, 32, 14, 14)
  x, res = r.standard_normal(shape).astype(np.float32), r.standard_normal(shape).astype(np.float32)
  w = r.standard_normal((32, 32, 3, 3)).astype(np.float32)
  simd = 64 if "avx512f" in host_flags() else 32
  bufs, src = run_item(_conv_item(x, w, res), host_like_renderer("LLVM", simd, threads=0))
  if simd == 64: assert "@llvm.masked.load.v8f32" in src and "@llvm.masked.load.v4f32" in src
  np.testing.assert_allclose(bufs[0].numpy().reshape(shape), _ref(x, w, res), rtol=1e-4, atol=1e-4)

def test_a_panel_copied_through_the_transposes_keeps_its_prefetches(monkeypatch):
  # the weight panel's copy stores the transposes' shuffles: prefetch._copied sees through them to the loads, so the conv
  # (AVX-512, 2 MiB L2: the padded input's copy and the packed weights) prefetches as it did with the gathers
  from core.codegen.program import get_program, program_source
  z = np.zeros((1, 64, 28, 28), np.float32)
  ast = _conv_item(z, np.zeros((64, 64, 3, 3), np.float32), z).ast
  def prefetches(on: bool) -> int:
    monkeypatch.setattr(LR, "LOAD_ROWS", on)
    rnd = host_like_renderer("LLVM", 64, threads=0)
    rnd.l2_bytes = 2 << 20
    rnd.target(AVX512)
    src = program_source(get_program(ast, rnd))
    assert ("@llvm.masked.load.v4f32" in src) == on
    return src.count("call void @llvm.prefetch")
  assert prefetches(True) == prefetches(False) > 0
