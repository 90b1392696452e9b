"""A6xx compute registers (dword offsets) and their fields, from freedreno's public register database
(mesa src/freedreno/registers/adreno/a6xx.xml)."""
from __future__ import annotations

SP_CS_CTRL_REG0 = 0xA9B0          # THREADSIZE bit 20, HALFREGFOOTPRINT 6:1, FULLREGFOOTPRINT 12:7, MERGEDREGS bit 31
SP_CS_OBJ_START = 0xA9B4          # 64-bit: the shader's address (LO, HI)
SP_CS_CONFIG = 0xA9BB             # ENABLED bit 8, NTEX 16:9, NSAMP 21:17, NIBO 28:22
SP_CS_INSTRLEN = 0xA9BC           # shader length in instructions (8 bytes each)
HLSQ_CS_CNTL = 0xB987             # CONSTLEN 7:0 (vec4 units >> 2), ENABLED bit 8
HLSQ_CS_NDRANGE_0 = 0xB990        # KERNELDIM 1:0, LOCALSIZEX/Y/Z - 1 in 11:2, 21:12, 31:22; then NDRANGE_1..6 =
                                  # GLOBALSIZE_X, GLOBALOFF_X, GLOBALSIZE_Y, GLOBALOFF_Y, GLOBALSIZE_Z, GLOBALOFF_Z (work-items)
HLSQ_CS_KERNEL_GROUP_X = 0xB999   # X, Y, Z at 0xB999..0xB99B
CP_ALWAYS_ON_COUNTER = 0x0980     # 64-bit, LO and HI
# where the compute shader's texture, sampler and IBO descriptors are (64-bit addresses), and how many
SP_CS_TEX_COUNT = 0xA9BA          # 7:0
SP_CS_TEX_SAMP = 0xA9E2           # 64-bit, 16-byte aligned: the samplers (A6XX_TEX_SAMP, 4 dwords each)
SP_CS_TEX_CONST = 0xA9E6          # 64-bit, 64-byte aligned: the textures (A6XX_TEX_CONST, 16 dwords each)
SP_CS_IBO = 0xA9F2                # 64-bit, 16-byte aligned: the IBOs (storage images, A6XX_TEX_CONST layout)
SP_CS_IBO_COUNT = 0xAA00          # 6:0

NAMES = {SP_CS_CTRL_REG0: "SP_CS_CTRL_REG0", SP_CS_OBJ_START: "SP_CS_OBJ_START_LO", SP_CS_OBJ_START + 1: "SP_CS_OBJ_START_HI",
         SP_CS_CONFIG: "SP_CS_CONFIG", SP_CS_INSTRLEN: "SP_CS_INSTRLEN", HLSQ_CS_CNTL: "HLSQ_CS_CNTL",
         **{HLSQ_CS_NDRANGE_0 + i: f"HLSQ_CS_NDRANGE_{i}" for i in range(7)},
         **{HLSQ_CS_KERNEL_GROUP_X + i: f"HLSQ_CS_KERNEL_GROUP_{'XYZ'[i]}" for i in range(3)},
         SP_CS_TEX_COUNT: "SP_CS_TEX_COUNT", SP_CS_IBO_COUNT: "SP_CS_IBO_COUNT",
         **{r + i: f"{n}_{'LO' if i == 0 else 'HI'}" for r, n in ((SP_CS_TEX_SAMP, "SP_CS_TEX_SAMP"), (SP_CS_TEX_CONST, "SP_CS_TEX_CONST"),
                                                                   (SP_CS_IBO, "SP_CS_IBO")) for i in range(2)}}

SP_CS_CONFIG_ENABLED = 1 << 8
HLSQ_CS_CNTL_ENABLED = 1 << 8

def cs_config(ntex: int = 0, nsamp: int = 0, nibo: int = 0) -> int:
  """SP_CS_CONFIG: ENABLED with the shader's texture, sampler and IBO counts (NTEX 16:9, NSAMP 21:17, NIBO 28:22)."""
  if not (ntex < 1 << 8 and nsamp < 1 << 5 and nibo < 1 << 7): raise ValueError(f"{ntex} textures, {nsamp} samplers, {nibo} IBOs do not fit SP_CS_CONFIG")
  return SP_CS_CONFIG_ENABLED | ntex << 9 | nsamp << 17 | nibo << 22

def ndrange_0(local: tuple[int, int, int], dims: int = 3) -> int:
  """HLSQ_CS_NDRANGE_0 for a work-group of `local` items (each 1..1024: the fields hold size - 1 in 10 bits)."""
  if not all(1 <= n <= 1024 for n in local): raise ValueError(f"local size {local}: each axis must be 1..1024 on Adreno")
  return (dims - 1) | (local[0] - 1) << 2 | (local[1] - 1) << 12 | (local[2] - 1) << 22

def local_of(ndrange0: int) -> tuple[int, int, int]:
  return ((ndrange0 >> 2 & 0x3FF) + 1, (ndrange0 >> 12 & 0x3FF) + 1, (ndrange0 >> 22 & 0x3FF) + 1)

def cs_ctrl_reg0(full_regs: int, half_regs: int = 0) -> int:
  """SP_CS_CTRL_REG0 with the register footprint (registers of 4 components each, in 6-bit fields) and THREADSIZE=64."""
  if not (0 <= full_regs < 64 and 0 <= half_regs < 64): raise ValueError(f"register footprint {full_regs}/{half_regs} does not fit in 6 bits")
  return half_regs << 1 | full_regs << 7
