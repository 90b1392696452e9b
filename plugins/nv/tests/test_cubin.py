"""The cubin reader against `cuobjdump -elf` of the same cubins (built by ptxas from PTX per arch), and its errors."""
from __future__ import annotations
import re, struct
import pytest
from nv_ptx import ADD, ARCHS, GLOBAL, TWO
from nvtools import ElfListing, cuobjdump_elf, ptx_cubin
from plugin_nv.cubin import Cubin, CubinError, parse_records, sm_of_flags

# where the parameters start in constant bank 0 (below them: the driver's launch fields), per arch
CBANK0_PARAMS = {"sm_80": 0x160, "sm_90": 0x210, "sm_120": 0x380}
# attribute codes and formats as cuobjdump names them
EIATTR = {"EIATTR_MAX_THREADS": 0x05, "EIATTR_PARAM_CBANK": 0x0a, "EIATTR_REQNTID": 0x10, "EIATTR_FRAME_SIZE": 0x11,
          "EIATTR_MIN_STACK_SIZE": 0x12, "EIATTR_KPARAM_INFO": 0x17, "EIATTR_CBANK_PARAM_SIZE": 0x19, "EIATTR_MAXREG_COUNT": 0x1b,
          "EIATTR_EXIT_INSTR_OFFSETS": 0x1c, "EIATTR_REGCOUNT": 0x2f, "EIATTR_CUDA_API_VERSION": 0x37}
EIFMT = {"EIFMT_NVAL": 1, "EIFMT_BVAL": 2, "EIFMT_HVAL": 3, "EIFMT_SVAL": 4}
R_CUDA_64 = 2

def both(src: str, arch: str) -> tuple[Cubin, ElfListing]:
  data = ptx_cubin(src, arch)
  return Cubin(data), ElfListing(cuobjdump_elf(data))

def text_bytes(listing: ElfListing, section: str) -> bytes:
  return b"".join(struct.pack("<I", w) for w in listing.words[section])

@pytest.mark.parametrize("arch", ARCHS)
def test_add_kernel_matches_cuobjdump(arch: str):
  cubin, ref = both(ADD, arch)
  assert cubin.arch == arch and cubin.sm == ref.sm == int(arch[3:]) and cubin.flags == ref.flags
  assert cubin.kernel_names() == ["add"]
  k = cubin.kernel("add")
  # registers: the module-wide EIATTR_REGCOUNT record of the kernel's symbol
  (regcount,) = ref.attrs(".nv.info", "EIATTR_REGCOUNT")[:1]
  assert re.search(r"function: add\(0x[0-9a-f]+\)\s+register count: (\d+)", regcount) and k.regs == int(regcount.rsplit(":", 1)[1]) > 0
  # parameters: two 8-byte addresses then an int32, at offsets 0, 8, 16 of a 20-byte area starting at the arch's bank-0 offset
  kparams = sorted((int(o, 16), int(off, 16), int(sz, 16)) for o, off, sz in
                   (re.search(r"Ordinal : (0x[0-9a-f]+)\s+Offset\s+: (0x[0-9a-f]+)\s+Size\s+: (0x[0-9a-f]+)", v).groups()  # type: ignore[union-attr]
                    for v in ref.attrs(".nv.info.add", "EIATTR_KPARAM_INFO")))
  assert [(p.ordinal, p.offset, p.size) for p in k.params] == kparams == [(0, 0, 8), (1, 8, 8), (2, 16, 4)]
  assert all(p.cbank == 0x1f for p in k.params)
  (sym, packed), = ref.ints(".nv.info.add", "EIATTR_PARAM_CBANK")
  assert (k.cbank0_offset, k.param_size) == (packed & 0xffff, packed >> 16) == (CBANK0_PARAMS[arch], 20)
  assert cubin.symbols[sym].name == ".nv.constant0.add"
  assert ref.ints(".nv.info.add", "EIATTR_CBANK_PARAM_SIZE") == [[20]]
  assert k.cbank0_size == ref.sizes[".nv.constant0.add"] == CBANK0_PARAMS[arch] + 20
  # shared memory: the 512 bytes the kernel declares, plus the 1 KiB sm_90+ reserve for the system, as cuobjdump's smem says
  assert k.shared_size == ref.sizes[".nv.shared.add"] == ref.text_info[".text.add"][1] == (512 if arch == "sm_80" else 1536)
  assert k.frame_size == ref.text_info[".text.add"][0] == 0
  assert k.max_threads == tuple(ref.ints(".nv.info.add", "EIATTR_MAX_THREADS")[0]) == (128, 1, 1) and k.req_threads == ()
  assert k.code == text_bytes(ref, ".text.add") and len(k.code) == ref.sizes[".text.add"] and k.code_align == 128
  assert k.relocs == () and not ref.relocs.get(".rela.text.add") and k.const_banks == {}

@pytest.mark.parametrize("arch", ARCHS)
def test_two_kernels_each_get_their_own_attributes(arch: str):
  cubin, ref = both(TWO, arch)
  assert sorted(cubin.kernel_names()) == ["one_arg", "r_64_8"]
  regs = {m.group(1): int(m.group(2)) for v in ref.attrs(".nv.info", "EIATTR_REGCOUNT")
          if (m := re.search(r"function: (\w+)\(0x[0-9a-f]+\)\s+register count: (\d+)", v))}
  r, one = cubin.kernel("r_64_8"), cubin.kernel("one_arg")
  assert (r.regs, one.regs) == (regs["r_64_8"], regs["one_arg"])
  assert r.req_threads == tuple(ref.ints(".nv.info.r_64_8", "EIATTR_REQNTID")[0]) == (32, 4, 1) and r.max_threads == ()
  assert [(p.offset, p.size) for p in r.params] == [(0, 8), (8, 8), (16, 4)] and [(p.offset, p.size) for p in one.params] == [(0, 8)]
  assert (r.param_size, one.param_size) == (20, 8) and r.cbank0_offset == one.cbank0_offset == CBANK0_PARAMS[arch]
  assert (r.cbank0_size, one.cbank0_size) == (ref.sizes[".nv.constant0.r_64_8"], ref.sizes[".nv.constant0.one_arg"])
  assert r.shared_size == one.shared_size == ref.text_info[".text.r_64_8"][1] == 0
  assert r.code == text_bytes(ref, ".text.r_64_8") and one.code == text_bytes(ref, ".text.one_arg") and r.code != one.code

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("src", [ADD, TWO, GLOBAL], ids=["add", "two", "global"])
def test_every_record_matches_cuobjdump(src: str, arch: str):
  cubin, ref = both(src, arch)
  names = [".nv.info"] + [".nv.info." + k for k in cubin.kernel_names()]
  for name in names:
    ours = parse_records(cubin.section(name).data, name)
    theirs = ref.records[name]
    assert [r.fmt for r in ours] == [EIFMT[f] for _, f, _ in theirs], name
    assert [r.attr for r, (a, _, _) in zip(ours, theirs) if a in EIATTR] == [EIATTR[a] for a, _, _ in theirs if a in EIATTR], name
  assert sum(len(ref.records[n]) for n in names) >= 8

@pytest.mark.parametrize("arch", ARCHS)
def test_relocations_match_cuobjdump(arch: str):
  cubin, ref = both(GLOBAL, arch)
  # bank 4 holds the global's address: one R_CUDA_64 to gtab (REL tables on sm_8x, RELA after)
  kind = ".rel" if arch == "sm_80" else ".rela"
  assert [(r.offset, r.symbol, r.type) for r in cubin.relocs(".nv.constant4")] == [(0, "gtab", R_CUDA_64)]
  assert ref.relocs[kind + ".nv.constant4"] == [(0, "gtab", "R_CUDA_64")]
  assert [(r.offset, r.symbol) for r in cubin.relocs(".debug_frame")] == [(o, s) for o, s, _ in ref.relocs[kind + ".debug_frame"]]
  assert cubin.kernel("gk").relocs == () and cubin.module_data() == sorted(cubin.module_data(), key=[s.name for s in cubin.sections].index)
  assert {".nv.constant4", ".nv.global.init"} <= set(cubin.module_data())
  assert (2 in cubin.kernel("gk").const_banks) == (arch == "sm_80")

def test_arch_from_e_flags():
  # ELF ABI 8 (CUDA 12.9+, 13): SM in bits 8-15; ABI 7: bits 0-7 (sm_70 as CUDA 12 wrote it: 0x460546)
  assert [sm_of_flags(f, 8) for f in (0x6005004, 0x6005a04, 0x6007802)] == [80, 90, 120]
  assert sm_of_flags(0x460546, 7) == 70 and sm_of_flags(0x5a055a, 7) == 90

# *** malformed input ***

def test_truncated_file():
  data = ptx_cubin(ADD, "sm_90")
  with pytest.raises(CubinError, match=r"section headers: \d+ at 0x[0-9a-f]+ run past the end of the file .*truncated"): Cubin(data[:len(data) // 2])
  with pytest.raises(CubinError, match="header: the file has 10 bytes, an ELF64 header needs 64"): Cubin(data[:10])

def test_bad_magic_and_machine():
  data = ptx_cubin(ADD, "sm_90")
  with pytest.raises(CubinError, match=r"header: bad magic b'MZ\\x90\\x00'"): Cubin(b"MZ\x90\x00" + data[4:])
  with pytest.raises(CubinError, match="header: e_machine 62, expected EM_CUDA"): Cubin(data[:18] + struct.pack("<H", 62) + data[20:])
  with pytest.raises(CubinError, match="expected ELF64 little-endian"): Cubin(data[:4] + b"\x01" + data[5:])

def test_info_record_running_past_its_section():
  data = bytearray(ptx_cubin(ADD, "sm_90"))
  sec = Cubin(bytes(data)).section(".nv.info.add")
  assert data[sec.offset] == 4   # the first record is an SVAL one: its u16 is the payload size
  struct.pack_into("<H", data, sec.offset + 2, 0x400)
  with pytest.raises(CubinError, match=r"section .nv.info.add: record 0x37 at 0x0 has 1024 payload bytes, running past the section's end"):
    Cubin(bytes(data)).kernel("add")
  data[sec.offset] = 9
  with pytest.raises(CubinError, match="record at 0x0 has unknown format 0x9"): Cubin(bytes(data)).kernel("add")
  with pytest.raises(CubinError, match="a record header at 0x4 runs past"): parse_records(b"\x03\x19\x14\x00\x04\x0a", "x")

def test_unknown_kernel_and_missing_section():
  cubin = Cubin(ptx_cubin(ADD, "sm_80"))
  with pytest.raises(CubinError, match=r"no kernel 'sub' in the cubin \(it has \['add'\]\)"): cubin.kernel("sub")
  with pytest.raises(CubinError, match="no section .nv.shared.sub"): cubin.section(".nv.shared.sub")
