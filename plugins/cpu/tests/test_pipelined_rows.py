"""A streamed softmax's row kernel writes row r-1's output inside row r's exp loop (a stash of two rows, row r-1's inverse sum
carried in a register) and the last row's in a loop after the row loop (core.codegen.stash._pipelined). The values are the
unpipelined kernel's, bit for bit."""
from __future__ import annotations
import numpy as np
import pytest
from core.ir.ops import Ops, AxisType
import core.codegen.stash as stash
from cpu_kernels import run_rendered
from test_max_ahead import _renderer, _uops

def _output_loops(uops) -> list[tuple[AxisType, ...]]:
  """The kinds of the loops open around each store into the output (PARAM 0), in program order."""
  out, stack = [], []
  for u in uops:
    if u.op is Ops.RANGE: stack.append(u.arg[1])
    elif u.op is Ops.END and stack: stack.pop()
    elif u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM and u.src[0].src[0].arg == 0:
      out.append(tuple(stack))
  return out

@pytest.mark.parametrize("shape", [(4096, 1000), (64, 1001), (3, 17)])
def test_the_output_store_is_in_the_exp_loop(shape, monkeypatch):
  # where the output streams: one store in the row loop's exp loop (row r-1's), one in a loop of its own after the row loop
  # (the last row's); without the pipeline (or where the output doesn't stream) the row loop's output loop holds it
  sm = lambda t: t.softmax(-1)
  assert _output_loops(_uops(sm, shape, _renderer(True, stream=1))) == [(AxisType.LOOP, AxisType.REDUCE), (AxisType.LOOP,)]
  assert _output_loops(_uops(sm, shape, _renderer(True, stream=0))) == [(AxisType.LOOP, AxisType.LOOP)]
  assert _output_loops(_uops(sm, shape, _renderer(False, stream=1))) == [(AxisType.LOOP, AxisType.LOOP)]
  # log_softmax's output is not the stash times the inverse sum
  assert _output_loops(_uops(lambda t: t.log_softmax(-1), shape, _renderer(True, stream=1))) == [(AxisType.LOOP, AxisType.LOOP)]
  monkeypatch.setattr(stash, "PIPELINE", False)
  assert _output_loops(_uops(sm, shape, _renderer(True, stream=1))) == [(AxisType.LOOP, AxisType.LOOP)]

def _rows(rows: int, cols: int) -> np.ndarray:
  x = (np.random.default_rng(rows * cols).standard_normal((rows, cols)) * 3).astype(np.float32)
  special = [(slice(None), np.float32(-np.inf)), (cols // 2, np.float32(np.nan)), (slice(None, None, 2), -np.inf), (0, np.inf),
             (slice(None), np.float32(7.5))]   # a -inf row, a NaN, half -inf, a +inf, an all-equal row
  for r, (c, v) in enumerate(special[:rows]): x[r, c] = v
  if rows >= 10:
    x[5] += 3e38
    x[6] -= 3e38
    x[7, : cols // 2] = -150   # exps that underflow
    x[8] *= 1e30
    x[9] = -1e4 * np.abs(x[9]) - 1e30   # very negative throughout
  return x

# pipelined: rows padded to whole vectors (1001, 17), an odd and an even count of rows a thread (the last row's stash half 0
# and 1). Not pipelined (no row loop: a row a thread), guarding the same values: rows the thread split leaves uneven, 1 and 2
@pytest.mark.parametrize("rows, cols, piped", [(4096, 1000, True), (10, 1000, True), (16, 1000, True), (14, 1000, True),
                                               (12, 1001, True), (24, 17, True), (13, 1001, False), (11, 17, False),
                                               (2, 256, False), (1, 1000, False)])
def test_values_are_the_unpipelined_kernels(rows, cols, piped, monkeypatch):
  sm = lambda t: t.softmax(-1)
  assert (_output_loops(_uops(sm, (rows, cols), _renderer(True, stream=1)))[0] == (AxisType.LOOP, AxisType.REDUCE)) is piped
  x = _rows(rows, cols)
  got = run_rendered(_renderer(True, stream=1), sm, x)[0]
  monkeypatch.setattr(stash, "PIPELINE", False)
  want = run_rendered(_renderer(True, stream=1), sm, x)[0]
  np.testing.assert_array_equal(got, want)   # NaN rows included
  got = got.reshape(x.shape)
  x64 = x.astype(np.float64)
  ok = np.isfinite(x64).all(-1)
  y = x64[ok] - x64[ok].max(-1, keepdims=True)
  np.testing.assert_allclose(got[ok], np.exp(y) / np.exp(y).sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
  np.testing.assert_array_equal(got[np.isnan(x).any(-1)], np.nan)
  if rows >= 5: np.testing.assert_array_equal(got[4], got[4, 0])   # an all-equal row: one value throughout (checked above)
