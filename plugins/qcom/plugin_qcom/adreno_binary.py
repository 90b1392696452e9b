"""The program binary Qualcomm's OpenCL driver returns (clGetProgramInfo(CL_PROGRAM_BINARIES)) for one kernel, read into what a
KGSL dispatch needs: the shader code, the register footprint, where each argument goes in the constants, the immediate
constants, the image slots and the memory sizes.

The layout is undocumented by Qualcomm; the field offsets below are the publicly known ones (as other open-source Adreno
runtimes read them). Every number is a little-endian u32:

  0x034  offset R of the register info:     R+0x14 full registers, R+0x18 half registers (the footprint)
  0x0ac  offset of the immediate constants; 0x0b0 nonzero when there are any. From there up to the code, 40-byte entries:
         +0 the value, +16 where it goes (in units of its size), +24 1 for 4-byte values, 0 for 2-byte ones
  0x0c0  offset of the shader code;         0x100 its size in bytes
  0x110  offset K of the kernel info:       K+0xc4 the program counter offset, K+0xc8 private memory per work-item, K+0xd8
         local memory bytes, K+0xdc sampler count, K+0x108 twice the branch stack depth, K+0x158 the kernel's name; after the
         name (rounded up to 4 bytes) 8 bytes per sampler, then one entry per argument in argument order: 8 u32, the first its
         length in bytes (0 ends the list), the fourth its constant offset in dwords, the eighth its kind (0 a buffer address
         or a value, 1 a read image (texture), 2 a written image (IBO))

Untested against a real driver's output (no Adreno here): tests/test_adreno_binary.py builds binaries from these fields."""
from __future__ import annotations
import dataclasses, struct
from plugin_qcom.prep import PrepError

REG_INFO, CONSTS, HAS_CONSTS, CODE_OFF, CODE_SIZE, KERNEL_INFO = 0x34, 0xAC, 0xB0, 0xC0, 0x100, 0x110
REG_FULL, REG_HALF = 0x14, 0x18
K_PC_OFFSET, K_PRIVATE, K_LOCAL, K_SAMPLERS, K_BRANCH, K_NAME = 0xC4, 0xC8, 0xD8, 0xDC, 0x108, 0x158
CONST_ENTRY, ARG_ENTRY = 40, 32
ARG_VALUE, ARG_TEXTURE, ARG_IBO = 0, 1, 2

@dataclasses.dataclass(frozen=True)
class AdrenoArg:
  """One kernel argument: its kind (ARG_VALUE, ARG_TEXTURE, ARG_IBO) and, for a value, its byte offset in the constants."""
  kind: int
  offset: int

@dataclasses.dataclass(frozen=True)
class AdrenoBinary:
  code: bytes
  full_regs: int
  half_regs: int
  pc_offset: int
  private_mem: int                              # bytes per work-item
  local_mem: int                                # bytes of __local memory
  samplers: int
  branch_stack: int
  args: tuple[AdrenoArg, ...]
  immediates: tuple[tuple[int, int, int], ...]  # (byte offset in the constants, bytes (2 or 4), value)
  @property
  def textures(self) -> int: return sum(a.kind == ARG_TEXTURE for a in self.args)
  @property
  def ibos(self) -> int: return sum(a.kind == ARG_IBO for a in self.args)

def _u32(lib: bytes, off: int, what: str) -> int:
  if not 0 <= off <= len(lib) - 4: raise PrepError(f"Adreno binary: {what} at byte {off:#x} is outside the {len(lib)}-byte binary")
  return struct.unpack_from("<I", lib, off)[0]

def parse(lib: bytes, name: str) -> AdrenoBinary:
  """Reads the binary of kernel `name`; raises PrepError naming the field that is out of range or does not match."""
  code_off, code_size = _u32(lib, CODE_OFF, "the code offset"), _u32(lib, CODE_SIZE, "the code size")
  if code_size == 0 or code_size % 8 or code_off + code_size > len(lib):
    raise PrepError(f"Adreno binary: code of {code_size} bytes at {code_off:#x}: must be whole 8-byte instructions inside the {len(lib)}-byte binary")
  reg = _u32(lib, REG_INFO, "the register info offset")
  full, half = _u32(lib, reg + REG_FULL, "the full register count"), _u32(lib, reg + REG_HALF, "the half register count")
  k = _u32(lib, KERNEL_INFO, "the kernel info offset")
  got = lib[k + K_NAME:k + K_NAME + len(name)]
  if got != name.encode(): raise PrepError(f"Adreno binary: the kernel info names {got!r}, expected kernel {name!r}")
  samplers = _u32(lib, k + K_SAMPLERS, "the sampler count")
  args: list[AdrenoArg] = []
  at = -(-(k + K_NAME + len(name)) // 4) * 4 + 8 * samplers
  while (length := _u32(lib, at, f"argument entry {len(args)}")) != 0:
    if length < ARG_ENTRY: raise PrepError(f"Adreno binary: argument entry {len(args)} at {at:#x} claims {length} bytes, less than its {ARG_ENTRY}")
    words = struct.unpack_from("<8I", lib, at) if at + ARG_ENTRY <= len(lib) else None
    if words is None: raise PrepError(f"Adreno binary: argument entry {len(args)} at {at:#x} runs past the binary")
    if words[7] not in (ARG_VALUE, ARG_TEXTURE, ARG_IBO): raise PrepError(f"Adreno binary: argument {len(args)} has unknown kind {words[7]}")
    args.append(AdrenoArg(words[7], 4 * words[3]))
    at += length
  imms: list[tuple[int, int, int]] = []
  if _u32(lib, HAS_CONSTS, "the constant flag"):
    at = _u32(lib, CONSTS, "the constant table offset")
    while at + CONST_ENTRY <= code_off:
      value, (unit_off, _, is32) = _u32(lib, at, "a constant"), struct.unpack_from("<3I", lib, at + 16)
      size = 4 if is32 else 2
      imms.append((unit_off * size, size, value & ((1 << 8 * size) - 1)))
      at += CONST_ENTRY
  return AdrenoBinary(code=bytes(lib[code_off:code_off + code_size]), full_regs=full, half_regs=half,
                      pc_offset=_u32(lib, k + K_PC_OFFSET, "the program counter offset"), private_mem=_u32(lib, k + K_PRIVATE, "the private memory size"),
                      local_mem=_u32(lib, k + K_LOCAL, "the local memory size"), samplers=samplers,
                      branch_stack=_u32(lib, k + K_BRANCH, "the branch stack") // 2, args=tuple(args), immediates=tuple(imms))
