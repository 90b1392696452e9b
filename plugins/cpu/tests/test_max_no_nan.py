"""softmax's and log_softmax's row max needs no NaN kept (MAX_NO_NAN, core.ir.ops): a NaN in a row makes x - max NaN there
whatever the max is, so the row's sum of exps and every output of the row are NaN anyway. The flag is part of the graph (the max's
REDUCE_AXIS arg, its REDUCE's and MAXes' args); the LLVM renderer renders such a max `a > b ? a : b` (x86's vmaxps) where a max
that keeps NaN takes a NaN fix-up (vcmpunordps + vblendvps on AVX2, vfixupimmps on AVX-512). Sources rendered for both widths;
values on the host: NaN where the fix-up's kernel gave NaN, every other output bit for bit, and numpy's."""
from __future__ import annotations
import re
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, MAX_NO_NAN
from core.ir.pattern import UPat, PatternMatcher, graph_rewrite
from core.schedule.kernelize import create_schedule
from core.engine.run import buffer_of
from core.codegen.program import get_program, launch_vals, program_source
from plugin_cpu.renderer import llvm_rules
from cpu_kernels import device, host_like_renderer, run_on_renderer

AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512vl", "avx512dq"}
NAN_FIXUP = r"fcmp uno (<\d+ x )?float|fixupimm|@llvm\.x86\.(avx512\.max\.ps\.512|avx\.max\.ps\.256|sse\.max\.ps)\("
ROW_OPS = {"softmax": lambda t: t.softmax(-1), "log_softmax": lambda t: t.log_softmax(-1),
           "softmax (general graph)": lambda t: t.softmax(-1, dtype="float32")}

# a REDUCE without the flag: the kernel as it was rendered before MAX_NO_NAN
pm_keep_nan = PatternMatcher([(UPat(Ops.REDUCE, name="r", custom=lambda r: r.arg == (Ops.MAX, MAX_NO_NAN)), lambda r: r.replace(arg=Ops.MAX))])

def _rows(cols: int) -> np.ndarray:
  """Normal rows and rows with NaN (one, or first, or last), +inf, +inf and NaN, all -inf, half -inf."""
  x = (np.random.default_rng(cols).standard_normal((10, cols)) * 3).astype(np.float32)
  x[1, cols // 2], x[2, 0], x[3, -1], x[4, :], x[5, 3], x[6, :2], x[7, ::2] = np.nan, np.nan, np.nan, -np.inf, np.inf, [np.inf, np.nan], -np.inf
  return x

def _kernel(fn, x: np.ndarray):
  """The one kernel of fn(Tensor(x)): (its schedule item, its buffers allocated)."""
  (item,) = [it for it in create_schedule([fn(Tensor(x).realize()).uop])[0] if it.ast.op is Ops.SINK]
  bufs = [buffer_of(b) for b in item.bufs]
  for b in bufs:
    if not b.is_allocated(): b.allocate()
  return item, bufs

def _run(ast, bufs, rnd) -> np.ndarray:
  dev = device("LLVM")
  spec = get_program(ast, rnd)
  prg = dev.runtime(spec.arg.name, dev.compiler.compile(program_source(spec)))
  prg(*[b._buf for b in bufs], global_size=spec.arg.global_size, vals=launch_vals(spec.arg, {}), wait=True)
  return bufs[0].numpy().copy()

@pytest.mark.parametrize("name", list(ROW_OPS))
def test_softmax_and_log_softmax_row_max_is_flagged_max_alone_is_not(name):
  reds = [u for u in ROW_OPS[name](Tensor(np.zeros((4, 8), np.float32))).uop.toposort() if u.op is Ops.REDUCE_AXIS]
  assert [u.arg for u in reds if u.arg[0] is Ops.MAX] == [(Ops.MAX, (1,), MAX_NO_NAN)]
  assert Tensor(np.zeros((4, 8), np.float32)).max(-1).uop.src[0].arg == (Ops.MAX, (1,))

@pytest.mark.parametrize("simd, flags", [(32, AVX2), (64, AVX512)], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("name", list(ROW_OPS))
@pytest.mark.parametrize("cols", [1000, 4096, 17])
def test_row_max_without_nan_renders_no_nan_fixup(name, cols, simd, flags):
  rnd = host_like_renderer("LLVM", simd)
  rnd.extra_matcher = llvm_rules(flags, simd)
  item, _ = _kernel(ROW_OPS[name], np.zeros((8, cols), np.float32))
  src = program_source(get_program(item.ast, rnd))
  assert not re.search(NAN_FIXUP, src) and re.search(r"fcmp ogt (<\d+ x )?float", src), src
  # the kernel with a max that keeps NaN has the fix-up (a NaN compare; whole vectors: vmaxps + blend or vfixupimmps), and so
  # has a row max alone
  assert re.search(NAN_FIXUP, program_source(get_program(graph_rewrite(item.ast, pm_keep_nan), rnd)))
  assert re.search(NAN_FIXUP, program_source(get_program(_kernel(lambda t: t.max(-1), np.zeros((8, cols), np.float32))[0].ast, rnd)))

@pytest.mark.parametrize("name", list(ROW_OPS))
@pytest.mark.parametrize("cols", [1000, 1001, 256, 17])
def test_row_max_without_nan_gives_the_values_of_the_max_that_keeps_nan(name, cols):
  x = _rows(cols)
  rnd = device("LLVM").renderer
  item, bufs = _kernel(ROW_OPS[name], x)
  got = _run(item.ast, bufs, rnd).reshape(x.shape)
  want = _run(graph_rewrite(item.ast, pm_keep_nan), bufs, rnd).reshape(x.shape)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  assert np.isnan(got[[1, 2, 3, 4, 5, 6]]).all() and not np.isnan(got[[0, 7, 8, 9]]).any()
  np.testing.assert_array_equal(np.where(np.isnan(got), 0, got).view(np.uint32), np.where(np.isnan(want), 0, want).view(np.uint32))
  with np.errstate(invalid="ignore"):   # numpy in float64, its max keeping NaN (no torch in the plugin's own test environment)
    m = x.astype(np.float64) - x.max(-1, keepdims=True)
    e = np.exp(m)
    ref = m - np.log(e.sum(-1, keepdims=True)) if name == "log_softmax" else e / e.sum(-1, keepdims=True)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)   # NaN where numpy's NaN

def test_c_renderer_softmax_rows_with_nan_match_numpy():
  # the C renderer renders every max with NaN kept (it ignores the flag): the same values
  run_on_renderer("C", """
x = np.random.default_rng(3).standard_normal((6, 1000)).astype(np.float32) * 3
x[1, 500], x[2, 0], x[3, :], x[4, 3], x[5, :2] = np.nan, np.nan, -np.inf, np.inf, [np.inf, np.nan]
with np.errstate(invalid="ignore"):
  m = x.astype(np.float64) - x.max(-1, keepdims=True)
  e = np.exp(m)
  np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(Tensor(x).log_softmax(-1).numpy(), m - np.log(e.sum(-1, keepdims=True)), rtol=1e-5, atol=1e-5)
print("ok")""")
