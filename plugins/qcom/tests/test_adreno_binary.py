"""The Adreno program binary (what Qualcomm's OpenCL driver returns as CL_PROGRAM_BINARIES) read into a dispatch: binaries built
here field by field from the publicly known layout (plugin_qcom/adreno_binary.py's docstring), no driver involved."""
from __future__ import annotations
import struct
import pytest
from core.hcq.queue_ir import Words
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from plugin_qcom import adreno_binary as ab, lower, pm4, regs
from plugin_qcom.prep import ImageArg, PrepError, QCOMProgramData, prep_adreno

CODE = bytes(range(1, 25))   # three 8-byte "instructions"

def make_binary(name: str = "r_8_4", args: tuple[tuple[int, int], ...] = ((ab.ARG_VALUE, 0), (ab.ARG_VALUE, 2), (ab.ARG_VALUE, 5)),
                consts: tuple[tuple[int, int, int], ...] = (), samplers: int = 0, full: int = 7, half: int = 3) -> bytes:
  """A binary of `name` with argument entries (kind, constant offset in dwords), immediate constants (value, offset in units,
  is32) and the given footprint, laid out as the documented fields say: register info at 0x200, kernel info at 0x300,
  the constant table just before the code at 0x700."""
  lib = bytearray(0x800)
  put = lambda off, v: struct.pack_into("<I", lib, off, v)  # noqa: E731
  put(ab.REG_INFO, 0x200)
  put(0x200 + ab.REG_FULL, full)
  put(0x200 + ab.REG_HALF, half)
  put(ab.CODE_OFF, 0x700)
  put(ab.CODE_SIZE, len(CODE))
  lib[0x700:0x700 + len(CODE)] = CODE
  k = 0x300
  put(ab.KERNEL_INFO, k)
  put(k + ab.K_PC_OFFSET, 0x10)
  put(k + ab.K_PRIVATE, 96)
  put(k + ab.K_LOCAL, 4096)
  put(k + ab.K_SAMPLERS, samplers)
  put(k + ab.K_BRANCH, 6)
  lib[k + ab.K_NAME:k + ab.K_NAME + len(name)] = name.encode()
  at = -(-(k + ab.K_NAME + len(name)) // 4) * 4 + 8 * samplers
  for kind, off in args:
    struct.pack_into("<8I", lib, at, 36, 0, 0, off, 0, 0, 0, kind)   # an entry may be longer than its 32 known bytes
    at += 36
  if consts:   # the table runs up to the code
    put(ab.HAS_CONSTS, 1)
    put(ab.CONSTS, table := 0x700 - 40 * len(consts))
    for j, (v, unit_off, is32) in enumerate(consts):
      put(table + 40 * j, v)
      struct.pack_into("<3I", lib, table + 40 * j + 16, unit_off, 0, is32)
  return bytes(lib)

def test_fields_are_read() -> None:
  lib = make_binary(consts=((0x3F800000, 12, 1), (0xBEEF, 26, 0)), samplers=1)
  b = ab.parse(lib, "r_8_4")
  assert b.code == CODE and (b.full_regs, b.half_regs) == (7, 3)
  assert (b.pc_offset, b.private_mem, b.local_mem, b.samplers, b.branch_stack) == (0x10, 96, 4096, 1, 3)
  assert b.args == (ab.AdrenoArg(ab.ARG_VALUE, 0), ab.AdrenoArg(ab.ARG_VALUE, 8), ab.AdrenoArg(ab.ARG_VALUE, 20))
  # a 4-byte immediate at dword 12 (byte 48), a 2-byte one at half-word 26 (byte 52)
  assert b.immediates == ((48, 4, 0x3F800000), (52, 2, 0xBEEF))

def test_malformed_binaries_are_refused_with_the_field() -> None:
  lib = make_binary()
  with pytest.raises(PrepError, match="names b'r_8_4', expected kernel 'other'"): ab.parse(lib, "other")
  bad = bytearray(lib)
  struct.pack_into("<I", bad, ab.CODE_SIZE, 0x200)   # the code would run past the end
  with pytest.raises(PrepError, match="code of 512 bytes at 0x700"): ab.parse(bytes(bad), "r_8_4")
  with pytest.raises(PrepError, match="unknown kind 7"): ab.parse(make_binary(args=((7, 0),)), "r_8_4")
  with pytest.raises(PrepError, match="outside the 16-byte binary"): ab.parse(lib[:16], "r_8_4")

def _params(*dts: object) -> list[UOp]: return [UOp(Ops.PARAM, dt, arg=i) for i, dt in enumerate(dts)]   # type: ignore[arg-type]

def test_prep_gives_the_dispatch_its_offsets_footprint_and_images() -> None:
  # kernel(written image 2x8 float, buffer, read image 3x4 half, int): the binary puts the buffer at dword 4, the int at dword 6
  lib = make_binary(args=((ab.ARG_IBO, 0), (ab.ARG_VALUE, 4), (ab.ARG_TEXTURE, 0), (ab.ARG_VALUE, 6)), consts=((7, 9, 1),))
  params = _params(dtypes.imagef((2, 8)), dtypes.float32.ptr(), dtypes.imageh((3, 4)))
  prog = prep_adreno(UOp(Ops.DEVICE, arg="QCOM"), lib, "r_8_4", params, 1)
  d = prog.arg
  assert isinstance(d, QCOMProgramData) and prog.src[1].arg == CODE + bytes(128 - len(CODE))   # the code alone, 128-byte padded
  assert (d.code_offset, d.code_size, d.instrlen, d.full_regs, d.half_regs, d.local_mem) == (0, 24, 3, 7, 3, 4096)
  # constants: the buffer's 8 bytes at 16, the int at 24, the immediate at 36: 48 bytes; the descriptors follow on 64 bytes,
  # the read image's first; each image argument's offset is its descriptor's BASE
  assert d.const_bytes == 48 and d.tex_offset == 64 and d.immediates == ((36, 4, 7),)
  assert d.images == (ImageArg(0, 2, 8, False, True), ImageArg(2, 3, 4, True, False))
  assert d.arg_offsets == (64 + 64 + 16, 16, 64 + 16, 24) and d.kernarg_size == 64 + 128 + 16
  with pytest.raises(PrepError, match="argument 0 is not an image in the program, kind 2"):
    prep_adreno(UOp(Ops.DEVICE, arg="QCOM"), lib, "r_8_4", _params(dtypes.float32.ptr(), dtypes.float32.ptr(), dtypes.imageh((3, 4))), 1)
  with pytest.raises(PrepError, match="the binary has 4 arguments, the program 3 buffers and 0 variables"):
    prep_adreno(UOp(Ops.DEVICE, arg="QCOM"), lib, "r_8_4", params, 0)

def test_launch_writes_the_immediates_and_the_footprint() -> None:
  lib = make_binary(consts=((0x11223344, 10, 1), (0xAAAA, 22, 0), (0xBBBB, 23, 0)))
  prog = prep_adreno(UOp(Ops.DEVICE, arg="QCOM"), lib, "r_8_4", _params(dtypes.float32.ptr(), dtypes.float32.ptr()), 1)
  w = Words()
  lower.write_immediates(w, prog.arg, UOp.new_buffer("QCOM", 256, dtypes.uint8))
  heads, i = [], 0
  while i < len(w.words):
    h = pm4.decode_header(w.words[i], 4 * i)
    heads.append((h.code, w.words[i + 1:i + 1 + h.count]))
    i += 1 + h.count
  # dword 10 holds the 4-byte value, dword 11 the two 2-byte ones (half-words 22 and 23); then CP_WAIT_FOR_ME
  assert [(c, b[2:]) for c, b in heads] == [(pm4.CP_MEM_WRITE, [0x11223344]), (pm4.CP_MEM_WRITE, [0xBBBBAAAA]), (pm4.CP_WAIT_FOR_ME, [])]
  assert regs.cs_ctrl_reg0(prog.arg.full_regs, prog.arg.half_regs) == 3 << 1 | 7 << 7
