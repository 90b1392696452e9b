"""Adreno PM4 encoders against freedreno's documented fields (mesa src/freedreno/registers/adreno/adreno_pm4.xml, a6xx.xml)
and the header helpers of src/freedreno/drm/freedreno_ringbuffer.h. Expected words are worked out by hand from those fields."""
from __future__ import annotations
import pytest
from plugin_qcom import pm4, regs
from plugin_qcom.pm4 import PacketError, decode_header

def test_odd_parity_bit() -> None:
  # 1 when the value has an even number of set bits: the field and the bit together always have odd parity
  assert [pm4.odd_parity(v) for v in (0, 1, 2, 3, 7, 0x33, 0x46, 0xB990)] == [1, 0, 0, 1, 0, 1, 0, 0]
  for v in range(200): assert (bin(v).count("1") + pm4.odd_parity(v)) % 2 == 1

def test_type7_header_matches_the_database_example() -> None:
  # adreno_pm4.xml's CP_LOAD_STATE4 dump: opcode 0x30 with 11 dwords is the header 70b0000b
  assert pm4.pkt7(0x30, [0] * 11)[0] == 0x70B0000B

def test_type4_header() -> None:
  # HLSQ_CS_NDRANGE_0 (0xb990, 7 set bits: parity bit 0), 7 registers (3 set bits: parity bit 0)
  assert pm4.pkt4(regs.HLSQ_CS_NDRANGE_0, [0] * 7)[0] == 0x40B99007
  # SP_CS_CONFIG (0xa9bb: 10 set bits -> parity bit 1), one register (1 set bit -> 0)
  assert pm4.pkt4(regs.SP_CS_CONFIG, [0x100]) == [0x48A9BB01, 0x100]
  # HLSQ_CS_CNTL (0xb987: 9 set bits -> 0); SP_CS_OBJ_START (0xa9b4: 8 set bits -> 1) with 2 registers (1 set bit -> 0)
  assert pm4.pkt4(regs.HLSQ_CS_CNTL, [0])[0] == 0x40B98701
  assert pm4.pkt4(regs.SP_CS_OBJ_START, [0, 0])[0] == 0x48A9B402

def test_exec_cs() -> None:
  # CP_EXEC_CS = 0x33 (4 set bits -> 1), 4 dwords (1 set bit -> 0): { 0, NGROUPS_X, NGROUPS_Y, NGROUPS_Z }
  assert pm4.exec_cs((5, 6, 7)) == [0x70B30004, 0, 5, 6, 7]

def test_load_state6_fields() -> None:
  # CP_LOAD_STATE6_FRAG = 0x34 (3 set bits -> 0); DST_OFF 0-13, STATE_TYPE 14-15, STATE_SRC 16-17, STATE_BLOCK 18-21, NUM_UNIT 22-31
  w = pm4.load_state6(pm4.ST6_CONSTANTS, pm4.SS6_INDIRECT, pm4.SB6_CS_SHADER, 3, addr=0x1_2345_6780, dst_off=4)
  assert w == [0x70348003, 4 | 1 << 14 | 2 << 16 | 0xD << 18 | 3 << 22, 0x23456780, 0x1]
  with pytest.raises(ValueError, match="NUM_UNIT 1024"): pm4.load_state6(pm4.ST6_SHADER, pm4.SS6_INDIRECT, pm4.SB6_CS_SHADER, 1024)

def test_event_write_wait_mem_write_memcpy() -> None:
  # CP_EVENT_WRITE = 0x46 (3 set bits -> 0), 4 dwords: EVENT 0-7 (CACHE_FLUSH_TS = 4), TIMESTAMP bit 30, ADDR, value
  assert pm4.event_write(pm4.CACHE_FLUSH_TS, 0x1000, 9) == [0x70460004, 0x4, 0x1000, 0, 9]
  assert pm4.event_write(pm4.CACHE_FLUSH_TS, 0x1000, timestamp=True)[1] == 0x4 | 1 << 30
  # CP_WAIT_REG_MEM = 0x3c (4 set bits -> 1), 6 dwords (2 -> 1): FUNCTION 0-2 (WRITE_GE = 5), POLL_MEMORY bit 4, addr, REF, MASK, DELAY
  assert pm4.wait_reg_mem(0x2000, 3) == [0x70BC8006, 5 | 1 << 4, 0x2000, 0, 3, 0xFFFFFFFF, 16]
  # CP_MEM_WRITE = 0x3d (5 set bits -> 0), 3 dwords (2 -> 1): ADDR_LO, ADDR_HI, data
  assert pm4.mem_write(0x3004, [7]) == [0x703D8003, 0x3004, 0, 7]
  # CP_MEMCPY = 0x75 (5 set bits -> 0), 5 dwords (2 -> 1): DWORDS, SRC_LO/HI, DST_LO/HI
  assert pm4.memcpy(2, 0x10, 0x20) == [0x70758005, 2, 0x10, 0, 0x20, 0]

def test_ndrange_0_fields() -> None:
  # KERNELDIM 0-1, LOCALSIZEX 2-11, LOCALSIZEY 12-21, LOCALSIZEZ 22-31, each size minus one
  assert regs.ndrange_0((16, 2, 1)) == 2 | 15 << 2 | 1 << 12
  assert regs.local_of(regs.ndrange_0((1024, 3, 7))) == (1024, 3, 7)
  with pytest.raises(ValueError, match="1..1024"): regs.ndrange_0((2048, 1, 1))

def test_decode_rejects_bad_parity_and_unknown_types() -> None:
  h = pm4.exec_cs((1, 1, 1))[0]
  assert decode_header(h, 0) == pm4.Header(7, pm4.CP_EXEC_CS, 4)
  with pytest.raises(PacketError, match="byte 12: type-7 header .*: opcode 0x33 has a bad parity bit"): decode_header(h ^ 1 << 23, 12)
  with pytest.raises(PacketError, match="byte 8: type-7 header .*: count 4 has a bad parity bit"): decode_header(h ^ 1 << 15, 8)
  with pytest.raises(PacketError, match="register 0xb990 has a bad parity bit"): decode_header(pm4.pkt4(0xB990, [0])[0] ^ 1 << 27, 0)
  with pytest.raises(PacketError, match="neither a type-4 nor a type-7"): decode_header(0xC0001000, 4)
