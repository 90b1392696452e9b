"""SDMA packet encoders for AMD copy queues (SDMA 4 on gfx9, 6 on gfx11, 7 on gfx12): each returns the dwords."""
from __future__ import annotations
from plugin_amd.regs import gen_of

# Facts from the public Linux headers drivers/gpu/drm/amd/amdgpu/{vega10,navi10,sdma_v6_0_0,sdma_v7_0_0}_sdma_pkt_open.h:
# every packet starts with a header dword: op [7:0], sub_op [15:8], op-specific bits above.
OP_NOP, OP_COPY, OP_FENCE, OP_TRAP, OP_POLL_REGMEM, OP_ATOMIC, OP_TIMESTAMP = 0, 1, 5, 6, 8, 10, 13
SUBOP_COPY_LINEAR, SUBOP_TIMESTAMP_GET_GLOBAL = 0, 2
OP_NAMES = {0: "NOP", 1: "COPY", 2: "WRITE", 4: "INDIRECT", 5: "FENCE", 6: "TRAP", 7: "SEM", 8: "POLL_REGMEM", 9: "COND_EXE",
            10: "ATOMIC", 11: "CONST_FILL", 12: "PTEPDE", 13: "TIMESTAMP", 14: "SRBM_WRITE", 15: "PRE_EXE", 16: "GPUVM_INV",
            17: "GCR_REQ", 32: "DUMMY_TRAP"}

# COPY_LINEAR's COUNT dword holds bytes - 1 (amdgpu's emit_copy_buffer writes byte_count - 1); the field is 22 bits on
# SDMA 4/5 and 30 bits on SDMA 6/7. The split size is amdgpu's copy_max_bytes (0x400000 for SDMA 4, 6 and 7; newer
# kernels raise SDMA 7 to 1 << 30, which we do not rely on).
MAX_COPY = {"gfx9": 0x400000, "gfx11": 0x400000, "gfx12": 0x400000}
COUNT_MASK = {"gfx9": 0x3FFFFF, "gfx11": 0x3FFFFFFF, "gfx12": 0x3FFFFFFF}

# POLL_REGMEM header: hdp_flush bit 26, func [30:28] (0 always, 1 <, 2 <=, 3 ==, 4 !=, 5 >=, 6 >), mem_poll bit 31;
# DW5: interval [15:0], retry_count [27:16]
POLL_FUNC_GEQ = 5

# packet sizes (dwords) and the dword index of the fields lowering patches
COPY_LINEAR_DWORDS, COPY_SRC_DW, COPY_DST_DW = 7, 3, 5
POLL_REGMEM_DWORDS, POLL_ADDR_DW, POLL_VALUE_DW = 6, 1, 3
FENCE_DWORDS, FENCE_ADDR_DW, FENCE_DATA_DW = 4, 1, 3
TIMESTAMP_DWORDS, TIMESTAMP_ADDR_DW = 3, 1
TRAP_DWORDS = 2

def _hdr(op: int, sub_op: int = 0) -> int: return (op & 0xFF) | (sub_op & 0xFF) << 8

# a one-dword NOP (op 0, count 0): the padding dword amdgpu's sdma_v*_ring_insert_nop writes (ring->funcs->nop), and what fills a
# ring's tail when a submit would not fit before the ring's end (the engine does not follow a packet across it)
NOP_DWORD = _hdr(OP_NOP)

def nop(dwords: int = 1) -> list[int]:
  """Padding: a NOP header whose count field [29:16] says how many dwords follow it."""
  if not 1 <= dwords <= 0x4000: raise ValueError(f"an SDMA NOP is 1..16384 dwords, not {dwords}")
  return [_hdr(OP_NOP) | (dwords - 1) << 16] + [0] * (dwords - 1)

def copy_linear_one(gen: str, dst: int, src: int, nbytes: int) -> list[int]:
  """One COPY_LINEAR packet (nbytes <= MAX_COPY[gen]): header, COUNT, PARAMETER, SRC lo/hi, DST lo/hi."""
  g = gen_of(gen)
  if not 1 <= nbytes <= MAX_COPY[g]: raise ValueError(f"SDMA COPY_LINEAR of {nbytes} bytes: must be 1..{MAX_COPY[g]:#x} on {g}")
  return [_hdr(OP_COPY, SUBOP_COPY_LINEAR), (nbytes - 1) & COUNT_MASK[g], 0, src & 0xFFFFFFFF, src >> 32, dst & 0xFFFFFFFF, dst >> 32]

def copy_chunks(gen: str, nbytes: int) -> list[tuple[int, int]]:
  """(offset, size) of each COPY_LINEAR a copy of nbytes is split into."""
  step = MAX_COPY[gen_of(gen)]
  return [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)]

def copy_linear(gen: str, dst: int, src: int, nbytes: int) -> list[int]:
  """A copy of any size: consecutive COPY_LINEAR packets, split at the generation's maximum copy size."""
  if nbytes <= 0: raise ValueError(f"SDMA copy of {nbytes} bytes")
  return [w for off, n in copy_chunks(gen, nbytes) for w in copy_linear_one(gen, dst + off, src + off, n)]

def poll_regmem(addr: int, ref: int, mask: int = 0xFFFFFFFF, func: int = POLL_FUNC_GEQ, interval: int = 10,
                retry_count: int = 0xFFF) -> list[int]:
  """POLL_REGMEM on memory: stall the engine until (*addr & mask) <func> ref (32-bit compare)."""
  if addr % 4: raise ValueError(f"POLL_REGMEM address {addr:#x} is not dword aligned")
  if not 0 <= func <= 6: raise ValueError(f"POLL_REGMEM func {func} is not one of 0..6")
  if not 0 <= ref < 1 << 32 or not 0 <= mask < 1 << 32: raise ValueError("POLL_REGMEM reference and mask are 32-bit values")
  return [_hdr(OP_POLL_REGMEM) | (func & 0x7) << 28 | 1 << 31, addr & 0xFFFFFFFF, addr >> 32, ref, mask,
          (interval & 0xFFFF) | (retry_count & 0xFFF) << 16]

def fence(addr: int, value: int) -> list[int]:
  """FENCE: write the 32-bit `value` to `addr` once earlier packets are done."""
  if addr % 4: raise ValueError(f"FENCE address {addr:#x} is not dword aligned")
  if not 0 <= value < 1 << 32: raise ValueError(f"FENCE value {value:#x} does not fit in 32 bits")
  return [_hdr(OP_FENCE), addr & 0xFFFFFFFF, addr >> 32, value]

def fence64(addr: int, value: int) -> list[int]:
  """A 64-bit signal write as two FENCEs: the high dword first, then the low one. Waiters compare the low dword, and
  timeline values only grow, so a waiter never sees the new low dword before the high dword it belongs with."""
  if not 0 <= value < 1 << 64: raise ValueError(f"signal value {value:#x} does not fit in 64 bits")
  return fence(addr + 4, value >> 32) + fence(addr, value & 0xFFFFFFFF)

def timestamp(addr: int) -> list[int]:
  """TIMESTAMP (GET_GLOBAL): write the 64-bit global GPU timestamp to `addr` (8-byte aligned)."""
  if addr % 8: raise ValueError(f"TIMESTAMP address {addr:#x} is not 8-byte aligned")
  return [_hdr(OP_TIMESTAMP, SUBOP_TIMESTAMP_GET_GLOBAL), addr & 0xFFFFFFFF, addr >> 32]

def trap(int_context: int = 0) -> list[int]:
  """TRAP: raise an interrupt carrying int_context [27:0] (used to wake a host waiting on a KFD event)."""
  return [_hdr(OP_TRAP), int_context & 0x0FFFFFFF]
