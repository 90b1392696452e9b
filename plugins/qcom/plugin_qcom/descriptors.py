"""A6xx texture descriptors (A6XX_TEX_CONST, 16 dwords) and samplers (A6XX_TEX_SAMP, 4 dwords) for the images of a kernel:
encoders and a decoder that says what is wrong with a descriptor the MOCK processor can't bind.

Field positions from freedreno's public register database (a6xx_descriptors.xml, a6xx_enums.xml):
  TEX_CONST 0: TILE_MODE 0-1, SWIZ_X/Y/Z/W 4-6/7-9/10-12/13-15, FMT 22-29;  1: WIDTH 0-14, HEIGHT 15-29;
            2: PITCH (bytes) 7-28, TYPE 29-31;  4: BASE_LO (address bits 5-31);  5: BASE_HI 0-16, DEPTH 17-29
  TEX_SAMP  0: XY_MAG 1-2, XY_MIN 3-4, WRAP_S 5-7, WRAP_T 8-10, WRAP_R 11-13;  1: UNNORM_COORDS bit 5;
            2: FASTBORDERCOLOR 2-3, FASTBORDERCOLOREN bit 4
Images here are linear (TILE6_LINEAR) rows of width RGBA pixels, `pitch` = width * bytes per pixel: the same bytes as the
row-major buffer core's IMAGE=1/2 kernels address as (x, y) coordinates."""
from __future__ import annotations
from typing import NamedTuple
from plugin_qcom.pm4 import PacketError

TILE6_LINEAR, A6XX_TEX_2D = 0, 1
FMT6_16_16_16_16_FLOAT, FMT6_32_32_32_32_FLOAT = 0x62, 0x82
TEX_X, TEX_Y, TEX_Z, TEX_W = 0, 1, 2, 3
TEX_NEAREST, TEX_CLAMP_TO_BORDER, BORDER_COLOR_0_0_0_0 = 0, 3, 0
TEX_DWORDS, SAMP_DWORDS = 16, 4
BASE_DW = 4   # dwords 4-5 hold the image's address (a 64-bit store there sets BASE_LO and BASE_HI, DEPTH stays 0)

def tex_const(height: int, width: int, half: bool) -> list[int]:
  """The descriptor of a linear 2-D RGBA image of float (or half) channels, its BASE (dwords 4-5) zero: the address is stored
  there separately (QCOM kernarg patches)."""
  if not (1 <= width < 1 << 15 and 1 <= height < 1 << 15): raise ValueError(f"a {height}x{width} image does not fit TEX_CONST's 15-bit sizes")
  fmt, bpp = (FMT6_16_16_16_16_FLOAT, 8) if half else (FMT6_32_32_32_32_FLOAT, 16)
  dw0 = TILE6_LINEAR | TEX_X << 4 | TEX_Y << 7 | TEX_Z << 10 | TEX_W << 13 | fmt << 22
  return [dw0, width | height << 15, (width * bpp) << 7 | A6XX_TEX_2D << 29] + [0] * (TEX_DWORDS - 3)

def sampler() -> list[int]:
  """Nearest, unnormalized coordinates, clamp to a border of 0 on every axis: what OpenCL's sampler
  CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST is."""
  wrap = TEX_CLAMP_TO_BORDER
  return [TEX_NEAREST << 1 | TEX_NEAREST << 3 | wrap << 5 | wrap << 8 | wrap << 11, 1 << 5, BORDER_COLOR_0_0_0_0 << 2 | 1 << 4, 0]

class Image(NamedTuple):
  """A decoded TEX_CONST: where the pixels are and how they are laid out."""
  base: int
  height: int
  width: int
  half: bool
  pitch: int

def decode_tex_const(dw: list[int], where: str) -> Image:
  """The image a descriptor describes; PacketError (naming `where`) for anything but a linear 2-D RGBA float/half image."""
  if len(dw) != TEX_DWORDS: raise PacketError(f"{where}: a texture descriptor is {TEX_DWORDS} dwords, got {len(dw)}")
  fmt, tile, swiz = dw[0] >> 22 & 0xFF, dw[0] & 3, dw[0] >> 4 & 0xFFF
  if fmt not in (FMT6_16_16_16_16_FLOAT, FMT6_32_32_32_32_FLOAT):
    raise PacketError(f"{where}: FMT {fmt:#x}; this processor binds FMT6_32_32_32_32_FLOAT (0x82) and FMT6_16_16_16_16_FLOAT (0x62)")
  if tile != TILE6_LINEAR: raise PacketError(f"{where}: TILE_MODE {tile}; this processor reads linear images (TILE6_LINEAR) only")
  if swiz != TEX_X | TEX_Y << 3 | TEX_Z << 6 | TEX_W << 9: raise PacketError(f"{where}: swizzle {swiz:#x} is not XYZW")
  if (ty := dw[2] >> 29) != A6XX_TEX_2D: raise PacketError(f"{where}: TYPE {ty}, expected A6XX_TEX_2D (1)")
  width, height, pitch = dw[1] & 0x7FFF, dw[1] >> 15 & 0x7FFF, dw[2] >> 7 & 0x3FFFFF
  half = fmt == FMT6_16_16_16_16_FLOAT
  if not (width and height): raise PacketError(f"{where}: an image of {height}x{width} pixels")
  if pitch != width * (8 if half else 16): raise PacketError(f"{where}: PITCH {pitch} bytes for {width} pixels; rows must be packed")
  if dw[4] & 0x1F: raise PacketError(f"{where}: BASE {dw[4]:#x} is not 32-byte aligned")
  return Image(dw[4] | (dw[5] & 0x1FFFF) << 32, height, width, half, pitch)

def check_sampler(dw: list[int], where: str) -> None:
  """PacketError unless the sampler is the nearest, unnormalized, clamp-to-border-0 one core's image reads assume."""
  if dw[:3] != sampler()[:3]: raise PacketError(f"{where}: sampler {[hex(d) for d in dw]} is not nearest/unnormalized/clamp to border 0")
