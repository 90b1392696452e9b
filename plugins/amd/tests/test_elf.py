"""The plugin's own ELF64 reader and loader on a hand-built object (layout and R_AMDGPU_* relocations with independently
computed expected values), and its msgpack decoder on known byte strings."""
from __future__ import annotations
import struct
import pytest
from plugin_amd.elf import ELF, ELFError, load, SHF_ALLOC
from plugin_amd.msgpack import MsgpackError, unpackb

def build_elf(sections: list[dict], symbols: list[tuple[str, int, int, int]], relas: dict[str, list[tuple[int, int, int, int]]],
              etype: int = 1, machine: int = 224) -> bytes:
  """A minimal ELF64 relocatable object. sections: {name, type, flags, align, data}; symbols: (name, section index, value,
  info); relas: target section name -> [(offset, symbol index, type, addend)]. Written from the ELF gABI layouts."""
  secs = [dict(name="", type=0, flags=0, align=0, data=b"")] + sections
  for tgt, rs in relas.items():
    secs.append(dict(name=".rela" + tgt, type=4, flags=0x40, align=8, data=b"".join(struct.pack("<QQq", o, (s << 32) | t, a) for o, s, t, a in rs),
                     link="symtab", info=next(i for i, s in enumerate(secs) if s["name"] == tgt), entsize=24))
  strtab = b"\0" + b"".join(n.encode() + b"\0" for n, *_ in symbols)
  syms, off = [b"\0" * 24], 1
  for n, shndx, value, info in symbols:
    syms.append(struct.pack("<IBBHQQ", off, info, 0, shndx, value, 0))
    off += len(n) + 1
  secs.append(dict(name=".symtab", type=2, flags=0, align=8, data=b"".join(syms), link="strtab", info=1, entsize=24))
  secs.append(dict(name=".strtab", type=3, flags=0, align=1, data=strtab))
  secs.append(dict(name=".shstrtab", type=3, flags=0, align=1, data=b""))
  shstr = b"\0" + b"".join(s["name"].encode() + b"\0" for s in secs[1:])
  secs[-1]["data"] = shstr
  names = [shstr.index(s["name"].encode() + b"\0") if s["name"] else 0 for s in secs]
  body, offsets = bytearray(b"\0" * 64), []
  for s in secs:
    body += b"\0" * (-len(body) % max(s["align"], 1))
    offsets.append(len(body))
    body += s["data"]
  body += b"\0" * (-len(body) % 8)
  shoff = len(body)
  idx = {s["name"].lstrip("."): i for i, s in enumerate(secs)}
  for i, s in enumerate(secs):
    link = idx[s["link"]] if isinstance(s.get("link"), str) else 0
    body += struct.pack("<IIQQQQIIQQ", names[i], s["type"], s["flags"], 0, offsets[i] if i else 0, len(s["data"]), link, s.get("info", 0),
                        s["align"], s.get("entsize", 0))
  hdr = b"\x7fELF" + bytes([2, 1, 1, 64, 3]) + b"\0" * 7
  hdr += struct.pack("<HHIQQQIHHHHHH", etype, machine, 1, 0, 0, shoff, 0x41, 64, 0, 0, 64, len(secs), len(secs) - 1)
  body[:64] = hdr
  return bytes(body)

TEXT = bytes(range(256)) * 2           # 512 bytes of "code"
RODATA = b"\xaa" * 64 + b"\xbb" * 64   # a 64-byte descriptor, then 64 bytes of constants
# symbol 1: the kernel at .text+0, 2: the descriptor at .rodata+0, 3: constants at .rodata+64, 4: an absolute symbol
SYMS = [("k", 1, 0, 0x12), ("k.kd", 2, 0, 0x11), ("consts", 2, 64, 0x01), ("abs_sym", 0xfff1, 0x1234, 0x00)]
SECTIONS = [dict(name=".text", type=1, flags=SHF_ALLOC | 0x4, align=256, data=TEXT), dict(name=".rodata", type=1, flags=SHF_ALLOC, align=64, data=RODATA),
            dict(name=".comment", type=1, flags=0, align=1, data=b"not loaded")]

def test_reader_sections_symbols_relocs():
  obj = build_elf(SECTIONS, SYMS, {".rodata": [(16, 1, 5, 0)]})
  e = ELF(obj)
  assert e.type == 1 and e.machine == 224 and e.flags == 0x41
  assert [s.name for s in e.sections][:4] == ["", ".text", ".rodata", ".comment"] and e.section(".text").data == TEXT
  assert [(s.name, s.shndx, s.value) for s in e.symbols[1:]] == [("k", 1, 0), ("k.kd", 2, 0), ("consts", 2, 64), ("abs_sym", 0xfff1, 0x1234)]
  (tgt, rs), = e.relocations()
  assert tgt.name == ".rodata" and [(r.offset, r.sym, r.type, r.addend) for r in rs] == [(16, 1, 5, 0)]

def test_layout_and_pc_relative_relocations():
  # .text at image offset 0 (256-aligned), .rodata right after it at 512 (64-aligned); .comment is not allocated
  relas = {".rodata": [(16, 1, 5, 0x10)],                       # REL64: kd.entry = k + 0x10 - (512 + 16)
           ".text": [(4, 3, 10, 4), (12, 3, 11, 4),           # REL32_LO/HI: consts + 4 - P (the s_getpc pattern)
                     (20, 2, 4, -8), (24, 0, 0, 0)]}           # REL32: kd - 8 - P; R_AMDGPU_NONE
  img = load(ELF(build_elf(SECTIONS, SYMS, relas)))
  assert len(img.data) == 512 + 128
  assert img.data[512 + 24:512 + 64] == RODATA[24:64] and img.data[512 + 64:] == RODATA[64:] and img.data[:4] == TEXT[:4]
  assert struct.unpack_from("<q", img.data, 512 + 16)[0] == 0x10 - 528
  d = (512 + 64 + 4) - 4
  assert struct.unpack_from("<I", img.data, 4)[0] == d & 0xffffffff
  d_hi = (512 + 64 + 4) - 12
  assert struct.unpack_from("<I", img.data, 12)[0] == (d_hi >> 32) & 0xffffffff == 0
  assert struct.unpack_from("<i", img.data, 20)[0] == 512 - 8 - 20
  assert img.data[24:28] == TEXT[24:28]   # NONE changed nothing
  assert img.section_offset(ELF(build_elf(SECTIONS, SYMS, relas)), ".rodata") == 512

def test_negative_rel32_hi_is_all_ones():
  # a symbol before the place: S + A - P < 0, so the high word is 0xffffffff
  img = load(ELF(build_elf(SECTIONS, SYMS, {".rodata": [(80, 1, 10, 0), (84, 1, 11, 0)]})))
  assert struct.unpack_from("<I", img.data, 512 + 80)[0] == (0 - 592) & 0xffffffff
  assert struct.unpack_from("<I", img.data, 512 + 84)[0] == 0xffffffff

def test_absolute_relocations_need_a_base():
  relas = {".rodata": [(64, 3, 3, 8), (72, 4, 1, 0), (76, 4, 2, 0x100000000)]}
  with pytest.raises(ELFError, match="R_AMDGPU_ABS64 at .rodata\\+0x40 needs the image's load address"): load(ELF(build_elf(SECTIONS, SYMS, relas)))
  img = load(ELF(build_elf(SECTIONS, SYMS, relas)), base=0x7f0000000000)
  assert struct.unpack_from("<Q", img.data, 512 + 64)[0] == 0x7f0000000000 + 512 + 64 + 8
  # an SHN_ABS symbol is already an address: the base is not added
  assert struct.unpack_from("<I", img.data, 512 + 72)[0] == 0x1234 and struct.unpack_from("<I", img.data, 512 + 76)[0] == 1
  # the same relocations against a section symbol do get the base
  img = load(ELF(build_elf(SECTIONS, SYMS, {".rodata": [(72, 1, 1, 0x10), (76, 1, 2, 0x10)]})), base=0x123456789000)
  assert struct.unpack_from("<II", img.data, 512 + 72) == (0x56789010, 0x1234)
  # PC-relative values do not depend on the base
  rel = {".rodata": [(16, 1, 5, 0)]}
  assert load(ELF(build_elf(SECTIONS, SYMS, rel)), base=0x10000).data == load(ELF(build_elf(SECTIONS, SYMS, rel))).data

def test_bad_objects_are_refused():
  with pytest.raises(ELFError, match="bad magic"): ELF(b"\0" * 100)
  with pytest.raises(ELFError, match="expected EM_AMDGPU"): load(ELF(build_elf(SECTIONS, SYMS, {}, machine=62)))
  with pytest.raises(ELFError, match="undefined"): load(ELF(build_elf(SECTIONS, SYMS + [("ext", 0, 0, 0x10)], {".text": [(0, 5, 4, 0)]})))
  with pytest.raises(ELFError, match="not supported by this loader"): load(ELF(build_elf(SECTIONS, SYMS, {".text": [(0, 1, 7, 0)]})))
  with pytest.raises(ELFError, match="past the end"): ELF(build_elf(SECTIONS, SYMS, {})[:200])

@pytest.mark.parametrize("raw,value", [
  (b"\x00", 0), (b"\x7f", 127), (b"\xff", -1), (b"\xe0", -32), (b"\xcc\xff", 255), (b"\xcd\x01\x00", 256), (b"\xce\x00\x01\x00\x00", 65536),
  (b"\xcf" + (2**64 - 1).to_bytes(8, "big"), 2**64 - 1), (b"\xd0\x80", -128), (b"\xd1\x80\x00", -32768), (b"\xd2\xff\xff\xff\xfe", -2),
  (b"\xd3" + (-2**63).to_bytes(8, "big", signed=True), -2**63), (b"\xc0", None), (b"\xc2", False), (b"\xc3", True),
  (b"\xca\x3f\xc0\x00\x00", 1.5), (b"\xcb\x40\x09\x21\xfb\x54\x44\x2d\x18", 3.141592653589793),
  (b"\xa0", ""), (b"\xa5hello", "hello"), (b"\xd9\x03abc", "abc"), (b"\xda\x00\x02\xc3\xa9", "\u00e9"), (b"\xdb\x00\x00\x00\x01z", "z"),
  (b"\xc4\x02\x01\x02", b"\x01\x02"), (b"\x93\x01\x02\x03", [1, 2, 3]), (b"\xdc\x00\x02\xc3\xc2", [True, False]), (b"\x90", []),
  (b"\x82\xa7compact\xc3\xa6schema\x00", {"compact": True, "schema": 0}), (b"\xde\x00\x01\xa1a\x91\x80", {"a": [{}]}),
  (b"\xd4\x05\x07", (5, b"\x07")), (b"\xc7\x02\xff\x01\x02", (-1, b"\x01\x02")),
])
def test_msgpack_known_bytes(raw, value):
  got = unpackb(raw)
  assert got == value and type(got) is type(value)

def test_msgpack_large_containers():
  assert unpackb(b"\xdd\x00\x00\x00\x11" + b"\x01" * 17) == [1] * 17
  assert unpackb(b"\xdf\x00\x00\x00\x10" + b"".join(bytes([0xa1, 0x61 + i, i]) for i in range(16))) == {chr(0x61 + i): i for i in range(16)}

@pytest.mark.parametrize("raw,msg", [(b"\xc1", "not a MessagePack type code"), (b"\x92\x01", "truncated"), (b"\x01\x02", "trailing"),
                                     (b"\xa2\xff\xfe", "not UTF-8"), (b"\x81\x90\x01", "unhashable")])
def test_msgpack_errors(raw, msg):
  with pytest.raises(MsgpackError, match=msg): unpackb(raw)
