"""IMAGE=1/2 in codegen: kernel parameters the schedule marked become 2-D RGBA images where the renderer has them, and their
flat index math becomes (x, y) pixel coordinates plus a channel.

An image of (height, width) pixels holds the same bytes as a row-major buffer of height*width*4 elements, so element i is
channel i % 4 of pixel p = i // 4, at x = p % width, y = p // width. A read fetches the whole pixel (a float4) and picks the
channel; a write stores a whole pixel, so a parameter becomes a written image only when every store writes 4 aligned channels.
A parameter that can't be an image (not float32/float16, a size the renderer's image limits don't fit, partial-pixel stores,
read and written by the same kernel, any other use) is demoted: it stays a plain buffer pointer."""
from __future__ import annotations
from typing import TYPE_CHECKING
from core.ir.dtype import dtypes, ImageDType, PtrDType, DType
from core.ir.ops import UOp, Ops
from core.ir.pattern import UPat, PatternMatcher, graph_rewrite
if TYPE_CHECKING: from core.device.renderer import Renderer

IMAGE_CANDIDATE = "image"   # tag of a PARAM the schedule marked: codegen may make it an image (core.schedule.image sets it)

def image_shape(size: int, image_max: tuple[int, int]) -> tuple[int, int] | None:
  """(height, width) of the image holding `size` elements (4 per pixel): the widest row that divides the pixels and fits
  `image_max` (width, height); None when no shape fits."""
  wmax, hmax = image_max
  if size <= 0 or size % 4: return None
  px = size // 4
  for w in range(min(px, wmax), 0, -1):
    if px % w == 0: return (px // w, w) if px // w <= hmax else None
  return None

def _aligned(i: UOp) -> bool:
  """i is a multiple of 4 for every value it takes (a whole pixel starts there)."""
  m = (i % 4).simplify()
  return m.op is Ops.CONST and m.arg == 0

def _image_params(sink: UOp, image_max: tuple[int, int]) -> dict[UOp, ImageDType]:
  """The marked PARAMs that can be images, with their image dtype; the others are demoted."""
  users: dict[UOp, list[UOp]] = {}
  for u in sink.toposort():
    for s in u.src: users.setdefault(s, []).append(u)
  out: dict[UOp, ImageDType] = {}
  for p in [u for u in sink.toposort() if u.op is Ops.PARAM and u.tag == IMAGE_CANDIDATE]:
    base, pdt = p.dtype.base, p.dtype
    if not isinstance(pdt, PtrDType) or base not in (dtypes.float32, dtypes.float16) or (shape := image_shape(pdt.size, image_max)) is None:
      continue
    loads, stores, ok = 0, 0, True
    for idx in users.get(p, []):
      if idx.op is not Ops.INDEX or idx.src[0] is not p or len(idx.src) not in (2, 3) or idx.src[1].dtype.count != 1: ok = False
      for x in users.get(idx, []) if ok else ():
        if x.op is Ops.LOAD and x.src[0] is idx: loads += 1
        elif x.op is Ops.STORE and x.src[0] is idx:
          stores += 1
          ok = ok and x.src[1].dtype.count % 4 == 0 and _aligned(idx.src[1])
        else: ok = False
    if ok and not (loads and stores): out[p] = ImageDType(base, shape)
  return out

def _coords(img: UOp, i: UOp) -> tuple[UOp, UOp]:
  """(x, y) of the pixel holding element i."""
  assert isinstance(img.dtype, ImageDType)
  w = img.dtype.shape[1]
  px = i // 4
  return (px % w).simplify(), (px // w).simplify()

def _pixel_index(img: UOp, x: UOp, y: UOp, *gate: UOp) -> UOp:
  return UOp(Ops.INDEX, img.dtype, (img, UOp.vectorize(x, y)) + gate)

def _zero(u: UOp) -> bool: return u.op is Ops.CONST and u.arg == 0

def _read_pixel(ld: UOp, img: UOp, i: UOp, gate: tuple[UOp, ...], alt: tuple[UOp, ...]) -> UOp:
  """The pixel holding element i (i a multiple of 4 or not): a float4 (half4 for half images) LOAD at (x, y)."""
  x, y = _coords(img, i)
  if gate and (not alt or _zero(alt[0])):
    x, gate, alt = gate[0].where(x, x.const_like(-1)), (), ()
  # the alternative of the whole pixel: only the element's channel of a per-element read is used, so its lanes repeat it
  alt4 = tuple(a if a.dtype.count == 4 else UOp.vectorize(*[a] * 4) for a in alt)
  return UOp(Ops.LOAD, ld.dtype.scalar().vec(4), (_pixel_index(img, x, y, *gate),) + alt4)

def _channel(px: UOp, i: UOp) -> UOp:
  c = (i % 4).simplify()
  if c.op is Ops.CONST: return px.gep(c.arg)
  return c.eq(0).where(px.gep(0), c.eq(1).where(px.gep(1), c.eq(2).where(px.gep(2), px.gep(3))))

def image_load(ld: UOp, idx: UOp, img: UOp) -> UOp:
  """LOAD(INDEX(image, i[, gate])) of n elements -> pixel reads and their channels: n/4 whole pixels when i is a multiple of 4
  and n of 4, else one read per element. Where the alternative of a gated read is 0, the gate moves into the coordinates:
  x = -1 when it is false, and the clamp-to-border sampler reads the border value, 0, without a branch."""
  i, gate, alt, n = idx.src[1], idx.src[2:], ld.src[1:], ld.dtype.count
  if n % 4 == 0 and _aligned(i):
    pxs = [_read_pixel(ld, img, i + 4 * k if k else i, gate, tuple(a if n == 4 else UOp.vectorize(*[a.gep(4 * k + c) for c in range(4)])
                                                                     for a in alt)) for k in range(n // 4)]
    return pxs[0] if n == 4 else UOp.vectorize(*[p.gep(c) for p in pxs for c in range(4)])
  lanes = [_channel(_read_pixel(ld, img, i + k if k else i, gate, tuple(a.gep(k) if a.dtype.count > 1 else a for a in alt)), i + k if k else i)
           for k in range(n)]
  return UOp.vectorize(*lanes)

def image_store(st: UOp, idx: UOp, img: UOp) -> UOp:
  """STORE of 4k elements at a multiple of 4 -> k whole-pixel writes (_image_params demoted every other store)."""
  i, v = idx.src[1], st.src[1]
  writes = []
  for k in range(v.dtype.count // 4):
    x, y = _coords(img, i + 4 * k if k else i)
    val = v if v.dtype.count == 4 else UOp.vectorize(*[v.gep(4 * k + c) for c in range(4)])
    writes.append(st.replace(src=(_pixel_index(img, x, y, *idx.src[2:]), val) + st.src[2:]))
  return writes[0] if len(writes) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(writes))

def _is_image(u: UOp) -> bool: return isinstance(u.dtype, ImageDType)
def _flat(idx: UOp) -> bool: return idx.src[1].dtype.count == 1   # not rewritten to (x, y) yet

def _param(ctx: dict[UOp, DType], p: UOp) -> UOp | None:
  if (d := ctx.get(p)) is not None: return p.replace(dtype=d, tag=None)
  return p.replace(tag=None) if p.tag == IMAGE_CANDIDATE else None

_img_index = UPat(Ops.INDEX, src=(UPat(Ops.PARAM, name="img", custom=_is_image),), allow_any_len=True, name="idx", custom=_flat)

pm_image = PatternMatcher([
  (UPat(Ops.PARAM, name="p"), _param),
  (UPat(Ops.LOAD, src=(_img_index,), allow_any_len=True, name="ld"), image_load),
  (UPat(Ops.STORE, src=(_img_index,), allow_any_len=True, name="st"), image_store),
], name="image index")

def lower_images(sink: UOp, renderer: Renderer) -> UOp:
  """Marked parameters become images on a renderer with them (the others, and every one elsewhere, plain buffers again)."""
  if not any(u.op is Ops.PARAM and u.tag == IMAGE_CANDIDATE for u in sink.toposort()): return sink
  imgs = _image_params(sink, renderer.image_max) if renderer.has_images else {}
  return graph_rewrite(sink, pm_image, ctx=imgs, name="image index")
