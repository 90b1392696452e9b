"""QCOM program preparation: a program image -> (QCOMProgramData, image bytes).

The image layout (what pm_prep_program reads and the MOCK compiler writes; the shader code of a real Adreno binary from
Qualcomm's OpenCL compiler would sit where the code is, see README "KGSL"):

  0   8 bytes  magic b"QCOMPRG1"
  8   u32      code offset (a multiple of 128: CP_LOAD_STATE6 loads shader code in 128-byte units)
  12  u32      code bytes (a multiple of 8: SP_CS_INSTRLEN counts 8-byte instructions)
  16  u32      constant offset: the vec4 constant register where the kernel's arguments start (CP_LOAD_STATE6 DST_OFF)
  20  u32      kernarg bytes (a multiple of 16: constants load in vec4 units)
  24  u16 x 4  buffer slots, variable slots, image slots, full-register footprint
  32  u16      half-register footprint, then u16 reserved
  36  u32      name bytes; the kernel's name follows at 40, then one 12-byte entry per image argument: u16 argument index,
               u16 flags (1: written, 2: half channels), u32 height, u32 width (pixels)
The kernel arguments are laid out from the constant offset on: each buffer a 64-bit address (8 bytes), then each variable
an int32 (4 bytes), rounded up to a whole vec4. Image arguments are not constants: their slot stays unused, and after the
constants (on 64 bytes) come their descriptors, 16 dwords each (A6XX_TEX_CONST), the read images' first, then the written
ones', then one 4-dword sampler (A6XX_TEX_SAMP); an image argument's address goes into its descriptor's BASE (dwords 4-5).
MOCK's "code" is the kernel's OpenCL C, NUL padded."""
from __future__ import annotations
import dataclasses, re, struct
from typing import NamedTuple
from typing import Any
from core.helpers import to_function_name
from core.codegen.access_guard import GUARD_NAME
from core.codegen.program import compiled_program
from core.hcq.queue_ir import ProgramData
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher

MAGIC = b"QCOMPRG1"
HEADER = struct.Struct("<8sIIII4HHHI")
CODE_ALIGN, INSTR_BYTES = 128, 8

IMAGE_ENTRY = struct.Struct("<HHII")
TEX_DWORDS, SAMP_DWORDS = 16, 4

class ImageArg(NamedTuple):
  """An image argument of a kernel: its argument index, shape in pixels, channel type and whether the kernel writes it."""
  arg: int
  height: int
  width: int
  half: bool
  written: bool

class PrepError(ValueError):
  """A program image this plugin cannot load (the message says which field and why)."""

@dataclasses.dataclass(frozen=True)
class QCOMProgramData(ProgramData):
  """ProgramData plus what an Adreno dispatch needs: where the code is in the image and how long, the constant register the
  arguments load to, the slot counts and the register footprint."""
  code_offset: int = 0
  code_size: int = 0
  const_offset: int = 0
  nbufs: int = 0
  nvars: int = 0
  nimages: int = 0
  full_regs: int = 0
  half_regs: int = 0
  images: tuple[ImageArg, ...] = ()
  const_bytes: int = 0   # the constants part of the kernarg buffer (the image descriptors follow it)
  # from a driver binary (adreno_binary.py): constants the code expects at fixed offsets of the kernarg buffer
  # ((byte offset, bytes, value)), __local and private memory, the program counter offset, the branch stack depth
  immediates: tuple[tuple[int, int, int], ...] = ()
  local_mem: int = 0
  private_mem: int = 0
  pc_offset: int = 0
  branch_stack: int = 0
  @property
  def instrlen(self) -> int: return self.code_size // INSTR_BYTES
  @property
  def code_units(self) -> int: return -(-self.code_size // CODE_ALIGN)
  @property
  def const_units(self) -> int: return self.const_bytes // 16
  @property
  def read_images(self) -> tuple[ImageArg, ...]: return tuple(i for i in self.images if not i.written)
  @property
  def written_images(self) -> tuple[ImageArg, ...]: return tuple(i for i in self.images if i.written)
  @property
  def tex_offset(self) -> int:
    """Byte offset in the kernarg buffer of the first image descriptor (the read images', then the written ones')."""
    return -(-self.const_bytes // 64) * 64
  @property
  def sampler_offset(self) -> int: return self.tex_offset + 4 * TEX_DWORDS * len(self.images)

def kernarg_layout(nbufs: int, nvars: int, images: tuple[ImageArg, ...] = ()) -> tuple[tuple[int, ...], int, int]:
  """(byte offset of each argument, constant bytes, kernarg bytes): 8-byte buffer addresses, then 4-byte variables, padded to a
  vec4; then, for kernels with images, their descriptors and a sampler, each image argument's offset that of its BASE."""
  offs = [8 * i for i in range(nbufs)] + [8 * nbufs + 4 * i for i in range(nvars)]
  const = max(16, -(-(8 * nbufs + 4 * nvars) // 16) * 16)
  if not images: return tuple(offs), const, const
  tex = -(-const // 64) * 64
  for k, im in enumerate(sorted(images, key=lambda i: (i.written, i.arg))): offs[im.arg] = tex + 4 * (TEX_DWORDS * k + 4)
  return tuple(offs), const, tex + 4 * (TEX_DWORDS * len(images) + SAMP_DWORDS)

def build_image(name: str, code: bytes, nbufs: int, nvars: int, images: tuple[ImageArg, ...] = (), full_regs: int = 0,
                half_regs: int = 0, const_offset: int = 0) -> bytes:
  """A program image of `code` (padded to whole 128-byte units) with the header above."""
  nm = name.encode() + b"".join(IMAGE_ENTRY.pack(i.arg, i.written | i.half << 1, i.height, i.width) for i in images)
  code_off = -(-(HEADER.size + len(nm)) // CODE_ALIGN) * CODE_ALIGN
  padded = code + b"\0" * (-len(code) % CODE_ALIGN)
  _, _, kernarg = kernarg_layout(nbufs, nvars, images)
  head = HEADER.pack(MAGIC, code_off, len(padded), const_offset, kernarg, nbufs, nvars, len(images), full_regs, half_regs, 0,
                     len(name.encode()))
  return (head + nm).ljust(code_off, b"\0") + padded

def read_image(image: bytes) -> QCOMProgramData:
  """The program data of an image; raises PrepError naming the bad field."""
  if len(image) < HEADER.size: raise PrepError(f"a program image is at least {HEADER.size} bytes, got {len(image)}")
  magic, code_off, code_size, const_off, kernarg, nbufs, nvars, nimages, full, half, _, name_len = HEADER.unpack_from(image)
  if magic != MAGIC: raise PrepError(f"not a QCOM program image: magic {magic!r}, expected {MAGIC!r}")
  if code_off % CODE_ALIGN or code_size % INSTR_BYTES or code_off + code_size > len(image) or code_size == 0:
    raise PrepError(f"code at {code_off} of {code_size} bytes: must be 128-byte aligned, whole 8-byte instructions, inside the "
                    f"{len(image)}-byte image")
  if HEADER.size + name_len + IMAGE_ENTRY.size * nimages > code_off:
    raise PrepError(f"the name ({name_len} bytes) and {nimages} image entries run into the code at {code_off}")
  images = []
  for k in range(nimages):
    arg, flags, h, w = IMAGE_ENTRY.unpack_from(image, HEADER.size + name_len + IMAGE_ENTRY.size * k)
    if arg >= nbufs or flags > 3 or not (h and w): raise PrepError(f"image entry {k}: argument {arg} of {nbufs}, flags {flags}, {h}x{w} pixels")
    images.append(ImageArg(arg, h, w, bool(flags & 2), bool(flags & 1)))
  offs, const, want = kernarg_layout(nbufs, nvars, tuple(images))
  if kernarg != want: raise PrepError(f"kernarg size {kernarg} for {nbufs} buffers, {nvars} variables and {nimages} images; the layout needs {want}")
  if -(-code_size // CODE_ALIGN) >= 1 << 10: raise PrepError(f"code of {code_size} bytes is more than CP_LOAD_STATE6's 1023 units of 128")
  name = image[HEADER.size:HEADER.size + name_len].decode()
  return QCOMProgramData(name=name, kernarg_size=kernarg, kernarg_align=64 if images else 16, arg_offsets=offs, code_offset=code_off, code_size=code_size,
                         const_offset=const_off, nbufs=nbufs, nvars=nvars, nimages=nimages, full_regs=full, half_regs=half,
                         images=tuple(images), const_bytes=const)

_SIGNATURE = re.compile(r"__kernel\s+(?:__attribute__\(\(.*?\)\)\s+)?void\s+(\w+)\s*\(([^)]*)\)")

_IMAGE_ARG = re.compile(r"(read_only|write_only)\s+image2d_t\s+data\d+_(\d+)x(\d+)([fh])$")

def signature(src: str) -> tuple[str, int, int]:
  """(name, buffer arguments (images included), int arguments) of the one `__kernel` in OpenCL C source."""
  m = _SIGNATURE.search(src)
  if m is None: raise PrepError("the OpenCL C has no __kernel function")
  # MOCK+QCOM's fault guard table (core/codegen/access_guard.py) is the MOCK's own argument, not one of the kernel's
  args = [a.strip() for a in m.group(2).split(",") if a.strip() and not a.strip().endswith(f" {GUARD_NAME}")]
  isbuf = ["*" in a or "image2d_t" in a for a in args]
  nbufs = sum(isbuf)
  if any(isbuf[nbufs:]): raise PrepError(f"kernel {m.group(1)}: buffer arguments must come before the ints")
  return m.group(1), nbufs, len(args) - nbufs

def image_args(src: str) -> tuple[ImageArg, ...]:
  """The image arguments of the `__kernel` in OpenCL C source (OpenCLRenderer names them data<slot>_<h>x<w><f|h>)."""
  m = _SIGNATURE.search(src)
  if m is None: raise PrepError("the OpenCL C has no __kernel function")
  out = []
  for k, a in enumerate(x.strip() for x in m.group(2).split(",") if x.strip()):
    if "image2d_t" not in a: continue
    if (im := _IMAGE_ARG.search(a)) is None: raise PrepError(f"kernel {m.group(1)}: image argument {a!r} does not name its shape")
    out.append(ImageArg(k, int(im.group(2)), int(im.group(3)), im.group(4) == "h", im.group(1) == "write_only"))
  return tuple(out)

def prep_program(ctx: Any, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  """A compiled PROGRAM -> PROGRAM(DEVICE, BINARY(image)) arg=QCOMProgramData, its slots checked against the kernel's. The
  binary is this plugin's program image (MOCK) or the one Qualcomm's OpenCL driver makes (KGSL: adreno_binary.py)."""
  spec = p.arg
  params = [u for u in linear.src if u.op is Ops.PARAM]
  if not binary.arg.startswith(MAGIC): return prep_adreno(device, binary.arg, to_function_name(spec.name), params, len(spec.vars))
  data = read_image(binary.arg)
  nbufs = len(params)
  if data.name != to_function_name(spec.name): raise PrepError(f"the image holds kernel {data.name!r}, the program is {spec.name!r}")
  if (data.nbufs, data.nvars) != (nbufs, len(spec.vars)):
    raise PrepError(f"kernel {data.name}: the image has {data.nbufs} buffer and {data.nvars} variable slots, the program {nbufs} and {len(spec.vars)}")
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=binary.arg)), arg=data)

def prep_adreno(device: UOp, lib: bytes, name: str, params: list[UOp], nvars: int) -> UOp:
  """PROGRAM of a driver binary: the code (uploaded alone, 128-byte padded), the binary's argument offsets for buffers and
  variables, and the image arguments (shapes from the kernel's image PARAMs, read or written as the binary's slot kinds say)
  bound through descriptors after the constants, as for MOCK."""
  from core.ir.dtype import ImageDType
  from plugin_qcom import adreno_binary as ab
  b = ab.parse(lib, name)
  nbufs = len(params)
  if len(b.args) != nbufs + nvars:
    raise PrepError(f"kernel {name}: the binary has {len(b.args)} arguments, the program {nbufs} buffers and {nvars} variables")
  images, ends = [], [16] + [o + n for o, n, _ in b.immediates]
  for i, (a, p) in enumerate(zip(b.args, params + [None] * nvars)):
    is_img = p is not None and isinstance(p.dtype, ImageDType)
    if is_img != (a.kind != ab.ARG_VALUE):
      raise PrepError(f"kernel {name}: argument {i} is {'an image' if is_img else 'not an image'} in the program, kind {a.kind} in the binary")
    if is_img:
      assert p is not None and isinstance(p.dtype, ImageDType)
      images.append(ImageArg(i, p.dtype.shape[0], p.dtype.shape[1], p.dtype.base.itemsize == 2, a.kind == ab.ARG_IBO))
    else: ends.append(a.offset + (8 if i < nbufs else 4))
  const = -(-max(ends) // 16) * 16
  offs = [a.offset for a in b.args]
  kernarg = const
  if images:
    tex = -(-const // 64) * 64
    for k, im in enumerate(sorted(images, key=lambda i: (i.written, i.arg))): offs[im.arg] = tex + 4 * (TEX_DWORDS * k + 4)
    kernarg = tex + 4 * (TEX_DWORDS * len(images) + SAMP_DWORDS)
  code = b.code + b"\0" * (-len(b.code) % CODE_ALIGN)
  if len(code) // CODE_ALIGN >= 1 << 10: raise PrepError(f"kernel {name}: code of {len(b.code)} bytes is more than CP_LOAD_STATE6's 1023 units of 128")
  data = QCOMProgramData(name=name, kernarg_size=kernarg, kernarg_align=64 if images else 16, arg_offsets=tuple(offs), code_offset=0, code_size=len(b.code),
                         nbufs=nbufs, nvars=nvars, nimages=len(images), full_regs=b.full_regs, half_regs=b.half_regs,
                         images=tuple(images), const_bytes=const, immediates=b.immediates, local_mem=b.local_mem,
                         private_mem=b.private_mem, pc_offset=b.pc_offset, branch_stack=b.branch_stack)
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=code)), arg=data)

# the HCQ contract's prep hook (a prepared PROGRAM no longer matches: the rewrite reaches a fixed point)
pm_prep_program = PatternMatcher([(compiled_program, prep_program)], name="qcom prep program")
