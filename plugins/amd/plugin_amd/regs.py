"""AMD GC register offsets the compute dispatch writes, per generation, and the arch -> generation table."""
from __future__ import annotations

# Sources (public Linux kernel headers, drivers/gpu/drm/amd/include/asic_reg/gc/):
#   gfx9  (gfx90a, gfx942, gfx950): gc_9_4_3_offset.h   - regCOMPUTE_* with BASE_IDX 0; the GC segment-0 base is 0x2000
#         (the header's "addressBlock: xcd0_gc_cppdec, base address: 0xc080" is byte 0xc080 = dword 0x3020 = 0x2000 + 0x1020).
#   gfx11 (gfx1100):                gc_11_0_0_offset.h  - regCOMPUTE_* with BASE_IDX 0; segment-0 base 0x1260
#         ("addressBlock: gc_cppdec, base address: 0xc080" = dword 0x3020 = 0x1260 + 0x1dc0, the block's first register).
#   gfx12 (gfx1201):                gc_12_0_0_offset.h  - same COMPUTE_* block and segment-0 base as gfx11
#         ("addressBlock: gc_gfx_cpwd_cpwd_cppdec, base address: 0xc080", regCP_CU_MASK_ADDR_LO 0x1dd2 as in gfx11).
# The absolute dword offset of a register is header value + segment base; SET_SH_REG takes it relative to
# PACKET3_SET_SH_REG_START = 0x2c00 (soc15d.h and nvd.h), so every COMPUTE_* register lands in [0x2c00, 0x3000).

SH_REG_START = 0x2C00   # PACKET3_SET_SH_REG_START (soc15d.h, nvd.h)
SH_REG_END = 0x3000     # PACKET3_SET_SH_REG_END

GC_BASE = {"gfx9": 0x2000, "gfx11": 0x1260, "gfx12": 0x1260}

# header values (BASE_IDX 0) of the registers the dispatch needs
_GFX9 = {  # gc_9_4_3_offset.h
  "COMPUTE_DISPATCH_INITIATOR": 0x0E00, "COMPUTE_DIM_X": 0x0E01, "COMPUTE_DIM_Y": 0x0E02, "COMPUTE_DIM_Z": 0x0E03,
  "COMPUTE_START_X": 0x0E04, "COMPUTE_START_Y": 0x0E05, "COMPUTE_START_Z": 0x0E06,
  "COMPUTE_NUM_THREAD_X": 0x0E07, "COMPUTE_NUM_THREAD_Y": 0x0E08, "COMPUTE_NUM_THREAD_Z": 0x0E09,
  "COMPUTE_PGM_LO": 0x0E0C, "COMPUTE_PGM_HI": 0x0E0D,
  "COMPUTE_DISPATCH_SCRATCH_BASE_LO": 0x0E10, "COMPUTE_DISPATCH_SCRATCH_BASE_HI": 0x0E11,
  "COMPUTE_PGM_RSRC1": 0x0E12, "COMPUTE_PGM_RSRC2": 0x0E13, "COMPUTE_RESOURCE_LIMITS": 0x0E15,
  "COMPUTE_TMPRING_SIZE": 0x0E18, "COMPUTE_PGM_RSRC3": 0x0E2D, "COMPUTE_USER_DATA_0": 0x0E40,
}
_GFX11 = {  # gc_11_0_0_offset.h (and gc_12_0_0_offset.h)
  "COMPUTE_DISPATCH_INITIATOR": 0x1BA0, "COMPUTE_DIM_X": 0x1BA1, "COMPUTE_DIM_Y": 0x1BA2, "COMPUTE_DIM_Z": 0x1BA3,
  "COMPUTE_START_X": 0x1BA4, "COMPUTE_START_Y": 0x1BA5, "COMPUTE_START_Z": 0x1BA6,
  "COMPUTE_NUM_THREAD_X": 0x1BA7, "COMPUTE_NUM_THREAD_Y": 0x1BA8, "COMPUTE_NUM_THREAD_Z": 0x1BA9,
  "COMPUTE_PGM_LO": 0x1BAC, "COMPUTE_PGM_HI": 0x1BAD,
  "COMPUTE_DISPATCH_SCRATCH_BASE_LO": 0x1BB0, "COMPUTE_DISPATCH_SCRATCH_BASE_HI": 0x1BB1,
  "COMPUTE_PGM_RSRC1": 0x1BB2, "COMPUTE_PGM_RSRC2": 0x1BB3, "COMPUTE_RESOURCE_LIMITS": 0x1BB5,
  "COMPUTE_TMPRING_SIZE": 0x1BB8, "COMPUTE_PGM_RSRC3": 0x1BC8, "COMPUTE_USER_DATA_0": 0x1BE0,
}
HEADER_OFFSETS: dict[str, dict[str, int]] = {"gfx9": _GFX9, "gfx11": _GFX11, "gfx12": _GFX11}
NUM_USER_DATA = 16   # COMPUTE_USER_DATA_0..15

# COMPUTE_DISPATCH_INITIATOR fields (gc_*_sh_mask.h): COMPUTE_SHADER_EN bit 0, FORCE_START_AT_000 bit 2,
# CS_W32_EN bit 15 (gfx10+ only: wave32 dispatch)
DISPATCH_INITIATOR_COMPUTE_SHADER_EN = 1 << 0
DISPATCH_INITIATOR_FORCE_START_AT_000 = 1 << 2
DISPATCH_INITIATOR_CS_W32_EN = 1 << 15

ARCH_GEN = {"gfx90a": "gfx9", "gfx942": "gfx9", "gfx950": "gfx9", "gfx1100": "gfx11", "gfx1201": "gfx12"}
GENS = ("gfx9", "gfx11", "gfx12")

def gen_of(arch: str) -> str:
  """The register/packet generation of an arch name ("gfx1100" -> "gfx11"); a generation name passes through."""
  if arch in GENS: return arch
  base = arch.split(":")[0]
  if base in ARCH_GEN: return ARCH_GEN[base]
  raise ValueError(f"unknown AMD arch {arch!r}: known {sorted(ARCH_GEN)} (or a generation {GENS})")

def reg(gen: str, name: str) -> int:
  """The absolute dword offset of register `name` on generation `gen` (header value + GC segment-0 base)."""
  g = gen_of(gen)
  if name.startswith("COMPUTE_USER_DATA_") and name != "COMPUTE_USER_DATA_0":
    i = int(name.rsplit("_", 1)[1])
    if not 0 <= i < NUM_USER_DATA: raise ValueError(f"{name}: only COMPUTE_USER_DATA_0..{NUM_USER_DATA-1} exist")
    return HEADER_OFFSETS[g]["COMPUTE_USER_DATA_0"] + GC_BASE[g] + i
  try: return HEADER_OFFSETS[g][name] + GC_BASE[g]
  except KeyError: raise KeyError(f"register {name!r} is not in the {g} table; known: {sorted(HEADER_OFFSETS[g])}") from None

def sh_offset(gen: str, name: str) -> int:
  """The SET_SH_REG offset of register `name`: its absolute dword offset minus SH_REG_START."""
  off = reg(gen, name)
  if not SH_REG_START <= off < SH_REG_END: raise ValueError(f"{name} ({off:#x}) is not an SH register on {gen}")
  return off - SH_REG_START

def sh_name(gen: str, offset: int) -> str | None:
  """The register name at SET_SH_REG offset `offset` on `gen`, or None (used by the mock's error messages)."""
  g = gen_of(gen)
  for n, v in HEADER_OFFSETS[g].items():
    if v + GC_BASE[g] - SH_REG_START == offset: return n
  base = HEADER_OFFSETS[g]["COMPUTE_USER_DATA_0"] + GC_BASE[g] - SH_REG_START
  return f"COMPUTE_USER_DATA_{offset - base}" if 0 <= offset - base < NUM_USER_DATA else None
