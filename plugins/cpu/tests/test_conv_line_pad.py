"""A large conv's padded input copy whose stores stream widens its rows to whole cache lines (core.tensor.conv._line_pad): each
row then starts on a line, its vector stores stream, and the conv reads a view of the first columns. Bounds lowered here, so a
small conv takes the path on any host."""
from __future__ import annotations
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from core import Tensor
from core.device.registry import Device
from core.ir.dtype import dtypes
from core.ir.ops import Ops
from core.codegen.program import get_program, program_source
import core.schedule.kernelize as kernelize
import core.tensor.conv as conv
from plugin_cpu.streaming import host_streams
from cpu_kernels import RENDERERS
from test_streaming_stores import MARKS, _streamed_renderer

SHAPE, COUT = (4, 16, 56, 56), 16   # padded 58 x 58: 861 KB, over PAD_IN_PLACE_BYTES

@pytest.fixture
def lowered(monkeypatch):
  monkeypatch.setattr(kernelize, "PAD_WHOLE_ROWS_MIN_BYTES", 1 << 16)
  rnd = Device[Device.DEFAULT].renderer
  monkeypatch.setattr(rnd, "stream_min_bytes", 1 << 17)
  monkeypatch.setattr(rnd, "large_conv_in_place", False)   # the copy, also where AVX-512 reads large inputs in place
  monkeypatch.setattr(conv, "replayed", lambda key, inputs, build: build())   # no plan built under other bounds

def _want(xn: np.ndarray, wn: np.ndarray) -> np.ndarray:
  win = sliding_window_view(np.pad(xn.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", win, wn.astype(np.float64))

def _copy_asts(line_bytes: int, monkeypatch) -> list:
  monkeypatch.setattr(conv, "LINE_BYTES", line_bytes)
  x, w = Tensor(np.zeros(SHAPE, np.float32)).realize(), Tensor(np.zeros((COUT, SHAPE[1], 3, 3), np.float32)).realize()
  items, _, _ = kernelize.create_schedule([x.conv2d(w, padding=1).uop])
  return [it.ast for it in items if it.ast.op is Ops.SINK and not any(u.op is Ops.REDUCE for u in it.ast.toposort())]

@pytest.mark.skipif(not host_streams(), reason="streaming stores are rendered on x86-64 hosts only")
@pytest.mark.parametrize("ren", RENDERERS)
def test_the_copy_rows_take_whole_lines_and_stream(lowered, monkeypatch, ren):
  n, c, h, w = SHAPE
  rnd = _streamed_renderer(ren, 1 << 17, 0)
  for line_bytes, row in ((64, 64), (4, w + 2)):   # LINE_BYTES 4: no column added (a float's row is always whole)
    asts = _copy_asts(line_bytes, monkeypatch)
    sizes = {u.dtype.size for a in asts for u in a.toposort() if u.op is Ops.PARAM and u.arg == 0}
    assert sizes == {n * c * (h + 2) * row}, (line_bytes, sizes)
    # the rows' copy (the biggest kernel): its row stores stream only where its rows start on a line
    main = max(asts, key=lambda a: len(a.toposort()))
    assert (MARKS[ren][0] in program_source(get_program(main, rnd))) is (line_bytes == 64), line_bytes

@pytest.mark.parametrize("dtype", [None, dtypes.float32])   # the conv's nodes, and the Tensor ops (a dtype argument)
def test_line_padded_conv_matches_numpy(lowered, dtype):
  rng = np.random.default_rng(7)
  xn, wn = rng.standard_normal(SHAPE).astype(np.float32), rng.standard_normal((COUT, SHAPE[1], 3, 3)).astype(np.float32)
  got = Tensor(xn).conv2d(Tensor(wn), padding=1, dtype=dtype).numpy()
  np.testing.assert_allclose(got, _want(xn, wn), rtol=1e-4, atol=1e-4)

def test_line_pad_only_where_the_copy_streams(lowered, monkeypatch):
  x = Tensor(np.zeros(SHAPE, np.float32)).realize()
  assert conv._line_pad(x, [(1, 1), (1, 1)]) == 6                 # rows of 58 floats -> 64
  assert conv._line_pad(x, [(1, 1), (3, 3)]) == 2                 # rows of 62 -> 64
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "stream_min_bytes", 1 << 30)
  assert conv._line_pad(x, [(1, 1), (1, 1)]) == 0                 # under the streaming bound: plain stores either way
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "stream_min_bytes", 1 << 17)
  small = Tensor(np.zeros((64, 16, 7, 7), np.float32)).realize()
  assert conv._line_pad(small, [(1, 1), (1, 1)]) == 0             # rows of 9: 16 would be 1.8x the copy
