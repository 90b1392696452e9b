"""Golden tests of the PM4 encoders: expected words are built here by hand from the documented bit fields."""
from __future__ import annotations
import pytest
from plugin_amd import pm4, regs

GENS = ("gfx9", "gfx11", "gfx12")

def hdr(op: int, count: int, compute: int = 1) -> int:
  # PACKET3(op, n): type 3 in [31:30], count (body dwords - 1) in [29:16], opcode [15:8]; bit 1 = compute shader type
  return (3 << 30) | (count << 16) | (op << 8) | (compute << 1)

# SET_SH_REG offsets from the registers' byte addresses (Mesa's R_00Bxxx names): offset = byte/4 - 0x2c00
SH = {
  "gfx9": {"COMPUTE_DISPATCH_INITIATOR": 0xB800, "COMPUTE_START_X": 0xB810, "COMPUTE_NUM_THREAD_X": 0xB81C, "COMPUTE_PGM_LO": 0xB830,
           "COMPUTE_PGM_RSRC1": 0xB848, "COMPUTE_RESOURCE_LIMITS": 0xB854, "COMPUTE_TMPRING_SIZE": 0xB860,
           "COMPUTE_PGM_RSRC3": 0xB8B4, "COMPUTE_USER_DATA_0": 0xB900, "COMPUTE_USER_DATA_15": 0xB93C,
           "COMPUTE_DISPATCH_SCRATCH_BASE_LO": 0xB840},
  "gfx11": {"COMPUTE_DISPATCH_INITIATOR": 0xB800, "COMPUTE_START_X": 0xB810, "COMPUTE_NUM_THREAD_X": 0xB81C, "COMPUTE_PGM_LO": 0xB830,
            "COMPUTE_PGM_RSRC1": 0xB848, "COMPUTE_RESOURCE_LIMITS": 0xB854, "COMPUTE_TMPRING_SIZE": 0xB860,
            "COMPUTE_PGM_RSRC3": 0xB8A0, "COMPUTE_USER_DATA_0": 0xB900, "COMPUTE_USER_DATA_15": 0xB93C,
            "COMPUTE_DISPATCH_SCRATCH_BASE_LO": 0xB840},
}
SH["gfx12"] = SH["gfx11"]

@pytest.mark.parametrize("gen", GENS)
@pytest.mark.parametrize("name", list(SH["gfx9"]))
def test_sh_register_offsets(gen, name):
  assert regs.sh_offset(gen, name) == SH[gen][name] // 4 - 0x2C00
  assert regs.sh_name(gen, regs.sh_offset(gen, name)) == name

def test_rsrc3_differs_between_gfx9_and_gfx10_plus():
  # gfx9 headers place COMPUTE_PGM_RSRC3 at 0x0e2d (+0x2000); gfx11 at 0x1bc8 (+0x1260): SET_SH_REG offsets 0x22d vs 0x228
  assert (regs.sh_offset("gfx942", "COMPUTE_PGM_RSRC3"), regs.sh_offset("gfx1100", "COMPUTE_PGM_RSRC3")) == (0x22D, 0x228)

def test_arch_table_and_errors():
  assert [regs.gen_of(a) for a in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")] == ["gfx9", "gfx9", "gfx9", "gfx11", "gfx12"]
  with pytest.raises(ValueError, match="unknown AMD arch 'gfx803'"): regs.gen_of("gfx803")
  with pytest.raises(ValueError, match="USER_DATA_0..15"): regs.reg("gfx11", "COMPUTE_USER_DATA_16")

@pytest.mark.parametrize("gen", GENS)
def test_set_sh_reg(gen):
  off = SH[gen]["COMPUTE_PGM_RSRC1"] // 4 - 0x2C00
  assert pm4.set_sh_reg(regs.sh_offset(gen, "COMPUTE_PGM_RSRC1"), [0xAABBCCDD, 0x11]) == [hdr(0x76, 2), off, 0xAABBCCDD, 0x11]
  assert hdr(0x76, 2) == 0xC0027602

def test_set_sh_reg_rejects():
  with pytest.raises(ValueError, match="at least one value"): pm4.set_sh_reg(0x200, [])
  with pytest.raises(ValueError, match="32 bits"): pm4.set_sh_reg(0x200, [1 << 32])
  with pytest.raises(ValueError, match="outside the SH range"): pm4.set_sh_reg(0x400, [0])

def test_dispatch_direct():
  init = 1 | 1 << 2 | 1 << 15   # COMPUTE_SHADER_EN, FORCE_START_AT_000, CS_W32_EN
  assert pm4.dispatch_direct((7, 8, 9), init) == [0xC0031502, 7, 8, 9, 0x8005]

def test_acquire_mem_gfx9():
  coher = 1 << 18 | 1 << 22 | 1 << 23 | 1 << 27 | 1 << 29   # TC_WB, TCL1, TC, SH_KCACHE, SH_ICACHE action enables
  assert pm4.acquire_mem("gfx942") == [hdr(0x58, 5), coher, 0xFFFFFFFF, 0x00FFFFFF, 0, 0, 0x0000000A]
  assert coher == 0x28C40000

@pytest.mark.parametrize("gen", ["gfx11", "gfx12"])
def test_acquire_mem_gfx10_plus(gen):
  gcr = 1 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 14 | 1 << 15   # GLI, GLM wb/inv, GLK wb/inv, GLV, GL1, GL2 inv/wb
  assert pm4.acquire_mem(gen) == [hdr(0x58, 6), 0, 0xFFFFFFFF, 0x00FFFFFF, 0, 0, 0x0000000A, gcr]
  assert gcr == 0xC3F1

RELEASE_FLAGS = {
  "gfx9": 1 << 15 | 1 << 16 | 1 << 17 | 1 << 21,   # EOP_TC_WB, EOP_TCL1, EOP_TC, EOP_TC_MD action enables
  "gfx11": 1 << 12 | 1 << 13 | 1 << 14 | 1 << 15 | 1 << 16 | 1 << 20 | 1 << 21 | 1 << 22 | 3 << 25,   # GCR GLM_WB..SEQ, CACHE_POLICY 3
  "gfx12": 1 << 21 | 1 << 22 | 3 << 25,   # GL2_WB, SEQ, CACHE_POLICY 3
}

@pytest.mark.parametrize("gen", GENS)
def test_release_mem_signal(gen):
  addr, value = 0x7F12_3456_7890, 0x0123_4567_89AB_CDEF
  dw1 = 0x14 | 5 << 8 | RELEASE_FLAGS[gen]   # CACHE_FLUSH_AND_INV_TS_EVENT, EVENT_INDEX 5 (EOP)
  dw2 = 2 << 29                               # DATA_SEL 2: 64-bit data, INT_SEL 0, DST_SEL 0
  assert pm4.release_mem(gen, addr, value) == [hdr(0x49, 6), dw1, dw2, 0x34567890, 0x7F12, 0x89ABCDEF, 0x01234567, 0]

@pytest.mark.parametrize("gen", GENS)
def test_release_mem_timestamp_and_interrupt(gen):
  words = pm4.release_mem(gen, 0x1000, data_sel=pm4.DATA_SEL_GPU_CLOCK, event_type=pm4.BOTTOM_OF_PIPE_TS, cache_flush=False,
                          int_sel=2, int_ctxid=77)
  assert words == [0xC0064902, 0x28 | 5 << 8, 3 << 29 | 2 << 24, 0x1000, 0, 0, 0, 77]

def test_release_mem_rejects():
  with pytest.raises(ValueError, match="misaligned"): pm4.release_mem("gfx11", 0x1004, 1)
  with pytest.raises(ValueError, match="data_sel 7"): pm4.release_mem("gfx11", 0x1000, 1, data_sel=7)
  with pytest.raises(ValueError, match="64 bits"): pm4.release_mem("gfx11", 0x1000, 1 << 64)

def test_wait_reg_mem():
  # FUNCTION 5 (>=) in [2:0], MEM_SPACE 1 in [5:4], OPERATION 0, ENGINE 0 (ME)
  assert pm4.wait_reg_mem(0x12_0000_0004, 42) == [0xC0053C02, 0x15, 0x00000004, 0x12, 42, 0xFFFFFFFF, 4]
  assert pm4.wait_reg_mem(0x100, 1, mask=0xFF, function=3, poll_interval=10, compute=False)[:2] == [0xC0053C00, 0x13]
  with pytest.raises(ValueError, match="dword aligned"): pm4.wait_reg_mem(0x102, 1)

def test_event_write_cs_partial_flush():
  assert pm4.event_write(pm4.CS_PARTIAL_FLUSH, pm4.EVENT_INDEX_CS_PARTIAL_FLUSH) == [0xC0004602, 0x07 | 4 << 8]

def test_nop():
  assert pm4.nop(1) == [(3 << 30) | (0x3FFF << 16) | (0x10 << 8) | 2] == [0xFFFF1002]
  assert pm4.nop(4) == [hdr(0x10, 2), 0, 0, 0]
  with pytest.raises(ValueError): pm4.nop(0)

def test_header_count_limits():
  assert pm4.header(0x10, 0x4000) == (3 << 30) | (0x3FFF << 16) | (0x10 << 8) | 2
  with pytest.raises(ValueError): pm4.header(0x10, 0x4001)
