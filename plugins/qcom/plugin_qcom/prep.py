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
  36  u32      name bytes; the kernel's name follows at 40
The kernel arguments are laid out from the constant offset on: each buffer a 64-bit address (8 bytes), then each variable
an int32 (4 bytes), rounded up to a whole vec4. MOCK's "code" is the kernel's OpenCL C, NUL padded."""
from __future__ import annotations
import dataclasses, re, struct
from typing import Any
from core.helpers import to_function_name
from core.codegen.program import compiled_program
from core.hcq.queue_ir import ProgramData
from core.ir.ops import UOp, Ops
from core.ir.pattern import PatternMatcher

MAGIC = b"QCOMPRG1"
HEADER = struct.Struct("<8sIIII4HHHI")
CODE_ALIGN, INSTR_BYTES = 128, 8

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
  @property
  def instrlen(self) -> int: return self.code_size // INSTR_BYTES
  @property
  def code_units(self) -> int: return -(-self.code_size // CODE_ALIGN)
  @property
  def const_units(self) -> int: return self.kernarg_size // 16

def kernarg_layout(nbufs: int, nvars: int) -> tuple[tuple[int, ...], int]:
  """(byte offset of each argument, kernarg bytes): 8-byte buffer addresses, then 4-byte variables, padded to a vec4."""
  offs = tuple(8 * i for i in range(nbufs)) + tuple(8 * nbufs + 4 * i for i in range(nvars))
  return offs, max(16, -(-(8 * nbufs + 4 * nvars) // 16) * 16)

def build_image(name: str, code: bytes, nbufs: int, nvars: int, nimages: int = 0, full_regs: int = 0, half_regs: int = 0,
                const_offset: int = 0) -> bytes:
  """A program image of `code` (padded to whole 128-byte units) with the header above."""
  nm = name.encode()
  code_off = -(-(HEADER.size + len(nm)) // CODE_ALIGN) * CODE_ALIGN
  padded = code + b"\0" * (-len(code) % CODE_ALIGN)
  _, kernarg = kernarg_layout(nbufs, nvars)
  head = HEADER.pack(MAGIC, code_off, len(padded), const_offset, kernarg, nbufs, nvars, nimages, full_regs, half_regs, 0, len(nm))
  return (head + nm).ljust(code_off, b"\0") + padded

def read_image(image: bytes) -> QCOMProgramData:
  """The program data of an image; raises PrepError naming the bad field."""
  if len(image) < HEADER.size: raise PrepError(f"a program image is at least {HEADER.size} bytes, got {len(image)}")
  magic, code_off, code_size, const_off, kernarg, nbufs, nvars, nimages, full, half, _, name_len = HEADER.unpack_from(image)
  if magic != MAGIC: raise PrepError(f"not a QCOM program image: magic {magic!r}, expected {MAGIC!r}")
  if code_off % CODE_ALIGN or code_size % INSTR_BYTES or code_off + code_size > len(image) or code_size == 0:
    raise PrepError(f"code at {code_off} of {code_size} bytes: must be 128-byte aligned, whole 8-byte instructions, inside the "
                    f"{len(image)}-byte image")
  if HEADER.size + name_len > code_off: raise PrepError(f"the name ({name_len} bytes) runs into the code at {code_off}")
  offs, want = kernarg_layout(nbufs, nvars)
  if kernarg != want: raise PrepError(f"kernarg size {kernarg} for {nbufs} buffers and {nvars} variables; the layout needs {want}")
  if -(-code_size // CODE_ALIGN) >= 1 << 10: raise PrepError(f"code of {code_size} bytes is more than CP_LOAD_STATE6's 1023 units of 128")
  name = image[HEADER.size:HEADER.size + name_len].decode()
  return QCOMProgramData(name=name, kernarg_size=kernarg, kernarg_align=16, arg_offsets=offs, code_offset=code_off, code_size=code_size,
                         const_offset=const_off, nbufs=nbufs, nvars=nvars, nimages=nimages, full_regs=full, half_regs=half)

def code_of(image: bytes) -> bytes:
  d = read_image(image)
  return image[d.code_offset:d.code_offset + d.code_size]

_SIGNATURE = re.compile(r"__kernel\s+(?:__attribute__\(\(.*?\)\)\s+)?void\s+(\w+)\s*\(([^)]*)\)")

def signature(src: str) -> tuple[str, int, int]:
  """(name, buffer arguments, int arguments) of the one `__kernel` in OpenCL C source."""
  m = _SIGNATURE.search(src)
  if m is None: raise PrepError("the OpenCL C has no __kernel function")
  args = [a.strip() for a in m.group(2).split(",") if a.strip()]
  nbufs = sum(1 for a in args if "*" in a)
  if any("*" in a for a in args[nbufs:]): raise PrepError(f"kernel {m.group(1)}: buffer arguments must come before the ints")
  return m.group(1), nbufs, len(args) - nbufs

def prep_program(ctx: Any, p: UOp, device: UOp, linear: UOp, binary: UOp) -> UOp:
  """A compiled PROGRAM -> PROGRAM(DEVICE, BINARY(image)) arg=QCOMProgramData, its slots checked against the kernel's."""
  spec = p.arg
  data = read_image(binary.arg)
  nbufs = sum(1 for u in linear.src if u.op is Ops.PARAM)
  if data.name != to_function_name(spec.name): raise PrepError(f"the image holds kernel {data.name!r}, the program is {spec.name!r}")
  if (data.nbufs, data.nvars) != (nbufs, len(spec.vars)):
    raise PrepError(f"kernel {data.name}: the image has {data.nbufs} buffer and {data.nvars} variable slots, the program {nbufs} and {len(spec.vars)}")
  return UOp(Ops.PROGRAM, src=(device, UOp(Ops.BINARY, arg=binary.arg)), arg=data)

# the HCQ contract's prep hook (a prepared PROGRAM no longer matches: the rewrite reaches a fixed point)
pm_prep_program = PatternMatcher([(compiled_program, prep_program)], name="qcom prep program")
