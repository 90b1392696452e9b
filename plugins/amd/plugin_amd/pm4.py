"""PM4 type-3 packet encoders for AMD compute queues (gfx9, gfx11, gfx12): each returns the packet's dwords."""
from __future__ import annotations
from plugin_amd.regs import gen_of

# Facts from the public Linux headers drivers/gpu/drm/amd/amdgpu/soc15d.h (gfx9) and nvd.h (gfx10+):
#   PACKET3(op, n) = (3 << 30) | ((op & 0xFF) << 8) | ((n & 0x3FFF) << 16), n = number of body dwords - 1;
#   PACKET3_COMPUTE(op, n) = PACKET3(op, n) | 1 << 1 (the shader-type bit: 1 = compute); bit 0 is the predicate.
PACKET_TYPE3 = 3
NOP, DISPATCH_DIRECT, WAIT_REG_MEM, EVENT_WRITE, RELEASE_MEM, ACQUIRE_MEM, SET_SH_REG = 0x10, 0x15, 0x3C, 0x46, 0x49, 0x58, 0x76
# every opcode the public headers name, so a decoder can say what an unexpected packet is
OPCODE_NAMES = {
  0x10: "NOP", 0x11: "SET_BASE", 0x12: "CLEAR_STATE", 0x13: "INDEX_BUFFER_SIZE", 0x15: "DISPATCH_DIRECT", 0x16: "DISPATCH_INDIRECT",
  0x1D: "ATOMIC_GDS", 0x1E: "ATOMIC_MEM", 0x1F: "OCCLUSION_QUERY", 0x20: "SET_PREDICATION", 0x21: "REG_RMW", 0x22: "COND_EXEC",
  0x23: "PRED_EXEC", 0x24: "DRAW_INDIRECT", 0x25: "DRAW_INDEX_INDIRECT", 0x26: "INDEX_BASE", 0x27: "DRAW_INDEX_2",
  0x28: "CONTEXT_CONTROL", 0x2A: "INDEX_TYPE", 0x2D: "DRAW_INDEX_AUTO", 0x2F: "NUM_INSTANCES", 0x37: "WRITE_DATA",
  0x39: "MEM_SEMAPHORE", 0x3C: "WAIT_REG_MEM", 0x3F: "INDIRECT_BUFFER", 0x40: "COPY_DATA", 0x42: "PFP_SYNC_ME",
  0x45: "COND_WRITE", 0x46: "EVENT_WRITE", 0x47: "EVENT_WRITE_EOP", 0x48: "EVENT_WRITE_EOS", 0x49: "RELEASE_MEM",
  0x4A: "PREAMBLE_CNTL", 0x50: "DMA_DATA", 0x58: "ACQUIRE_MEM", 0x59: "REWIND", 0x5A: "INTERRUPT", 0x5E: "LOAD_UCONFIG_REG",
  0x5F: "LOAD_SH_REG", 0x68: "SET_CONFIG_REG", 0x69: "SET_CONTEXT_REG", 0x76: "SET_SH_REG", 0x77: "SET_SH_REG_OFFSET",
  0x78: "SET_QUEUE_REG", 0x79: "SET_UCONFIG_REG", 0x93: "WAIT_REG_MEM64", 0x98: "INVALIDATE_TLBS", 0xA0: "SET_RESOURCES",
  0xA2: "MAP_QUEUES", 0xA3: "UNMAP_QUEUES", 0xA4: "QUERY_STATUS",
}

# VGT event types (gc enum headers; amdgpu uses CACHE_FLUSH_AND_INV_TS_EVENT for fences) and EVENT_INDEX values
CS_PARTIAL_FLUSH, CACHE_FLUSH_AND_INV_TS_EVENT, BOTTOM_OF_PIPE_TS = 0x07, 0x14, 0x28
EVENT_INDEX_CS_PARTIAL_FLUSH, EVENT_INDEX_EOP = 4, 5
# WAIT_REG_MEM function field: 0 always, 1 <, 2 <=, 3 ==, 4 !=, 5 >=, 6 >
WAIT_FUNC_GEQ = 5
# RELEASE_MEM DATA_SEL: 0 discard, 1 low 32 bits, 2 64 bits, 3 64-bit GPU counter, 4 64-bit system counter;
# INT_SEL: 0 none, 1 interrupt only, 2 interrupt when the write is confirmed
DATA_SEL_NONE, DATA_SEL_32, DATA_SEL_64, DATA_SEL_GPU_CLOCK, DATA_SEL_SYS_CLOCK = 0, 1, 2, 3, 4

# ACQUIRE_MEM cache control. gfx9 (soc15d.h PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_*): TC_WB 18, TCL1 22, TC 23, SH_KCACHE 27,
# SH_ICACHE 29. gfx10+ (GCR_CNTL dword, PACKET3_ACQUIRE_MEM_GCR_CNTL_*): GLI_INV 0, GLM_WB 4, GLM_INV 5, GLK_WB 6,
# GLK_INV 7, GLV_INV 8, GL1_INV 9, GL2_INV 14, GL2_WB 15.
GFX9_COHER_FULL = (1 << 18) | (1 << 22) | (1 << 23) | (1 << 27) | (1 << 29)
GCR_FULL = (1 << 0) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 14) | (1 << 15)
# RELEASE_MEM cache actions in its first body dword. gfx9 (soc15d.h): EOP_TC_WB_ACTION_EN 15, EOP_TCL1_ACTION_EN 16,
# EOP_TC_ACTION_EN 17, EOP_TC_MD_ACTION_EN 21 (what amdgpu's gfx_v9_0_ring_emit_fence sets without writeback-only).
# gfx11 (nvd.h): GCR_GLM_WB 12, GLM_INV 13, GLV_INV 14, GL1_INV 15, GL2_US 16, GL2_INV 20, GL2_WB 21, GCR_SEQ 22,
# CACHE_POLICY(3) << 25 (the set gfx_v11_0_ring_emit_fence uses). gfx12: amdgpu keeps only GCR_SEQ | GL2_WB | CACHE_POLICY(3) (invalidations belong in ACQUIRE_MEM; GLM is ignored).
RELEASE_CACHE = {
  "gfx9": (1 << 15) | (1 << 16) | (1 << 17) | (1 << 21),
  "gfx11": (1 << 12) | (1 << 13) | (1 << 14) | (1 << 15) | (1 << 16) | (1 << 20) | (1 << 21) | (1 << 22) | (3 << 25),
  "gfx12": (1 << 21) | (1 << 22) | (3 << 25),
}

# packet sizes in dwords (header included), and the dword index of the fields lowering patches
SET_SH_REG_VALUES_DW = 2                       # first register value
DISPATCH_DIRECT_DWORDS, DISPATCH_DIM_DW = 5, 1
WAIT_REG_MEM_DWORDS, WAIT_ADDR_DW, WAIT_REF_DW = 7, 2, 4
RELEASE_MEM_DWORDS, RELEASE_ADDR_DW, RELEASE_DATA_DW = 8, 3, 5

def _u32(x: int, what: str) -> int:
  if not 0 <= x < 1 << 32: raise ValueError(f"{what} = {x:#x} does not fit in 32 bits")
  return x

def header(opcode: int, body_dwords: int, compute: bool = True) -> int:
  """A type-3 header for a packet with `body_dwords` dwords after it (1..16384)."""
  if not 1 <= body_dwords <= 0x4000:
    raise ValueError(f"PM4 packet {OPCODE_NAMES.get(opcode, hex(opcode))}: body of {body_dwords} dwords (1..16384)")
  return (PACKET_TYPE3 << 30) | ((body_dwords - 1) & 0x3FFF) << 16 | (opcode & 0xFF) << 8 | (int(compute) << 1)

def nop(dwords: int, compute: bool = True) -> list[int]:
  """Padding of `dwords` dwords: a one-dword NOP uses count 0x3FFF ("header only", as amdgpu's ring nop)."""
  if dwords < 1: raise ValueError("a NOP is at least one dword")
  if dwords == 1: return [(PACKET_TYPE3 << 30) | 0x3FFF << 16 | NOP << 8 | (int(compute) << 1)]
  return [header(NOP, dwords - 1, compute)] + [0] * (dwords - 1)

def set_sh_reg(offset: int, values: list[int], compute: bool = True) -> list[int]:
  """SET_SH_REG: write consecutive SH registers starting at `offset` (relative to SET_SH_REG_START, see regs.sh_offset)."""
  if not values: raise ValueError("SET_SH_REG needs at least one value")
  if not 0 <= offset < 0x400: raise ValueError(f"SET_SH_REG offset {offset:#x} is outside the SH range [0, 0x400)")
  return [header(SET_SH_REG, 1 + len(values), compute), offset, *(_u32(v, "register value") for v in values)]

def dispatch_direct(dims: tuple[int, int, int], initiator: int, compute: bool = True) -> list[int]:
  """DISPATCH_DIRECT: launch dims[0] x dims[1] x dims[2] workgroups; `initiator` is COMPUTE_DISPATCH_INITIATOR."""
  return [header(DISPATCH_DIRECT, 4, compute), *(_u32(d, "dispatch dim") for d in dims), _u32(initiator, "initiator")]

def acquire_mem(gen: str, compute: bool = True) -> list[int]:
  """ACQUIRE_MEM over the whole address space, invalidating (and writing back) the shader caches before later work.
  gfx9: 7 dwords ending in POLL_INTERVAL with CP_COHER_CNTL flags; gfx10+: 8 dwords, CP_COHER_CNTL 0 and a GCR_CNTL last."""
  g = gen_of(gen)
  # COHER_SIZE 0xFFFFFFFF, COHER_SIZE_HI 0xFFFFFF, COHER_BASE 0, POLL_INTERVAL 0xA: amdgpu's emit_mem_sync values
  if g == "gfx9": return [header(ACQUIRE_MEM, 6, compute), GFX9_COHER_FULL, 0xFFFFFFFF, 0xFFFFFF, 0, 0, 0xA]
  return [header(ACQUIRE_MEM, 7, compute), 0, 0xFFFFFFFF, 0xFFFFFF, 0, 0, 0xA, GCR_FULL]

def release_mem(gen: str, addr: int, value: int = 0, data_sel: int = DATA_SEL_64, event_type: int = CACHE_FLUSH_AND_INV_TS_EVENT,
                int_sel: int = 0, int_ctxid: int = 0, cache_flush: bool = True, compute: bool = True) -> list[int]:
  """RELEASE_MEM: after all prior work reaches the end of the pipe (and caches are written back), write `value`
  (DATA_SEL 1/2) or a 64-bit counter (3/4) to `addr`; optionally interrupt with `int_ctxid`."""
  g = gen_of(gen)
  if data_sel not in (0, 1, 2, 3, 4): raise ValueError(f"RELEASE_MEM data_sel {data_sel} is not one of 0..4")
  if addr % (8 if data_sel >= DATA_SEL_64 else 4): raise ValueError(f"RELEASE_MEM address {addr:#x} is misaligned for data_sel {data_sel}")
  if not 0 <= value < 1 << 64: raise ValueError(f"RELEASE_MEM value {value:#x} does not fit in 64 bits")
  dw1 = (event_type & 0x3F) | EVENT_INDEX_EOP << 8 | (RELEASE_CACHE[g] if cache_flush else 0)
  dw2 = (int_sel & 0x7) << 24 | (data_sel & 0x7) << 29   # DST_SEL (bit 16) 0 = memory through MC
  return [header(RELEASE_MEM, 7, compute), dw1, dw2, addr & 0xFFFFFFFF, addr >> 32, value & 0xFFFFFFFF, value >> 32,
          _u32(int_ctxid, "int ctxid")]

def wait_reg_mem(addr: int, ref: int, mask: int = 0xFFFFFFFF, function: int = WAIT_FUNC_GEQ, poll_interval: int = 4,
                 compute: bool = True) -> list[int]:
  """WAIT_REG_MEM on memory: stall the queue until (*addr & mask) <function> ref, a 32-bit compare.
  A 64-bit signal is waited on by its low dword (see lower.py: timeline values stay below 2**32)."""
  if addr % 4: raise ValueError(f"WAIT_REG_MEM address {addr:#x} is not dword aligned")
  if not 0 <= function <= 6: raise ValueError(f"WAIT_REG_MEM function {function} is not one of 0..6")
  dw1 = function | 1 << 4   # MEM_SPACE 1 = memory, OPERATION 0 = wait_reg_mem, ENGINE 0 = ME
  return [header(WAIT_REG_MEM, 6, compute), dw1, addr & 0xFFFFFFFF, addr >> 32, _u32(ref, "reference"), _u32(mask, "mask"),
          poll_interval & 0xFFFF]

def event_write(event_type: int, event_index: int, compute: bool = True) -> list[int]:
  """EVENT_WRITE of a non-timestamp event, e.g. CS_PARTIAL_FLUSH (wait for earlier dispatches to finish)."""
  return [header(EVENT_WRITE, 1, compute), (event_type & 0x3F) | (event_index & 0xF) << 8]
