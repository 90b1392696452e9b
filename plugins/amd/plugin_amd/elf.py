"""A small ELF64 little-endian reader (sections, symbols, relocations, notes) and a loader that lays out the allocated
sections of a relocatable AMDGPU object into one image and applies its R_AMDGPU_* relocations (ELF gABI, LLVM AMDGPUUsage)."""
from __future__ import annotations
import dataclasses, struct
from core.device.elf import Section, Symbol, read_elf64, read_symbols

class ELFError(ValueError):
  """The bytes are not an ELF object this reader can load."""

EM_AMDGPU = 224
ET_REL, ET_DYN = 1, 3
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOTE, SHT_NOBITS, SHT_REL = 1, 2, 3, 4, 7, 8, 9
SHF_ALLOC = 0x2
SHN_UNDEF, SHN_ABS = 0, 0xfff1

# R_AMDGPU_* (AMDGPUUsage "AMDGPU ELF Relocation Records")
R_AMDGPU_NONE, R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64, R_AMDGPU_REL32, R_AMDGPU_REL64 = 0, 1, 2, 3, 4, 5
R_AMDGPU_ABS32, R_AMDGPU_REL32_LO, R_AMDGPU_REL32_HI, R_AMDGPU_RELATIVE64, R_AMDGPU_REL16 = 6, 10, 11, 13, 16
RELOC_NAMES = {0: "R_AMDGPU_NONE", 1: "R_AMDGPU_ABS32_LO", 2: "R_AMDGPU_ABS32_HI", 3: "R_AMDGPU_ABS64", 4: "R_AMDGPU_REL32",
               5: "R_AMDGPU_REL64", 6: "R_AMDGPU_ABS32", 7: "R_AMDGPU_GOTPCREL", 8: "R_AMDGPU_GOTPCREL32_LO", 9: "R_AMDGPU_GOTPCREL32_HI",
               10: "R_AMDGPU_REL32_LO", 11: "R_AMDGPU_REL32_HI", 13: "R_AMDGPU_RELATIVE64", 16: "R_AMDGPU_REL16"}
_ABSOLUTE = frozenset({R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64, R_AMDGPU_ABS32, R_AMDGPU_RELATIVE64})

@dataclasses.dataclass(frozen=True)
class Reloc:
  offset: int   # in the target section
  sym: int
  type: int
  addend: int

@dataclasses.dataclass(frozen=True)
class Note:
  owner: str
  type: int
  desc: bytes

class ELF:
  """An ELF64 little-endian file: header fields, sections (with names and bytes), symbols, RELA relocations, notes."""
  def __init__(self, data: bytes):
    self.data = bytes(data)
    elf = read_elf64(self.data, None, err=ELFError)   # the machine is load()'s to check: any ELF64 can be inspected
    self.type, self.machine, self.entry, self.flags, self.sections = elf.type, elf.machine, elf.entry, elf.flags, elf.sections
    symtab = next((s for s in self.sections if s.type == SHT_SYMTAB), None)
    self.symbols: list[Symbol] = read_symbols(self.sections, symtab, ELFError) if symtab is not None else []

  def section(self, name: str) -> Section | None: return next((s for s in self.sections if s.name == name), None)
  def symbol(self, name: str) -> Symbol | None: return next((s for s in self.symbols if s.name == name), None)

  def relocations(self) -> list[tuple[Section, list[Reloc]]]:
    """Each RELA section's target section and its entries. REL (no addend) sections are refused: AMDGPU uses RELA only."""
    out = []
    for s in self.sections:
      if s.type == SHT_REL: raise ELFError(f"section {s.name} holds REL relocations; AMDGPU objects use RELA")
      if s.type != SHT_RELA: continue
      if s.info >= len(self.sections): raise ELFError(f"relocation section {s.name} targets section {s.info}, which does not exist")
      out.append((self.sections[s.info], [Reloc(o, i >> 32, i & 0xffffffff, a) for o, i, a in
                                          struct.iter_unpack("<QQq", s.data[:len(s.data) // 24 * 24])]))
    return out

  def notes(self) -> list[Note]:
    """The records of every SHT_NOTE section: name and descriptor each padded to 4 bytes."""
    out = []
    for s in self.sections:
      if s.type != SHT_NOTE: continue
      d, pos = s.data, 0
      while pos + 12 <= len(d):
        namesz, descsz, ntype = struct.unpack_from("<III", d, pos)
        pos += 12
        name_end = pos + namesz
        desc_at = (name_end + 3) & ~3
        if desc_at + descsz > len(d): raise ELFError(f"note in {s.name} at {pos - 12} runs past its section")
        out.append(Note(d[pos:name_end].rstrip(b"\0").decode("utf-8", errors="replace"), ntype, d[desc_at:desc_at + descsz]))
        pos = (desc_at + descsz + 3) & ~3
    return out

@dataclasses.dataclass(frozen=True)
class Image:
  """The loadable bytes: allocated sections at `addrs` (offsets from the image start), relocations applied."""
  data: bytes
  addrs: dict[int, int]   # section index -> offset in the image
  def symbol_offset(self, elf: ELF, name: str) -> int:
    sym = elf.symbol(name)
    if sym is None: raise ELFError(f"no symbol {name!r}")
    return symbol_address(elf, sym, self.addrs)
  def section_offset(self, elf: ELF, name: str) -> int:
    sec = elf.section(name)
    if sec is None or sec.index not in self.addrs: raise ELFError(f"section {name!r} is not in the image")
    return self.addrs[sec.index]

def symbol_address(elf: ELF, sym: Symbol, addrs: dict[int, int]) -> int:
  if sym.shndx == SHN_ABS: return sym.value
  if sym.shndx == SHN_UNDEF: raise ELFError(f"symbol {sym.name!r} is undefined: the code object needs something it does not contain")
  if sym.shndx >= len(elf.sections): raise ELFError(f"symbol {sym.name!r} is in section {sym.shndx}, which does not exist")
  sec = elf.sections[sym.shndx]
  if sec.index not in addrs: raise ELFError(f"symbol {sym.name!r} is in section {sec.name}, which is not loaded")
  # relocatable objects: st_value is section-relative; linked ones: it is already an address in the section
  return addrs[sec.index] + sym.value - (sec.addr if elf.type != ET_REL else 0)

def layout(elf: ELF) -> dict[int, int]:
  """Image offsets of the allocated PROGBITS/NOBITS sections: their own addresses in a linked object, else packed in
  file order at their alignment (64 at least: the CP needs kernel descriptors 64-byte aligned)."""
  secs = [s for s in elf.sections if s.flags & SHF_ALLOC and s.type in (SHT_PROGBITS, SHT_NOBITS)]
  if elf.type != ET_REL: return {s.index: s.addr for s in secs}
  addrs, pos = {}, 0
  for s in secs:
    align = max(s.align, 64)
    pos = (pos + align - 1) // align * align
    addrs[s.index] = pos
    pos += s.size
  return addrs

def load(elf: ELF, base: int | None = None) -> Image:
  """Lays out the allocated sections and applies every relocation into them. PC-relative relocations need no load address;
  absolute ones need `base` (the device address the image will live at), else they are an ELFError."""
  if elf.machine != EM_AMDGPU: raise ELFError(f"ELF machine {elf.machine}, expected EM_AMDGPU ({EM_AMDGPU})")
  if elf.type not in (ET_REL, ET_DYN): raise ELFError(f"ELF type {elf.type}: expected a relocatable object or a shared object")
  addrs = layout(elf)
  size = max((addrs[s.index] + s.size for s in elf.sections if s.index in addrs), default=0)
  img = bytearray(size)
  for s in elf.sections:
    if s.index in addrs and s.type == SHT_PROGBITS: img[addrs[s.index]:addrs[s.index] + s.size] = s.data
  for target, relocs in elf.relocations():
    if target.index not in addrs: continue   # relocations of debug or note sections do not reach the device
    for r in relocs:
      if r.sym >= len(elf.symbols): raise ELFError(f"relocation at {target.name}+{r.offset:#x} names symbol {r.sym}, which does not exist")
      name = RELOC_NAMES.get(r.type, f"type {r.type}")
      if r.type == R_AMDGPU_NONE: continue
      sym = elf.symbols[r.sym]
      # everything in absolute device addresses: base + image offset (an SHN_ABS symbol is already absolute)
      if base is None and (r.type in _ABSOLUTE or sym.shndx == SHN_ABS and r.type != R_AMDGPU_RELATIVE64):
        raise ELFError(f"{name} at {target.name}+{r.offset:#x} needs the image's load address (absolute relocation)")
      b = base or 0
      sv = 0 if r.type == R_AMDGPU_RELATIVE64 else sym.value if sym.shndx == SHN_ABS else b + symbol_address(elf, sym, addrs)
      p = addrs[target.index] + r.offset - (target.addr if elf.type != ET_REL else 0)
      pv = b + p
      if r.type == R_AMDGPU_ABS64: val, fmt = sv + r.addend, "<Q"
      elif r.type == R_AMDGPU_RELATIVE64: val, fmt = b + r.addend, "<Q"
      elif r.type == R_AMDGPU_ABS32: val, fmt = sv + r.addend, "<I"
      elif r.type == R_AMDGPU_ABS32_LO: val, fmt = (sv + r.addend) & 0xffffffff, "<I"
      elif r.type == R_AMDGPU_ABS32_HI: val, fmt = ((sv + r.addend) >> 32) & 0xffffffff, "<I"
      elif r.type == R_AMDGPU_REL64: val, fmt = sv + r.addend - pv, "<q"
      elif r.type == R_AMDGPU_REL32: val, fmt = sv + r.addend - pv, "<i"
      elif r.type == R_AMDGPU_REL32_LO: val, fmt = (sv + r.addend - pv) & 0xffffffff, "<I"
      elif r.type == R_AMDGPU_REL32_HI: val, fmt = ((sv + r.addend - pv) >> 32) & 0xffffffff, "<I"
      elif r.type == R_AMDGPU_REL16: val, fmt = ((sv + r.addend - pv) - 4) // 4, "<h"
      else: raise ELFError(f"{name} at {target.name}+{r.offset:#x} is not supported by this loader (no GOT)")
      width = struct.calcsize(fmt)
      if p < 0 or p + width > len(img): raise ELFError(f"{name} at {target.name}+{r.offset:#x} writes outside the image")
      try: struct.pack_into(fmt, img, p, val)
      except struct.error: raise ELFError(f"{name} at {target.name}+{r.offset:#x}: value {val} does not fit its field") from None
  return Image(bytes(img), addrs)
