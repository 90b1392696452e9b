"""Load an x86-64 ELF relocatable object (what LLVM emits) into executable memory in-process: no linker, no dlopen.

Linking a kernel with the system C compiler costs a process spawn (tens of ms) per kernel; placing the object's sections
ourselves and applying its few relocation kinds takes microseconds. Facts from the System V x86-64 psABI (relocation
types and their formulas) and the ELF-64 object file format."""
from __future__ import annotations
import ctypes, functools, mmap, struct
from core.device.elf import Section, read_elf64
from core.helpers import host_machine

class ELFLoadError(RuntimeError): pass

# relocation types (psABI table 4.9): S = symbol address, A = addend, P = place being patched, G = GOT slot address
R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_GOTPCREL = 1, 2, 4, 9
R_X86_64_32, R_X86_64_32S, R_X86_64_PC64 = 10, 11, 24
R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX = 41, 42
SHT_SYMTAB, SHT_NOBITS, SHT_RELA = 2, 8, 4
SHF_WRITE, SHF_ALLOC = 0x1, 0x2
SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2
STUB = 16    # jmp *0(%rip); .quad target: a call to a symbol that may be further than 2 GiB away
GOT = 8

def _pages(n: int) -> int: return max((n + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE, mmap.PAGESIZE)

def supported() -> bool: return host_machine() == "x86_64"

def _sections(obj: bytes) -> list[Section]:
  elf = read_elf64(obj, 62, "x86-64", ELFLoadError)
  if elf.type != 1: raise ELFLoadError(f"ELF type {elf.type} is not a relocatable object (1)")
  return elf.sections

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype, _libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
@functools.cache
def _libs() -> list[ctypes.CDLL]:
  # libm by its usual soname first: ctypes.util.find_library runs ldconfig or a compiler (tens of ms), only needed elsewhere
  try: return [_libc, ctypes.CDLL("libm.so.6")]
  except OSError: pass
  from ctypes.util import find_library   # it imports subprocess: not at start-up
  return [_libc] + [ctypes.CDLL(p) for p in (find_library("m"),) if p]

def _extern(name: str) -> int:
  for lib in _libs():
    try: return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
    except AttributeError: continue
  raise ELFLoadError(f"the kernel calls {name!r}, which neither libc nor libm defines")

class LoadedObject:
  """The object's allocated sections in one mapping (read+execute after relocation); `symbols` maps names to addresses.
  The mapping is released when this object is garbage collected."""
  def __init__(self, obj: bytes):
    secs = _sections(obj)
    # layout: code and read-only data, then one stub and one GOT slot per relocation that may need them (all made
    # read+execute after relocation), then on their own pages the writable sections (.data, .bss)
    relocs = [(i, s) for i, s in enumerate(secs) if s.type == SHT_RELA and secs[s.info].flags & SHF_ALLOC]
    nrel = sum(s.size // 24 for _, s in relocs)
    base_off: dict[int, int] = {}
    size = 0
    def place(i: int, s: Section) -> None:
      nonlocal size
      align = max(s.align, 1)
      size = (size + align - 1) // align * align
      base_off[i] = size
      size += s.size
    alloc = [(i, s) for i, s in enumerate(secs) if s.flags & SHF_ALLOC and s.size]
    for i, s in alloc:
      if not s.flags & SHF_WRITE: place(i, s)
    extra = (size + 15) // 16 * 16
    self.rx_size = _pages(extra + nrel * (STUB + GOT))
    size = self.rx_size
    for i, s in alloc:
      if s.flags & SHF_WRITE: place(i, s)
    self.size = _pages(size)
    addr = _libc.mmap(None, self.size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if addr in (None, ctypes.c_void_p(-1).value): raise ELFLoadError(f"mmap of {self.size} bytes failed (errno {ctypes.get_errno()})")
    self.addr: int = addr
    try: self._load(obj, secs, base_off, relocs, extra)
    except BaseException:
      _libc.munmap(self.__dict__.pop("addr"), self.size)
      raise

  def _load(self, obj: bytes, secs: list[Section], base_off: dict[int, int], relocs: list[tuple[int, Section]], extra: int) -> None:
    for i, off in base_off.items():
      s = secs[i]
      if s.type != SHT_NOBITS: ctypes.memmove(self.addr + off, obj[s.offset:s.offset + s.size], s.size)   # NOBITS (.bss) stays zero
    symtab = next((s for s in secs if s.type == SHT_SYMTAB), None)
    if symtab is None: raise ELFLoadError("the object has no symbol table")
    strtab = secs[symtab.link].offset
    syms: list[tuple[str, int]] = []
    self.symbols: dict[str, int] = {}
    for k in range(symtab.size // 24):
      st_name, st_info, _, st_shndx, st_value, _ = struct.unpack_from("<IBBHQQ", obj, symtab.offset + k * 24)
      nm = obj[strtab + st_name:obj.index(b"\0", strtab + st_name)].decode() if st_name else ""
      if st_shndx == SHN_UNDEF: a = _extern(nm) if nm else 0
      elif st_shndx == SHN_ABS: a = st_value
      elif st_shndx == SHN_COMMON: raise ELFLoadError(f"common symbol {nm!r} is not supported")
      elif st_shndx in base_off: a = self.addr + base_off[st_shndx] + st_value
      else: a = 0   # a symbol in a section we don't load (debug info)
      syms.append((nm, a))
      if nm and st_shndx not in (SHN_UNDEF,) and (st_info >> 4) in (1, 2): self.symbols[nm] = a   # GLOBAL or WEAK
    spare = self.addr + extra
    for _, rs in relocs:
      if rs.info not in base_off: continue   # relocations of an empty section
      target = self.addr + base_off[rs.info]
      for k in range(rs.size // 24):
        r_offset, r_info, r_addend = struct.unpack_from("<QQq", obj, rs.offset + k * 24)
        typ, (nm, S) = r_info & 0xFFFFFFFF, syms[r_info >> 32]
        P, A = target + r_offset, r_addend
        if typ == R_X86_64_64: ctypes.c_uint64.from_address(P).value = (S + A) & (2**64 - 1)
        elif typ == R_X86_64_PC64: ctypes.c_uint64.from_address(P).value = (S + A - P) & (2**64 - 1)
        elif typ in (R_X86_64_PC32, R_X86_64_PLT32):
          if not -2**31 <= S + A - P < 2**31:
            # too far for rel32 (a libm function): go through a stub next to the code
            mem_stub = spare
            spare += STUB
            ctypes.memmove(mem_stub, b"\xff\x25\x00\x00\x00\x00", 6)   # jmp *0(%rip)
            ctypes.c_uint64.from_address(mem_stub + 6).value = S
            S = mem_stub
          self._rel32(P, S + A - P, nm)
        elif typ in (R_X86_64_GOTPCREL, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX):
          G = spare
          spare += GOT
          ctypes.c_uint64.from_address(G).value = S
          self._rel32(P, G + A - P, nm)
        elif typ in (R_X86_64_32, R_X86_64_32S):
          v = S + A
          if not (0 <= v < 2**32 if typ == R_X86_64_32 else -2**31 <= v < 2**31):
            raise ELFLoadError(f"absolute 32-bit relocation to {nm!r} doesn't fit: compile with reloc='pic'")
          ctypes.c_uint32.from_address(P).value = v & 0xFFFFFFFF
        else: raise ELFLoadError(f"relocation type {typ} (against {nm!r}) is not supported")
    if _libc.mprotect(self.addr, self.rx_size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
      raise ELFLoadError(f"mprotect(read+exec) failed (errno {ctypes.get_errno()}): the system forbids executable mappings")

  @staticmethod
  def _rel32(P: int, v: int, nm: str) -> None:
    if not -2**31 <= v < 2**31: raise ELFLoadError(f"32-bit PC-relative relocation to {nm!r} is out of range")
    ctypes.c_int32.from_address(P).value = v

  def __del__(self) -> None:
    try:
      if (a := self.__dict__.pop("addr", None)) is not None: _libc.munmap(a, self.size)
    except (AttributeError, TypeError): pass  # interpreter shutdown

def is_relocatable(lib: bytes) -> bool:
  """An ELF relocatable object (ET_REL), as opposed to a shared object."""
  return lib[:4] == b"\x7fELF" and len(lib) > 18 and struct.unpack_from("<H", lib, 16)[0] == 1
