"""IMAGE=1/2 in core: the image dtype, which parameters the schedule marks, and codegen's rewrite of flat index math into
(x, y) pixel coordinates plus a channel (checked element by element), border reads for gates, and demotion."""
from __future__ import annotations
import pickle, types
import numpy as np
import pytest
from core import Tensor
from core.helpers import Context
from core.ir.dtype import dtypes, ImageDType
from core.ir.ops import UOp, Ops
from core.codegen.image import IMAGE_CANDIDATE, image_shape, image_load, image_store, lower_images
from core.schedule.kernelize import create_schedule

def test_image_dtype_is_interned_and_pickles() -> None:
  f, h = dtypes.imagef((3, 5)), dtypes.imageh((3, 5))
  assert f is dtypes.imagef((3, 5)) and f is not h and isinstance(f, ImageDType)
  assert (f.shape, f.size, f.base, h.base) == ((3, 5), 60, dtypes.float32, dtypes.float16)
  assert repr(f) == "dtypes.imagef((3, 5))" and repr(h) == "dtypes.imageh((3, 5))"
  assert pickle.loads(pickle.dumps(h)) is h and f.nbytes == 240
  with pytest.raises(TypeError, match="pixel at a time"): f.vec(2)

def test_image_shape_takes_the_widest_row_that_fits() -> None:
  assert image_shape(4 * 12, (16, 16)) == (1, 12)
  assert image_shape(4 * 12, (5, 16)) == (3, 4)      # 12 pixels in rows of at most 5: 4 wide
  assert image_shape(4 * 13, (5, 13)) == (13, 1)     # 13 pixels (a prime): one column of 13 rows
  assert image_shape(4 * 13, (5, 12)) is None          # ... more rows than the image may have
  assert image_shape(6, (16, 16)) is None and image_shape(0, (16, 16)) is None

def _params(ast: UOp) -> dict[int, UOp]: return {u.arg: u for u in ast.toposort() if u.op is Ops.PARAM}

def test_schedule_marks_weights_with_image1_and_outputs_with_image2() -> None:
  a, b = Tensor(np.ones((4, 8), np.float32)).realize(), Tensor(np.ones((8, 4), np.float32)).realize()
  i = Tensor(np.ones((4, 4), np.int32)).realize()
  for level, out_tag in ((1, None), (2, IMAGE_CANDIDATE)):
    with Context(IMAGE=level):
      items, _, _ = create_schedule([((a @ b) + i).uop])
    p = _params(items[-1].ast)
    ints = [k for k, buf in enumerate(items[-1].bufs) if buf.dtype is dtypes.int32]
    assert p[0].tag == out_tag and all(p[k].tag == IMAGE_CANDIDATE for k in p if k and k not in ints), level
    assert all(p[k].tag is None for k in ints)
  with Context(IMAGE=0): items, _, _ = create_schedule([(a @ b).uop])
  assert all(u.tag is None for u in _params(items[-1].ast).values())

def _img_param(shape: tuple[int, int], slot: int = 1) -> UOp: return UOp.param(slot, dtypes.imagef(shape))

def _eval(u: UOp, sub: dict[UOp, UOp]) -> UOp: return u.substitute(sub).simplify()

def _xy(ld: UOp) -> tuple[int, int]:
  xy = ld.src[0].src[1]
  assert ld.op is Ops.LOAD and xy.op is Ops.VECTORIZE and all(s.op is Ops.CONST for s in xy.src), ld
  return xy.src[0].arg, xy.src[1].arg

def test_scalar_reads_become_pixel_reads_at_the_right_coordinates_and_channel() -> None:
  h, w = 3, 5
  img = _img_param((h, w))
  r = UOp.variable("r", 0, 8, dtypes.int32)
  i = r * 7 + 3
  ld = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, img.dtype, (img, i)),))
  out = image_load(ld, ld.src[0], img)
  for v in range(9):
    val = _eval(out, {r: UOp.const(dtypes.int32, v)})
    assert val.op is Ops.GEP and val.dtype is dtypes.float32, val
    x, y = _xy(val.src[0])
    assert y * w * 4 + x * 4 + val.arg[0] == v * 7 + 3 and 0 <= x < w and 0 <= y < h

def test_aligned_vector_reads_are_whole_pixels() -> None:
  img = _img_param((2, 4))
  r = UOp.variable("r", 0, 3, dtypes.int32)
  ld = UOp(Ops.LOAD, dtypes.float32.vec(8), (UOp(Ops.INDEX, img.dtype, (img, r * 8)),))
  out = image_load(ld, ld.src[0], img)
  for v in range(4):
    val = _eval(out, {r: UOp.const(dtypes.int32, v)})
    pixels = [_xy(g.src[0]) for g in val.src]
    assert [g.arg[0] for g in val.src] == [0, 1, 2, 3] * 2
    assert pixels == [((2 * v) % 4, (2 * v) // 4)] * 4 + [((2 * v + 1) % 4, (2 * v + 1) // 4)] * 4

def test_a_gated_read_with_zero_alternative_reads_the_border() -> None:
  img = _img_param((1, 4))
  r = UOp.variable("r", -2, 17, dtypes.int32)
  gate = (r >= 0) & (r < 16)
  ld = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, img.dtype, (img, r, gate)),))
  out = image_load(ld, ld.src[0], img)
  loads = [u for u in out.toposort() if u.op is Ops.LOAD]
  assert loads and all(len(u.src[0].src) == 2 for u in loads)   # no gate left: no branch
  for v in (-2, -1, 16, 17):
    assert _xy(_eval(out, {r: UOp.const(dtypes.int32, v)}).src[0])[0] == -1   # outside the image: the sampler's border, 0
  # an alternative other than 0 keeps the gate (a select around the read)
  alt = UOp.const(dtypes.float32, 2.0)
  ld2 = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, img.dtype, (img, r, gate)), alt))
  assert any(len(u.src[0].src) == 3 for u in image_load(ld2, ld2.src[0], img).toposort() if u.op is Ops.LOAD)

def test_stores_write_whole_pixels() -> None:
  img = _img_param((2, 2), slot=0)
  r = UOp.variable("r", 0, 1, dtypes.int32)
  v = UOp.vectorize(*[UOp.const(dtypes.float32, float(k)) for k in range(8)])
  st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, img.dtype, (img, r * 8)), v))
  out = image_store(st, st.src[0], img)
  assert out.op is Ops.GROUP and len(out.src) == 2
  got = [(_xy(UOp(Ops.LOAD, dtypes.float32, (_eval(s.src[0], {r: UOp.const(dtypes.int32, 1)}),))), s.src[1].dtype.count) for s in out.src]
  assert got == [((0, 1), 4), ((1, 1), 4)]

def _kernel(params: list[UOp], loads: list[tuple[int, UOp]], store: tuple[int, UOp]) -> UOp:
  vals = [UOp(Ops.LOAD, params[k].dtype.base, (UOp(Ops.INDEX, params[k].dtype, (params[k], i)),)) for k, i in loads]
  acc = vals[0]
  for x in vals[1:]: acc = acc + x
  k, i = store
  st = UOp(Ops.INDEX, params[k].dtype, (params[k], i)).store(acc)
  return UOp(Ops.SINK, dtypes.void, (st,))

def test_lower_images_makes_images_demotes_and_strips_tags() -> None:
  g = UOp.variable("g", 0, 15, dtypes.int32)
  p = [UOp.param(k, dtypes.float32.ptr(n)).replace(tag=IMAGE_CANDIDATE) for k, n in enumerate((64, 64, 6))]
  p.append(UOp.param(3, dtypes.int32.ptr(64)))
  sink = _kernel(p, [(1, g), (2, g % 6)], (0, g))
  has = types.SimpleNamespace(has_images=True, image_max=(8, 8))
  out = {u.arg: u.dtype for u in lower_images(sink, has).toposort() if u.op is Ops.PARAM}
  # 1 is read: an image of 16 pixels (2 rows of 8); 0 is stored a scalar at a time: demoted; 2 has 6 elements: demoted
  assert out[1] == dtypes.imagef((2, 8)) and out[0] == dtypes.float32.ptr(64) and out[2] == dtypes.float32.ptr(6)
  assert all(u.tag is None for u in lower_images(sink, has).toposort() if u.op is Ops.PARAM)
  none = types.SimpleNamespace(has_images=False, image_max=(8, 8))
  assert not any(isinstance(u.dtype, ImageDType) or u.tag for u in lower_images(sink, none).toposort() if u.op is Ops.PARAM)
  # a parameter both read and written by a kernel stays a buffer (an image is read_only or write_only)
  rw = _kernel(p, [(1, g)], (1, g))
  assert not any(isinstance(u.dtype, ImageDType) for u in lower_images(rw, has).toposort())

def test_image_flag_changes_nothing_on_a_device_without_images() -> None:
  x = np.arange(24, dtype=np.float32).reshape(4, 6)
  with Context(IMAGE=2):
    t = Tensor(x).realize()
    np.testing.assert_array_equal(((t + 1).pad(((1, 0), (0, 2))) * 2).numpy(), np.pad(x + 1, ((1, 0), (0, 2))) * 2)
