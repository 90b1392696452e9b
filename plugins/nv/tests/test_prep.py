"""The NV prep rules: a compiled PROGRAM with a cubin becomes PROGRAM(DEVICE, BINARY(image)) with NVProgramData whose fields
equal what cuobjdump says of the same cubin; mismatched programs, archs and unloadable cubins are refused."""
from __future__ import annotations
import dataclasses, re, struct
import pytest
from core.codegen.program import ProgramSpec
from core.hcq.queue_ir import ProgramData
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from nv_ptx import ADD, ARCHS, DOUBLE, GLOBAL, TWO
from nvtools import ElfListing, cuobjdump_elf, ptx_cubin
from plugin_nv.cubin import Cubin, Reloc
from plugin_nv.prep import NVProgramData, PrepError, kernel_image, load_cubin, pm_prep_program

def program(name: str, binary: bytes, nbufs: int, nvars: int) -> UOp:
  """A compiled PROGRAM as codegen makes it: its LINEAR holds `nbufs` PARAMs and `nvars` variables."""
  bufs = [UOp.param(i, dtypes.float32.ptr(64)) for i in range(nbufs)]
  variables = tuple(UOp(Ops.DEFINE_VAR, dtypes.int32, (), (f"v{i}", 1, 10)) for i in range(nvars))
  spec = ProgramSpec(name, (64, 1, 1), (1, 1, 1), variables)
  return UOp(Ops.PROGRAM, src=(UOp(Ops.SINK, arg=name), UOp(Ops.DEVICE, arg="NV"), UOp(Ops.LINEAR, src=tuple(bufs) + variables),
                               UOp(Ops.SOURCE, arg="(ptx)"), UOp(Ops.BINARY, arg=binary)), arg=spec)

def words(listing: ElfListing, section: str) -> bytes: return b"".join(struct.pack("<I", w) for w in listing.words[section])

@dataclasses.dataclass
class FakeNVDevice:
  arch: str
  registered: list = dataclasses.field(default_factory=list)
  def register_program(self, name, uops, data, image) -> None: self.registered.append((name, len(uops), data.name, len(image)))

@pytest.mark.parametrize("arch", ARCHS)
def test_prep_rewrite_matches_cuobjdump(arch: str):
  binary = ptx_cubin(TWO, arch)
  ref = ElfListing(cuobjdump_elf(binary))
  out = graph_rewrite(program("r_64_8", binary, 2, 1), pm_prep_program, name="prep")
  assert out.op is Ops.PROGRAM and [s.op for s in out.src] == [Ops.DEVICE, Ops.BINARY] and out.src[0].arg == "NV"
  d = out.arg
  assert isinstance(d, NVProgramData) and isinstance(d, ProgramData)
  regs = {m.group(1): int(m.group(2)) for v in ref.attrs(".nv.info", "EIATTR_REGCOUNT")
          if (m := re.search(r"function: (\w+)\(0x[0-9a-f]+\)\s+register count: (\d+)", v))}
  (_, packed), = ref.ints(".nv.info.r_64_8", "EIATTR_PARAM_CBANK")
  assert (d.name, d.arch, d.regs) == ("r_64_8", arch, regs["r_64_8"])
  # the kernarg buffer is constant bank 0: buffers (8-byte addresses) first, then the int32 variable, from the parameter offset on
  c0 = packed & 0xffff
  assert packed >> 16 == 20 and d.kernarg_align == 8
  assert d.cbank0_offset == c0 == {"sm_80": 0x160, "sm_90": 0x210, "sm_120": 0x380}[arch] and d.arg_offsets == (c0, c0 + 8, c0 + 16)
  assert d.cbank0_size == ref.sizes[".nv.constant0.r_64_8"] == d.cbank0_offset + 20
  # then the QMD (256 bytes on sm_8x, 384 later) at the first 256-aligned address past the bank, the buffer being 64-aligned
  qmd = 256 if arch == "sm_80" else 384
  assert d.qmd_offset == (c0 + 20 + 15) // 16 * 16 and d.kernarg_size == d.qmd_offset + 240 + qmd
  assert d.shared_size == ref.text_info[".text.r_64_8"][1] == 0 and d.local_size == ref.text_info[".text.r_64_8"][0] == 0
  assert d.max_threads == (32, 4, 1) and d.const_banks == ()
  # the image is the kernel's code, byte for byte as cuobjdump dumps .text.r_64_8
  assert (d.code_offset, d.code_size) == (0, ref.sizes[".text.r_64_8"]) and out.src[1].arg == words(ref, ".text.r_64_8")
  # a prepared program no longer matches: the rewrite reaches a fixed point
  assert graph_rewrite(out, pm_prep_program) is out

def test_shared_memory_and_max_threads():
  binary = ptx_cubin(ADD, "sm_90")
  d, image = load_cubin(binary, "add", 2, 1)
  assert (d.shared_size, d.max_threads, d.arg_offsets) == (1536, (128, 1, 1), (0x210, 0x218, 0x220))
  assert image == Cubin(binary).section(".text.add").data

def test_constant_bank_2_rides_behind_the_code():
  binary = ptx_cubin(DOUBLE, "sm_80")
  ref = ElfListing(cuobjdump_elf(binary))
  d, image = load_cubin(binary, "dk", 2, 0)
  code = ref.sizes[".text.dk"]
  off = -(-code // 256) * 256
  assert d.const_banks == ((2, off, ref.sizes[".nv.constant2.dk"]),) and ref.sizes[".nv.constant2.dk"] % 8 == 0
  assert image[:code] == words(ref, ".text.dk") and image[code:off] == bytes(off - code) and image[off:] == words(ref, ".nv.constant2.dk")
  # what ptxas pooled: the float64 literals it could not encode as immediates (pi and/or 1.2345678901234567)
  pooled = struct.unpack(f"<{(len(image) - off) // 8}d", image[off:])
  assert pooled and set(pooled) <= {3.141592653589793, 1.2345678901234567}
  d90, image90 = load_cubin(ptx_cubin(DOUBLE, "sm_90"), "dk", 2, 0)
  assert d90.const_banks == () and len(image90) == d90.code_size

def test_parameter_count_and_kind_mismatch():
  binary = ptx_cubin(TWO, "sm_90")
  with pytest.raises(PrepError, match=r"kernel r_64_8: the cubin's kernel takes 3 parameters, the program has 1 buffers and 0 variables \(1\)"):
    graph_rewrite(program("r_64_8", binary, 1, 0), pm_prep_program)
  with pytest.raises(PrepError, match=r"parameter sizes \[8, 8, 4\], expected 3 buffer addresses \(8 bytes\) then 0 int32"):
    graph_rewrite(program("r_64_8", binary, 3, 0), pm_prep_program)
  with pytest.raises(PrepError, match=r"no kernel 'E_4' in the cubin \(it has \['one_arg', 'r_64_8'\]\)"):
    graph_rewrite(program("E_4", binary, 1, 0), pm_prep_program)

def test_device_arch_is_checked():
  binary = ptx_cubin(TWO, "sm_90")
  dev = FakeNVDevice("sm_90")
  out = graph_rewrite(program("one_arg", binary, 1, 0), pm_prep_program, dev)
  assert out.arg.arch == "sm_90" and out.arg.arg_offsets == (0x210,) and out.arg.kernarg_size == 0x220 + 240 + 384
  # the device is told of the kernel (its LINEAR's uops: one PARAM), for a software GPU's host build
  assert dev.registered == [("one_arg", 1, "one_arg", len(out.src[1].arg))]
  with pytest.raises(PrepError, match="kernel one_arg: the cubin is for sm_90, the device runs sm_120"):
    graph_rewrite(program("one_arg", binary, 1, 0), pm_prep_program, FakeNVDevice("sm_120"))
  with pytest.raises(PrepError, match="the NV device object passed to prep has no `arch` string"):
    graph_rewrite(program("one_arg", binary, 1, 0), pm_prep_program, object())

def test_unloadable_cubins_are_refused():
  with pytest.raises(PrepError, match=r"module-scope data \[.*'.nv.constant4'.*\], which needs a loader"):
    load_cubin(ptx_cubin(GLOBAL, "sm_90"), "gk", 1, 1)
  k = Cubin(ptx_cubin(ADD, "sm_90")).kernel("add")
  with pytest.raises(PrepError, match=r"kernel add: its code has 1 relocations \(type 2 at 0x10 to gtab\)"):
    kernel_image(dataclasses.replace(k, relocs=(Reloc(0x10, 2, "gtab", 0),)))
  with pytest.raises(PrepError, match=r"kernel add: bad cubin: header: bad magic"):
    load_cubin(b"\0" * 64, "add")
