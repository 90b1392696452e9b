"""QMDs (queue meta data): the structure a compute launch points the GPU at (SEND_PCAS_A carries its address >> 8).

One layout per QMD version, each field a bit range [hi:lo] of the structure seen as one little-endian bit string, as NVIDIA's
public class headers write it (`MW(hi:lo)`): open-gpu-doc classes/compute/clc6c0qmd.h, clc7c0qmd.h, clc9c0qmd.h (Ampere and
Ada, QMD v03_00), clcbc0qmd.h (Hopper, v04_00), clcdc0qmd.h and clcec0qmd.h (Blackwell, v05_00). Only the fields this plugin
sets or the MOCK processor reads are listed; an indexed field (`CONSTANT_BUFFER_*(i)`) is (hi, lo, stride)."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any

@dataclass(frozen=True)
class QMDLayout:
  major: int
  minor: int
  size: int                                      # bytes
  fields: dict[str, tuple[int, int]]             # name -> (hi, lo)
  indexed: dict[str, tuple[int, int, int]]       # name -> (hi, lo, stride) of index 0
  grid: tuple[str, str, str]                     # the grid dimension fields (v03_00 calls the grid the CTA raster)
  shifts: dict[str, int]                         # fields that hold a value >> n (the header's _SHIFTEDn suffix)

  def range(self, name: str, i: int | None = None) -> tuple[int, int]:
    if i is None:
      if name not in self.fields: raise KeyError(f"QMD v{self.major:02d}_{self.minor:02d} has no field {name}")
      return self.fields[name]
    if name not in self.indexed: raise KeyError(f"QMD v{self.major:02d}_{self.minor:02d} has no indexed field {name}(i)")
    hi, lo, stride = self.indexed[name]
    return hi + i * stride, lo + i * stride

_CACHE_INVALIDATES = ("INVALIDATE_TEXTURE_HEADER_CACHE", "INVALIDATE_TEXTURE_SAMPLER_CACHE", "INVALIDATE_TEXTURE_DATA_CACHE",
                      "INVALIDATE_SHADER_DATA_CACHE", "INVALIDATE_INSTRUCTION_CACHE", "INVALIDATE_SHADER_CONSTANT_CACHE")

V03_00 = QMDLayout(3, 0, 256, {
  "IS_QUEUE": (136, 136), "SM_GLOBAL_CACHING_ENABLE": (134, 134),
  **{n: (186 + i, 186 + i) for i, n in enumerate(_CACHE_INVALIDATES)},
  "CWD_MEMBAR_TYPE": (369, 368), "API_VISIBLE_CALL_LIMIT": (378, 378), "SAMPLER_INDEX": (382, 382),
  "CTA_RASTER_WIDTH": (415, 384), "CTA_RASTER_HEIGHT": (431, 416), "CTA_RASTER_DEPTH": (463, 448),
  "SHARED_MEMORY_SIZE": (561, 544), "MIN_SM_CONFIG_SHARED_MEM_SIZE": (567, 562), "MAX_SM_CONFIG_SHARED_MEM_SIZE": (574, 569),
  "QMD_VERSION": (579, 576), "QMD_MAJOR_VERSION": (583, 580),
  "CTA_THREAD_DIMENSION0": (607, 592), "CTA_THREAD_DIMENSION1": (623, 608), "CTA_THREAD_DIMENSION2": (639, 624),
  "REGISTER_COUNT_V": (656, 648), "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (662, 657), "SHARED_ALLOCATION_ENABLE": (663, 663),
  "SHADER_LOCAL_MEMORY_LOW_SIZE": (759, 736), "BARRIER_COUNT": (767, 763),
  "PROGRAM_ADDRESS_LOWER": (1567, 1536), "PROGRAM_ADDRESS_UPPER": (1584, 1568), "SHADER_LOCAL_MEMORY_HIGH_SIZE": (1623, 1600),
  "SASS_VERSION": (1663, 1656),
}, {
  "CONSTANT_BUFFER_VALID": (640, 640, 1), "CONSTANT_BUFFER_ADDR_LOWER": (1055, 1024, 64), "CONSTANT_BUFFER_ADDR_UPPER": (1072, 1056, 64),
  "CONSTANT_BUFFER_SIZE_SHIFTED4": (1087, 1075, 64),
}, ("CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH"), {"CONSTANT_BUFFER_SIZE_SHIFTED4": 4})

V04_00 = QMDLayout(4, 0, 384, {
  "QMD_TYPE": (25, 23), "API_VISIBLE_CALL_LIMIT": (568, 568), "SAMPLER_INDEX": (569, 569),
  "SHADER_LOCAL_MEMORY_LOW_SIZE": (535, 512), "SASS_VERSION": (543, 536), "SHADER_LOCAL_MEMORY_HIGH_SIZE": (567, 544),
  "QMD_MINOR_VERSION": (579, 576), "QMD_MAJOR_VERSION": (583, 580), "SHARED_MEMORY_SIZE": (601, 584),
  **{n: (602 + i, 602 + i) for i, n in enumerate(_CACHE_INVALIDATES)},
  "MIN_SM_CONFIG_SHARED_MEM_SIZE": (613, 608), "MAX_SM_CONFIG_SHARED_MEM_SIZE": (619, 614), "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (625, 620),
  "SHARED_ALLOCATION_ENABLE": (626, 626),
  "GRID_WIDTH": (1055, 1024), "GRID_HEIGHT": (1071, 1056), "GRID_DEPTH": (1103, 1088), "CWD_MEMBAR_TYPE": (1137, 1136),
  "CTA_THREAD_DIMENSION0": (1167, 1152), "CTA_THREAD_DIMENSION1": (1183, 1168), "CTA_THREAD_DIMENSION2": (1199, 1184),
  "REGISTER_COUNT": (1208, 1200), "BARRIER_COUNT": (1215, 1211),
  "PROGRAM_ADDRESS_LOWER": (1247, 1216), "PROGRAM_ADDRESS_UPPER": (1272, 1248),
}, {
  "CONSTANT_BUFFER_VALID": (416, 416, 4), "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6": (1567, 1536, 64),
  "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6": (1586, 1568, 64), "CONSTANT_BUFFER_SIZE_SHIFTED4": (1599, 1587, 64),
}, ("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"), {"CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6": 6, "CONSTANT_BUFFER_SIZE_SHIFTED4": 4})

V05_00 = QMDLayout(5, 0, 384, {
  "QMD_TYPE": (153, 151), "SHARED_ALLOCATION_ENABLE": (351, 351), "SASS_VERSION": (455, 448), "API_VISIBLE_CALL_LIMIT": (456, 456),
  "SAMPLER_INDEX": (457, 457), "QMD_MINOR_VERSION": (467, 464), "QMD_MAJOR_VERSION": (471, 468),
  **{n: (472 + i, 472 + i) for i, n in enumerate(_CACHE_INVALIDATES)},
  "CWD_MEMBAR_TYPE": (625, 624),
  "PROGRAM_ADDRESS_LOWER_SHIFTED4": (1055, 1024), "PROGRAM_ADDRESS_UPPER_SHIFTED4": (1076, 1056),
  "CTA_THREAD_DIMENSION0": (1103, 1088), "CTA_THREAD_DIMENSION1": (1119, 1104), "CTA_THREAD_DIMENSION2": (1127, 1120),
  "REGISTER_COUNT": (1136, 1128), "BARRIER_COUNT": (1141, 1137), "SHARED_MEMORY_SIZE_SHIFTED7": (1162, 1152),
  "MIN_SM_CONFIG_SHARED_MEM_SIZE": (1168, 1163), "MAX_SM_CONFIG_SHARED_MEM_SIZE": (1174, 1169), "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (1180, 1175),
  "SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4": (1199, 1184), "SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4": (1215, 1200),
  "GRID_WIDTH": (1279, 1248), "GRID_HEIGHT": (1295, 1280), "GRID_DEPTH": (1327, 1312),
}, {
  "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6": (1375, 1344, 64), "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6": (1394, 1376, 64),
  "CONSTANT_BUFFER_SIZE_SHIFTED4": (1407, 1395, 64), "CONSTANT_BUFFER_VALID": (1856, 1856, 4),
}, ("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"),
  {"PROGRAM_ADDRESS_LOWER_SHIFTED4": 4, "SHARED_MEMORY_SIZE_SHIFTED7": 7, "SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4": 4,
   "SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4": 4, "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6": 6, "CONSTANT_BUFFER_SIZE_SHIFTED4": 4})

QMD_TYPE_GRID_CTA = 2            # v04_00/v05_00 QMD_TYPE: a plain grid of CTAs
CWD_MEMBAR_TYPE_L1_SYSMEMBAR = 1
SAMPLER_INDEX_VIA_HEADER_INDEX = 1
API_VISIBLE_CALL_LIMIT_NO_CHECK = 1
NUM_CONSTANT_BUFFERS = 8

# *** archs ***

@dataclass(frozen=True)
class ArchInfo:
  """What the launch needs to know of an sm_XY: its QMD layout, its classes (compute, copy, host channel) and the shared
  memory carve-outs (KiB) an SM can be configured to."""
  sm: int
  qmd: QMDLayout
  compute_class: int
  copy_class: int
  host_class: int
  carveouts_kib: tuple[int, ...]

# class numbers from the headers' #define NAME 0x....: AMPERE_COMPUTE_A (GA100) 0xC6C0, AMPERE_COMPUTE_B 0xC7C0, ADA_COMPUTE_A
# 0xC9C0, HOPPER_COMPUTE_A 0xCBC0, BLACKWELL_COMPUTE_A 0xCDC0, BLACKWELL_COMPUTE_B 0xCEC0; AMPERE_DMA_COPY_A/B 0xC6B5/0xC7B5,
# HOPPER_DMA_COPY_A 0xC8B5, BLACKWELL_DMA_COPY_A/B 0xC9B5/0xCAB5; AMPERE_CHANNEL_GPFIFO_A 0xC56F, HOPPER_CHANNEL_GPFIFO_A 0xC86F,
# BLACKWELL_CHANNEL_GPFIFO_A 0xC96F. Carve-outs: the CUDA programming guide's shared memory capacities per compute capability.
ARCHS: dict[str, ArchInfo] = {
  "sm_80": ArchInfo(80, V03_00, 0xC6C0, 0xC6B5, 0xC56F, (0, 8, 16, 32, 64, 100, 132, 164)),
  "sm_86": ArchInfo(86, V03_00, 0xC7C0, 0xC7B5, 0xC56F, (0, 8, 16, 32, 64, 100)),
  "sm_89": ArchInfo(89, V03_00, 0xC9C0, 0xC7B5, 0xC56F, (0, 8, 16, 32, 64, 100)),
  "sm_90": ArchInfo(90, V04_00, 0xCBC0, 0xC8B5, 0xC86F, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
  "sm_100": ArchInfo(100, V05_00, 0xCDC0, 0xC9B5, 0xC96F, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
  "sm_120": ArchInfo(120, V05_00, 0xCEC0, 0xCAB5, 0xC96F, (0, 8, 16, 32, 64, 100)),
}

def arch_info(arch: str) -> ArchInfo:
  if arch not in ARCHS: raise ValueError(f"NV arch {arch!r}: launches are encoded for {', '.join(ARCHS)}")
  return ARCHS[arch]

# *** the bit string ***

class QMD:
  """A QMD's bytes with set/get by field name (`i`: the index of an indexed field). `set` refuses a value that doesn't fit."""
  def __init__(self, layout: QMDLayout, data: bytes | None = None):
    self.layout = layout
    if data is not None and len(data) != layout.size: raise ValueError(f"QMD v{layout.major:02d}_{layout.minor:02d} is {layout.size} bytes, got {len(data)}")
    self.bits = int.from_bytes(data, "little") if data is not None else 0

  def set(self, name: str, value: int, i: int | None = None) -> None:
    hi, lo = self.layout.range(name, i)
    width = hi - lo + 1
    if not 0 <= value < 1 << width: raise ValueError(f"QMD field {name}{'' if i is None else f'({i})'} is {width} bits; {value:#x} does not fit")
    self.bits = self.bits & ~(((1 << width) - 1) << lo) | value << lo

  def get(self, name: str, i: int | None = None) -> int:
    hi, lo = self.layout.range(name, i)
    return (self.bits >> lo) & ((1 << (hi - lo + 1)) - 1)

  def to_bytes(self) -> bytes: return self.bits.to_bytes(self.layout.size, "little")
  def words(self) -> list[int]: return [(self.bits >> (32 * k)) & 0xFFFFFFFF for k in range(self.layout.size // 4)]

# *** what a launch sets ***

def shared_config(info: ArchInfo, shared_size: int) -> tuple[int, int, int]:
  """(min, max, target) SM_CONFIG_SHARED_MEM_SIZE: a carve-out of K KiB is encoded K/4 + 1; min = target = the smallest
  carve-out holding the kernel's shared memory, max = the largest."""
  fits = [k for k in info.carveouts_kib if k * 1024 >= shared_size]
  if not fits: raise ValueError(f"sm_{info.sm}: {shared_size} bytes of shared memory exceed the largest carve-out ({info.carveouts_kib[-1]} KiB)")
  return fits[0] // 4 + 1, info.carveouts_kib[-1] // 4 + 1, fits[0] // 4 + 1

def program_fields(layout: QMDLayout) -> tuple[str, str]:
  return ("PROGRAM_ADDRESS_LOWER_SHIFTED4", "PROGRAM_ADDRESS_UPPER_SHIFTED4") if layout.major >= 5 else ("PROGRAM_ADDRESS_LOWER", "PROGRAM_ADDRESS_UPPER")

def cbuf_fields(layout: QMDLayout) -> tuple[str, str]:
  return ("CONSTANT_BUFFER_ADDR_LOWER", "CONSTANT_BUFFER_ADDR_UPPER") if layout.major == 3 else \
         ("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6")

def build_qmd(arch: str, data: Any, grid: tuple[int, int, int], block: tuple[int, int, int]) -> QMD:
  """The QMD of one launch of a prepared kernel (`data`: its NVProgramData) with every field but the addresses: program
  address and constant buffer addresses are 0 here and filled in by `address_words` (they are known only later). The
  constant buffer sizes and valid bits are set: bank 0 (cbank0_size bytes) and each extra bank of the image."""
  info = arch_info(arch)
  L = info.qmd
  q = QMD(L)
  for name, v in (("QMD_MAJOR_VERSION", L.major), ("QMD_VERSION" if L.major == 3 else "QMD_MINOR_VERSION", L.minor),
                  ("API_VISIBLE_CALL_LIMIT", API_VISIBLE_CALL_LIMIT_NO_CHECK), ("SAMPLER_INDEX", SAMPLER_INDEX_VIA_HEADER_INDEX),
                  ("CWD_MEMBAR_TYPE", CWD_MEMBAR_TYPE_L1_SYSMEMBAR), ("SHARED_ALLOCATION_ENABLE", 1),
                  ("REGISTER_COUNT_V" if L.major == 3 else "REGISTER_COUNT", data.regs), ("BARRIER_COUNT", 1),
                  ("SASS_VERSION", int(str(info.sm), 16) if info.sm < 100 else (info.sm // 10) << 4)):
    q.set(name, v)
  if L.major == 3: q.set("SM_GLOBAL_CACHING_ENABLE", 1)
  else: q.set("QMD_TYPE", QMD_TYPE_GRID_CTA)
  for name in _CACHE_INVALIDATES: q.set(name, 1)
  for name, v in zip(L.grid, grid): q.set(name, v)
  for k, v in enumerate(block): q.set(f"CTA_THREAD_DIMENSION{k}", v)
  smem = _round(data.shared_size, 128 if L.major >= 5 else 256)
  if L.major >= 5: q.set("SHARED_MEMORY_SIZE_SHIFTED7", smem >> 7)
  else: q.set("SHARED_MEMORY_SIZE", smem)
  mn, mx, tg = shared_config(info, smem)
  q.set("MIN_SM_CONFIG_SHARED_MEM_SIZE", mn)
  q.set("MAX_SM_CONFIG_SHARED_MEM_SIZE", mx)
  q.set("TARGET_SM_CONFIG_SHARED_MEM_SIZE", tg)
  local = _round(data.local_size, 16)
  if L.major >= 5: q.set("SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4", local >> 4)
  else: q.set("SHADER_LOCAL_MEMORY_LOW_SIZE", local)
  for bank, size in [(0, data.cbank0_size)] + [(b, s) for b, _, s in data.const_banks]:
    if not 0 <= bank < NUM_CONSTANT_BUFFERS: raise ValueError(f"{data.name}: constant bank {bank} (the QMD binds banks 0..7)")
    q.set("CONSTANT_BUFFER_VALID", 1, bank)
    q.set("CONSTANT_BUFFER_SIZE_SHIFTED4", _round(size, 16) >> 4, bank)
  return q

def _round(x: int, a: int) -> int: return (x + a - 1) // a * a

def address_slot(layout: QMDLayout, lower: str, i: int | None = None) -> tuple[int, int, int]:
  """(dword, shift, bits) of an address field pair: LOWER is one whole dword holding (address >> shift) & 0xFFFFFFFF and UPPER
  the `bits - 32` bits right above it, so the 64-bit little-endian pair at that dword holds address >> shift in its low `bits`."""
  hi, lo = layout.range(lower, i)
  upper = lower.replace("LOWER", "UPPER")
  uhi, ulo = layout.range(upper, i)
  if lo % 32 or hi - lo != 31 or ulo != hi + 1: raise ValueError(f"{lower} [{hi}:{lo}] / {upper} [{uhi}:{ulo}] are not one dword and the bits above it")
  return lo // 32, layout.shifts.get(lower, 0), uhi - lo + 1

def address_fields(arch: str, data: Any) -> list[tuple[str, int | None]]:
  """(lower field, index) of each address a launch fills in: the program, constant bank 0, then each extra bank of the image."""
  L = arch_info(arch).qmd
  prog, cb = program_fields(L)[0], cbuf_fields(L)[0]
  return [(prog, None), (cb, 0)] + [(cb, b) for b, _, _ in data.const_banks]
