"""ELF64 little-endian section headers and symbol tables, the part of the object file format every reader here shares (the
CPU's in-process loader, core/device/elfload.py; NV's cubin reader, AMD's code-object loader): the header checked, each section
with its name and bytes, every offset and size checked against the file. Facts from the ELF-64 object file format."""
from __future__ import annotations
import struct
from core.helpers import frozen_record
from typing import NamedTuple

SHT_NOBITS = 8

# immutable records. Section stays a dataclass: a NamedTuple field `index` would shadow tuple.index
@frozen_record
class Section:
  """One section header with its name and bytes (a docstring of its own: dataclass() gives a class without one a signature from
  inspect.signature, ~0.5M instructions at import)."""
  index: int
  name: str
  type: int
  flags: int
  addr: int
  offset: int
  size: int
  link: int
  info: int
  align: int
  entsize: int
  data: bytes = b""   # b"" for NOBITS (.bss)

# a NamedTuple, whose class costs a quarter of a frozen dataclass's to create (the CPU loader imports this module at every start)
class ELF(NamedTuple):
  type: int          # e_type: 1 relocatable, 2 executable, 3 shared object
  machine: int       # e_machine
  entry: int         # e_entry
  flags: int         # e_flags (machine-specific: a cubin's SM)
  abi_version: int   # e_ident[EI_ABIVERSION]
  sections: list[Section]

def unpack(err: type[Exception], fmt: str, data: bytes, off: int, what: str) -> tuple:
  """struct.unpack_from that raises `err` (naming `what`) instead of reading past the data."""
  if off < 0 or off + struct.calcsize(fmt) > len(data):
    raise err(f"{what}: needs {struct.calcsize(fmt)} bytes at offset {off:#x}, the data has {len(data):#x}")
  return struct.unpack_from(fmt, data, off)

def cstr(err: type[Exception], data: bytes, off: int, what: str) -> str:
  """The NUL-terminated string at `off` of a string table; `err` when it is not inside it."""
  end = data.find(b"\0", off)
  if off >= len(data) or end < 0: raise err(f"{what}: string offset {off:#x} is outside its string table ({len(data):#x} bytes)")
  return data[off:end].decode("utf-8", "replace")

def read_elf64(data: bytes, machine: int | None, machine_name: str = "", err: type[Exception] = ValueError) -> ELF:
  """The header and sections of an ELF64 little-endian file for e_machine `machine` (named `machine_name` in errors; None: any,
  left to the caller); anything malformed or truncated raises `err` naming the part (header, section headers, section N) and
  what is wrong."""
  if len(data) < 64: raise err(f"header: the file has {len(data)} bytes, an ELF64 header needs 64")
  if data[:4] != b"\x7fELF": raise err(f"header: bad magic {data[:4]!r}, expected b'\\x7fELF'")
  if data[4] != 2 or data[5] != 1: raise err(f"header: class {data[4]} data {data[5]}, expected ELF64 little-endian (2, 1)")
  e_type, e_machine = unpack(err, "<HH", data, 16, "header")
  if machine is not None and e_machine != machine: raise err(f"header: e_machine {e_machine}, expected {machine_name} ({machine})")
  entry, shoff, flags = unpack(err, "<Q8xQI", data, 0x18, "header")
  shentsize, shnum, shstrndx = unpack(err, "<HHH", data, 0x3a, "header")
  if shentsize != 64: raise err(f"header: section header size {shentsize}, expected 64")
  if shoff + shnum * 64 > len(data):
    raise err(f"section headers: {shnum} at {shoff:#x} run past the end of the file ({len(data):#x} bytes, truncated?)")
  raw = [unpack(err, "<IIQQQQIIQQ", data, shoff + i * 64, f"section header {i}") for i in range(shnum)]
  if not 0 < shstrndx < shnum: raise err(f"header: section name table index {shstrndx} of {shnum} sections")
  def body(i: int, h: tuple) -> bytes:
    if h[1] == SHT_NOBITS: return b""
    if h[4] + h[5] > len(data): raise err(f"section {i}: {h[5]:#x} bytes at {h[4]:#x} run past the end of the file ({len(data):#x} bytes)")
    return data[h[4]:h[4] + h[5]]
  names = body(shstrndx, raw[shstrndx])
  return ELF(e_type, e_machine, entry, flags, data[8], [Section(i, cstr(err, names, h[0], f"section {i} name") if i else "", h[1], h[2],
                                                                h[3], h[4], h[5], h[6], h[7], h[8], h[9], body(i, h)) for i, h in enumerate(raw)])

class Symbol(NamedTuple):
  """One ELF64 symbol table entry: st_info is binding << 4 | type; shndx the section it is defined in (0: undefined)."""
  name: str
  value: int
  size: int
  info: int
  other: int
  shndx: int
  @property
  def bind(self) -> int: return self.info >> 4
  @property
  def type(self) -> int: return self.info & 0xf

def read_symbols(sections: list[Section], tab: Section, err: type[Exception] = ValueError) -> list[Symbol]:
  """The entries of symbol table `tab` (one of `sections`), named from the string table it links; `err` for a table that is no
  whole number of 24-byte entries, links no string table, or names a string outside it."""
  if tab.entsize != 24 or tab.size % 24:
    raise err(f"symbols: {tab.name} entry size {tab.entsize}, section size {tab.size:#x}, expected 24-byte entries")
  if not 0 < tab.link < len(sections): raise err(f"symbols: {tab.name} names string table {tab.link}")
  strs = sections[tab.link].data
  return [Symbol(cstr(err, strs, n, f"symbol {i} name"), v, sz, inf, oth, shn)
          for i, (n, inf, oth, shn, v, sz) in enumerate(struct.iter_unpack("<IBBHQQ", tab.data))]
