"""core.device.elf: section headers and symbol tables read from ELF64 files built here byte by byte."""
import struct
import pytest
from core.device.elf import Symbol, read_elf64, read_symbols

def elf(sections: list[tuple[str, int, bytes, int, int]]) -> bytes:
  """An ELF64 little-endian relocatable file with a null section, then `sections` (name, type, data, link, entsize), then
  .shstrtab."""
  names = b"\0" + b"".join(n.encode() + b"\0" for n, *_ in sections) + b".shstrtab\0"
  secs = sections + [(".shstrtab", 3, names, 0, 0)]
  body, offs = b"", []
  for _, _, data, _, _ in secs:
    offs.append(64 + len(body))
    body += data
  shoff = 64 + len(body)
  hdr = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(secs) + 1, len(secs))
  shdrs, name_at = bytes(64), 1
  for (name, typ, data, link, entsize), off in zip(secs, offs):
    shdrs += struct.pack("<IIQQQQIIQQ", name_at, typ, 0, 0, off, len(data), link, 0, 8, entsize)
    name_at += len(name) + 1
  return hdr + body + shdrs

def sym(name_off: int, info: int, shndx: int, value: int, size: int) -> bytes: return struct.pack("<IBBHQQ", name_off, info, 0, shndx, value, size)

def test_symbols_with_their_names_binding_and_type():
  strs = b"\0kernel\0data\0"
  tab = sym(0, 0, 0, 0, 0) + sym(1, 1 << 4 | 2, 1, 0x40, 0x100) + sym(8, 2 << 4 | 1, 1, 0x200, 8)
  e = read_elf64(elf([(".symtab", 2, tab, 2, 24), (".strtab", 3, strs, 0, 0)]), 62, "x86-64")
  assert [s.name for s in e.sections] == ["", ".symtab", ".strtab", ".shstrtab"]
  syms = read_symbols(e.sections, e.sections[1])
  assert syms == [Symbol("", 0, 0, 0, 0, 0), Symbol("kernel", 0x40, 0x100, 0x12, 0, 1), Symbol("data", 0x200, 8, 0x21, 0, 1)]
  assert (syms[1].bind, syms[1].type, syms[2].bind, syms[2].type) == (1, 2, 2, 1)

class BadObject(ValueError): pass

def test_a_malformed_symbol_table_raises_the_readers_error():
  strs = b"\0k\0"
  cases = [((".symtab", 2, sym(1, 0, 0, 0, 0) + b"\0" * 4, 2, 24), "expected 24-byte entries"),   # cut short
           ((".symtab", 2, sym(1, 0, 0, 0, 0), 2, 16), "entry size 16"),
           ((".symtab", 2, sym(1, 0, 0, 0, 0), 0, 24), "names string table 0"),
           ((".symtab", 2, sym(9, 0, 0, 0, 0), 2, 24), "symbol 0 name: string offset 0x9 is outside")]
  for tab, msg in cases:
    e = read_elf64(elf([tab, (".strtab", 3, strs, 0, 0)]), None)
    with pytest.raises(BadObject, match=msg): read_symbols(e.sections, e.sections[1], BadObject)
