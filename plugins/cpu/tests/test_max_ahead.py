"""Without AVX-512 a softmax's exp pass is compute-bound: the next row's max runs after the row's reductions, before its output
loop (after it where the output streams), and the first row's before the row loop (core.codegen.stash.max_ahead). The values
are the plain order's, bit for bit."""
from __future__ import annotations
import copy, re
import numpy as np
import pytest
from core import Tensor
from core.ir.ops import Ops, AxisType
import core.codegen.stash as stash
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source, program_uops
from cpu_kernels import host_like_renderer, run_rendered

AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512vl", "avx512dq", "avx512bw"}

def _renderer(ahead: bool, simd: int = 32, stream: int = 0):
  """`stream`: its stream_min_bytes (0: unknown, never streamed; 1: every kernel streams), not the host's."""
  rnd = copy.copy(host_like_renderer("LLVM", simd))
  rnd.max_ahead, rnd.stream_min_bytes = ahead, stream
  return rnd

def _uops(fn, shape, rnd):
  (item,) = [it for it in create_schedule([fn(Tensor(np.zeros(shape, np.float32))).uop])[0] if it.ast.op is Ops.SINK]
  return program_uops(get_program(item.ast, rnd))

def test_only_cpus_without_vscalefps_take_it():
  rnd = copy.copy(host_like_renderer("LLVM", 32))
  rnd.target(AVX2)
  assert rnd.max_ahead is True
  rnd.target(AVX512)
  assert rnd.max_ahead is False

def _loops(uops):
  """(axis kind, holds a max update) of each loop, in program order."""
  out, stack = [], []
  for u in uops:
    if u.op is Ops.RANGE:
      stack.append(len(out))
      out.append((u.arg[1], False))
    elif u.op is Ops.END and stack: stack.pop()
    elif u.op is Ops.STORE and stack and u.src[1].op is Ops.MAX: out[stack[-1]] = (out[stack[-1]][0], True)
  return out

@pytest.mark.parametrize("fn", [lambda t: t.softmax(-1), lambda t: t.log_softmax(-1)])
@pytest.mark.parametrize("shape", [(4096, 1000), (64, 1001)])
def test_next_rows_max_runs_after_the_rows_sum(fn, shape, monkeypatch):
  # (a streamed softmax's output loop is then pipelined into the exp loop: test_pipelined_rows)
  monkeypatch.setattr(stash, "PIPELINE", False)
  nbytes = 2 * 4 * shape[0] * shape[1]   # the kernel's buffers: input and output
  # where the output streams (its buffers total the renderer's stream_min_bytes) the next max is the row's last loop, after
  # the output loop; else (a higher bound, or none known) before it
  for stream, last in ((0, False), (nbytes + 1, False), (nbytes, True), (1, True)):
    loops = _loops(_uops(fn, shape, _renderer(True, stream=stream)))
    maxes = [i for i, (_, m) in enumerate(loops) if m]
    rows = next(i for i, (kind, _) in enumerate(loops) if kind is AxisType.LOOP)
    sums = [i for i, (kind, m) in enumerate(loops) if kind is AxisType.REDUCE and not m and i > rows]
    outs = [i for i, (kind, _) in enumerate(loops) if kind is AxisType.LOOP and i > rows]
    # the first row's max before the row loop, the next row's after the exp sum, and before the output loop (the row's last)
    # or after it (the next max last)
    assert len(maxes) == 2 and len(outs) == 1 and maxes[0] < rows < sums[0] < maxes[1], (stream, loops)
    assert (maxes[1] == len(loops) - 1 and sums[0] < outs[0] < maxes[1]) if last else outs[0] == len(loops) - 1, (stream, loops)
  plain = _loops(_uops(fn, shape, _renderer(False)))
  assert [m for _, m in plain].count(True) == 1 and plain[0] == (AxisType.LOOP, False)

@pytest.mark.parametrize("stream", [0, 1])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("rows, cols", [(10, 1000), (10, 1001), (3, 17), (2, 256), (1, 1000)])
def test_values_are_the_plain_orders(op, rows, cols, stream):
  x = (np.random.default_rng(cols + rows).standard_normal((rows, cols)) * 3).astype(np.float32)
  if rows >= 10:
    x[1, cols // 2], x[2, :], x[3, ::2], x[9, 0] = np.nan, -np.inf, -np.inf, np.inf
    x[4] += 3e38   # the largest maxima next to small ones: each row takes its own
    x[5] -= 3e38
    x[6, : cols // 2] = -150
    x[7] *= 1e30
  fn = lambda t: getattr(t, op)(-1)
  got, want = (run_rendered(_renderer(ahead, stream=stream), fn, x)[0].reshape(x.shape) for ahead in (True, False))
  np.testing.assert_array_equal(got, want)   # NaN rows included
  x64 = x.astype(np.float64)
  ok = np.isfinite(x64).all(-1)
  y = x64[ok] - x64[ok].max(-1, keepdims=True)
  ref = np.exp(y) / np.exp(y).sum(-1, keepdims=True) if op == "softmax" else y - np.log(np.exp(y).sum(-1, keepdims=True))
  np.testing.assert_allclose(got[ok], ref, rtol=1e-5, atol=1e-5 if op == "log_softmax" else 1e-7)

@pytest.mark.parametrize("stream", [0, 1])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_the_next_rows_max_tests_the_next_row(op, stream):
  # rows padded with zeros around rows near 200, and rows shifted by 100 a row (an arange in the kernel): the next row's max tests
  # the next row's padding and takes its shift, not this row's (this row's gave log_softmax -inf where a row follows a pad row)
  x = (np.random.default_rng(5).standard_normal((1000, 1000)) + 200).astype(np.float32)
  r = lambda t: Tensor.arange(t.shape[0]).reshape(t.shape[0], 1).cast("float32") * 100
  for fn, x64 in ((lambda t: getattr(t.pad(((1, 1), (0, 0))), op)(-1), np.pad(x.astype(np.float64), ((1, 1), (0, 0)))),
                  (lambda t: getattr(t + r(t), op)(-1), (x + np.arange(1000, dtype=np.float32)[:, None] * 100).astype(np.float64))):
    assert [m for _, m in _loops(_uops(fn, x.shape, _renderer(True, stream=stream)))].count(True) == 2   # it runs ahead there
    got, want = (run_rendered(_renderer(ahead, stream=stream), fn, x)[0].reshape(x64.shape) for ahead in (True, False))
    np.testing.assert_array_equal(got, want)
    y = x64 - x64.max(-1, keepdims=True)
    ref = np.exp(y) / np.exp(y).sum(-1, keepdims=True) if op == "softmax" else y - np.log(np.exp(y).sum(-1, keepdims=True))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 if op == "log_softmax" else 1e-7)

@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_a_max_of_another_reduction_keeps_the_plain_order(op):
  # softmax of x - the row's mean: the max reads the row's mean, which the next row doesn't have yet (taken ahead, it read this
  # row's, -inf/NaN rows; with the value's row made the next one, a cycle)
  x = (np.random.default_rng(6).standard_normal((1000, 1000)) + (np.arange(1000) % 2 * 400)[:, None]).astype(np.float32)
  fn = lambda t: getattr(t - t.mean(-1, keepdim=True), op)(-1)
  got, want = (run_rendered(_renderer(ahead), fn, x)[0].reshape(x.shape) for ahead in (True, False))
  np.testing.assert_array_equal(got, want)
  x64 = x.astype(np.float64) - x.astype(np.float64).mean(-1, keepdims=True)
  y = x64 - x64.max(-1, keepdims=True)
  ref = np.exp(y) / np.exp(y).sum(-1, keepdims=True) if op == "softmax" else y - np.log(np.exp(y).sum(-1, keepdims=True))
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 if op == "log_softmax" else 1e-7)

@pytest.mark.parametrize("shape", [(4096, 1000), (512, 1024)])
def test_the_exp_pass_prefetches_the_rows_ahead(shape, monkeypatch):
  # the exp pass is the second over the row, under the row loop the next row's max shares (the first row's max is before it):
  # its loads prefetch the row rows_ahead on, as the plain order's second pass does, and no other loop prefetches
  # (on a 2 MiB L2 too: prefetch.ROWS_AHEAD_BIG_L2 is for the memory-bound passes, and this one is compute-bound)
  import plugin_cpu.prefetch as prefetch
  def loops(l2_bytes: int | None = None) -> list[str]:   # each loop body's text, to the next loop's header
    rnd = _renderer(True)
    if l2_bytes is not None: rnd.l2_bytes = l2_bytes
    src = program_source(get_program(item.ast, rnd))
    return [b.split(".head:")[0] for b in re.split(r"\nloop\d+\.body:", src)[1:]]
  (item,) = [it for it in create_schedule([Tensor(np.zeros(shape, np.float32)).softmax(-1).uop])[0] if it.ast.op is Ops.SINK]
  for l2 in (None, 2 << 20):
    fetching = [b for b in loops(l2) if "@llvm.prefetch" in b]
    assert len(fetching) == 1 and re.search(r"= shl <\d+ x i32>", fetching[0]), fetching   # the exp pass (its exp2's exponent)
    assert set(re.findall(r"getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch", fetching[0])) == \
      {str(shape[1] * prefetch.rows_ahead(4 * shape[1]))}
  monkeypatch.setattr(prefetch, "SHARED_ROWS", False)
  assert not any("@llvm.prefetch" in b for b in loops())
