"""The NV plugin's cubin reader: ELF64 sections and symbols, the arch, and each kernel's code, attributes and relocations."""
from __future__ import annotations
import struct
from dataclasses import dataclass, field
from core.device.elf import Section, Symbol, read_elf64, read_symbols, unpack

class CubinError(ValueError):
  """A cubin this reader can't use: names the part (header, section, record) and what is wrong with it."""

EM_CUDA = 190
SHT_SYMTAB, SHT_RELA, SHT_REL = 2, 4, 9
STT_FUNC = 2

# .nv.info records: u8 format, u8 attribute code, then a u16 that is the value (NVAL/BVAL/HVAL) or the byte size of the
# payload that follows (SVAL). Codes and formats as cuobjdump -elf names them (checked byte for byte in tests/test_cubin.py).
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR_MAX_THREADS = 0x05       # SVAL u32 x, y, z (.maxntid)
EIATTR_PARAM_CBANK = 0x0a       # SVAL u32 symbol (.nv.constant0.<kernel>), u16 offset of the parameters, u16 their size
EIATTR_REQNTID = 0x10           # SVAL u32 x, y, z (.reqntid)
EIATTR_FRAME_SIZE = 0x11        # SVAL u32 function symbol, u32 bytes of local memory per thread
EIATTR_MIN_STACK_SIZE = 0x12    # SVAL u32 function symbol, u32 bytes
EIATTR_KPARAM_INFO = 0x17       # SVAL u32 index, u16 ordinal, u16 offset, u32 bits: 0-7 log align, 8-11 space, 12-17 cbank, 18-31 size
EIATTR_CBANK_PARAM_SIZE = 0x19  # HVAL parameter bytes
EIATTR_REGCOUNT = 0x2f          # SVAL u32 function symbol, u32 registers per thread (in the module-wide .nv.info)

def sm_of_flags(e_flags: int, abi_version: int) -> int:
  """The SM number in a cubin's e_flags. ELF ABI version 7 (CUDA <= 12.8) keeps it in bits 0-7 (EF_CUDA_SM); version 8
  (CUDA 12.9+ and 13: bits 24-31 are no longer zero) moved it to bits 8-15, e.g. sm_90 -> 0x06005a04, sm_120 -> 0x06007802."""
  return (e_flags >> 8) & 0xff if abi_version >= 8 or e_flags >> 24 else e_flags & 0xff

@dataclass(frozen=True)
class Reloc:
  offset: int   # bytes into the section the relocation applies to
  type: int     # R_CUDA_* number
  symbol: str
  addend: int

@dataclass(frozen=True)
class Record:
  """One .nv.info record: `value` is the u16 of NVAL/BVAL/HVAL records, `payload` the bytes of an SVAL one."""
  fmt: int
  attr: int
  value: int = 0
  payload: bytes = b""

@dataclass(frozen=True)
class KParam:
  index: int
  ordinal: int
  offset: int   # bytes from the start of the parameter area
  size: int
  cbank: int

@dataclass(frozen=True)
class Kernel:
  name: str
  code: bytes                    # the .text.<name> section
  code_align: int
  regs: int
  params: tuple[KParam, ...]     # by ordinal
  param_size: int                # EIATTR_CBANK_PARAM_SIZE
  cbank0_offset: int             # where the parameters start in constant bank 0 (EIATTR_PARAM_CBANK)
  cbank0_size: int               # .nv.constant0.<name>: the driver's part of bank 0 plus the parameters
  shared_size: int               # .nv.shared.<name> (0 without one)
  frame_size: int                # local memory per thread
  min_stack_size: int
  max_threads: tuple[int, ...]   # .maxntid, () if not given
  req_threads: tuple[int, ...]   # .reqntid, () if not given
  const_banks: dict[int, bytes]  # .nv.constant<N>.<name> for N != 0 (e.g. bank 2: ptxas' literal pool on sm_8x)
  relocs: tuple[Reloc, ...]      # of .rel.text.<name> / .rela.text.<name>
  records: tuple[Record, ...] = field(repr=False)   # every .nv.info.<name> record, in file order

def _unpack(fmt: str, data: bytes, off: int, what: str) -> tuple: return unpack(CubinError, fmt, data, off, what)

def parse_records(data: bytes, where: str) -> tuple[Record, ...]:
  """The records of one .nv.info section; one that runs past the section's end or has an unknown format is an error."""
  out, off = [], 0
  while off < len(data):
    if off + 4 > len(data): raise CubinError(f"{where}: a record header at {off:#x} runs past the section's end ({len(data):#x} bytes)")
    fmt, attr, val = struct.unpack_from("<BBH", data, off)
    if fmt == EIFMT_SVAL:
      if off + 4 + val > len(data):
        raise CubinError(f"{where}: record {attr:#x} at {off:#x} has {val} payload bytes, running past the section's end ({len(data):#x} bytes)")
      out.append(Record(fmt, attr, 0, data[off + 4:off + 4 + val]))
      off += 4 + val
    elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
      out.append(Record(fmt, attr, val))
      off += 4
    else: raise CubinError(f"{where}: record at {off:#x} has unknown format {fmt:#x} (attribute {attr:#x})")
  return tuple(out)

class Cubin:
  """A CUDA ELF64 little-endian object (ptxas' or nvcc's -cubin output): sections, symbols, the arch, the kernels."""
  def __init__(self, data: bytes) -> None:
    self.data = bytes(data)
    elf = read_elf64(self.data, EM_CUDA, "EM_CUDA", CubinError)
    self.abi_version, self.flags, self.sections = elf.abi_version, elf.flags, elf.sections
    self.by_name = {s.name: s for s in self.sections}
    self.symbols = self._symbols()

  @property
  def sm(self) -> int: return sm_of_flags(self.flags, self.abi_version)
  @property
  def arch(self) -> str: return f"sm_{self.sm}"

  def section(self, name: str) -> Section:
    if (s := self.by_name.get(name)) is None: raise CubinError(f"no section {name} (the cubin has {[s.name for s in self.sections if s.name]})")
    return s

  def _symbols(self) -> list[Symbol]:
    tabs = [s for s in self.sections if s.type == SHT_SYMTAB and s.name == ".symtab"]
    if len(tabs) != 1: raise CubinError(f"symbols: expected one .symtab section, found {len(tabs)}")
    return read_symbols(self.sections, tabs[0], CubinError)

  def relocs(self, target: str) -> tuple[Reloc, ...]:
    """The relocations of section `target` (from .rel<target> or .rela<target>: ptxas writes REL for sm_8x, RELA after)."""
    out: list[Reloc] = []
    for name, rela in ((".rel" + target, False), (".rela" + target, True)):
      if (s := self.by_name.get(name)) is None: continue
      ent = 24 if rela else 16
      if s.type != (SHT_RELA if rela else SHT_REL) or s.size % ent:
        raise CubinError(f"section {name}: type {s.type}, size {s.size:#x}: not a table of {ent}-byte relocations")
      for i in range(s.size // ent):
        off, info = struct.unpack_from("<QQ", s.data, i * ent)
        addend = struct.unpack_from("<q", s.data, i * ent + 16)[0] if rela else 0
        if (sym := info >> 32) >= len(self.symbols): raise CubinError(f"section {name}: relocation {i} names symbol {sym} of {len(self.symbols)}")
        out.append(Reloc(off, info & 0xffffffff, self.symbols[sym].name, addend))
    return tuple(out)

  def module_data(self) -> list[str]:
    """Sections of module-scope data (globals, __constant__ variables, and bank 4's table of their addresses): a loader must
    place them and relocate the tables before any kernel that reads them can run."""
    return [s.name for s in self.sections if s.name.startswith(".nv.global") or s.name.startswith(".nv.constant") and s.name[12:].isdigit()]

  def kernel_names(self) -> list[str]:
    """Kernels: functions with both a .text.<name> and a .nv.info.<name> section (device functions have no .nv.info)."""
    return [s.name[len(".text."):] for s in self.sections if s.name.startswith(".text.") and ".nv.info." + s.name[len(".text."):] in self.by_name]

  def kernel(self, name: str) -> Kernel:
    if name not in self.kernel_names(): raise CubinError(f"no kernel {name!r} in the cubin (it has {self.kernel_names()})")
    text = self.section(".text." + name)
    fn = [i for i, s in enumerate(self.symbols) if s.name == name and s.info & 0xf == STT_FUNC and s.shndx == text.index]
    if len(fn) != 1: raise CubinError(f"kernel {name}: expected one function symbol in .text.{name}, found {len(fn)}")
    sym, where = fn[0], f"section .nv.info.{name}"
    records = parse_records(self.section(".nv.info." + name).data, where)
    # module-wide records name their function by symbol index
    regs = frame = min_stack = None
    for r in parse_records(self.by_name[".nv.info"].data, "section .nv.info") if ".nv.info" in self.by_name else ():
      if r.fmt == EIFMT_SVAL and r.attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE):
        fsym, val = _unpack("<II", r.payload, 0, f"section .nv.info: record {r.attr:#x}")
        if fsym != sym: continue
        if r.attr == EIATTR_REGCOUNT: regs = val
        elif r.attr == EIATTR_FRAME_SIZE: frame = val
        else: min_stack = val
    if regs is None: raise CubinError(f"kernel {name}: section .nv.info has no EIATTR_REGCOUNT record for symbol {sym}")
    params, cbank, param_size, maxnt, reqnt = [], None, None, (), ()
    for r in records:
      if r.attr == EIATTR_KPARAM_INFO:
        if len(r.payload) != 12: raise CubinError(f"{where}: EIATTR_KPARAM_INFO payload is {len(r.payload)} bytes, expected 12")
        idx, ordinal, off, bits = struct.unpack("<IHHI", r.payload)
        params.append(KParam(idx, ordinal, off, bits >> 18, (bits >> 12) & 0x3f))
      elif r.attr == EIATTR_PARAM_CBANK:
        if len(r.payload) != 8: raise CubinError(f"{where}: EIATTR_PARAM_CBANK payload is {len(r.payload)} bytes, expected 8")
        cbank = struct.unpack("<IHH", r.payload)
      elif r.attr == EIATTR_CBANK_PARAM_SIZE: param_size = r.value
      elif r.attr in (EIATTR_MAX_THREADS, EIATTR_REQNTID):
        if len(r.payload) != 12: raise CubinError(f"{where}: thread-count record {r.attr:#x} payload is {len(r.payload)} bytes, expected 12")
        if r.attr == EIATTR_MAX_THREADS: maxnt = struct.unpack("<III", r.payload)
        else: reqnt = struct.unpack("<III", r.payload)
    if cbank is None: raise CubinError(f"{where}: no EIATTR_PARAM_CBANK record (where do the parameters go?)")
    csym, coff, csize = cbank
    c0 = self.section(c0name := f".nv.constant0.{name}")
    if csym >= len(self.symbols) or self.symbols[csym].shndx != c0.index:
      raise CubinError(f"{where}: EIATTR_PARAM_CBANK names symbol {csym}, not section {c0name}")
    if param_size is not None and param_size != csize: raise CubinError(f"{where}: EIATTR_CBANK_PARAM_SIZE {param_size} but EIATTR_PARAM_CBANK says {csize}")
    if coff + csize > c0.size: raise CubinError(f"{where}: parameters at {coff:#x}+{csize:#x} run past {c0name} ({c0.size:#x} bytes)")
    params.sort(key=lambda p: p.ordinal)
    if [p.ordinal for p in params] != list(range(len(params))): raise CubinError(f"{where}: parameter ordinals {[p.ordinal for p in params]} are not 0..n-1")
    for p in params:
      if p.offset + p.size > csize: raise CubinError(f"{where}: parameter {p.ordinal} at {p.offset:#x}+{p.size:#x} runs past the {csize:#x}-byte parameter area")
    banks = {}
    for s in self.sections:
      if s.name.startswith(".nv.constant") and s.name.endswith("." + name) and s.name != c0name:
        bank = s.name[len(".nv.constant"):-len(name) - 1]
        if not bank.isdigit(): raise CubinError(f"section {s.name}: not .nv.constant<bank>.{name}")
        banks[int(bank)] = s.data
    shared = self.by_name.get(f".nv.shared.{name}")
    return Kernel(name, text.data, text.align, regs, tuple(params), csize, coff, c0.size, shared.size if shared else 0, frame or 0,
                  min_stack or 0, maxnt, reqnt, banks, self.relocs(".text." + name), records)
