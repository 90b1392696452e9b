"""Golden tests of the SDMA encoders: expected words are built here by hand from the *_sdma_pkt_open.h bit fields."""
from __future__ import annotations
import pytest
from plugin_amd import sdma

GENS = ("gfx9", "gfx11", "gfx12")

@pytest.mark.parametrize("gen", GENS)
def test_copy_linear_one_packet(gen):
  dst, src = 0x11_2233_4455, 0x66_7788_99AA
  # header: op 1 (COPY) in [7:0], sub_op 0 (LINEAR) in [15:8]; COUNT = bytes - 1; PARAMETER 0; SRC lo/hi; DST lo/hi
  assert sdma.copy_linear(gen, dst, src, 0x1000) == [0x00000001, 0xFFF, 0, 0x778899AA, 0x66, 0x22334455, 0x11]

@pytest.mark.parametrize("gen", GENS)
def test_copy_linear_splits_at_4mib(gen):
  n = 2 * 0x400000 + 5
  words = sdma.copy_linear(gen, 0x10000000, 0x20000000, n)
  assert len(words) == 3 * 7
  assert [words[i * 7 + 1] for i in range(3)] == [0x3FFFFF, 0x3FFFFF, 4]
  assert [words[i * 7 + 3] for i in range(3)] == [0x20000000, 0x20400000, 0x20800000]   # source advances by the chunk
  assert [words[i * 7 + 5] for i in range(3)] == [0x10000000, 0x10400000, 0x10800000]
  assert sdma.copy_chunks(gen, 0x400000) == [(0, 0x400000)]

def test_copy_rejects():
  with pytest.raises(ValueError, match="must be 1..0x400000"): sdma.copy_linear_one("gfx11", 0, 0, 0x400001)
  with pytest.raises(ValueError, match="copy of 0 bytes"): sdma.copy_linear("gfx11", 0, 0, 0)

def test_poll_regmem():
  # header: op 8, func 5 (>=) in [30:28], mem_poll bit 31; DW5: interval [15:0], retry_count [27:16]
  assert sdma.poll_regmem(0xAB_0000_0010, 99) == [8 | 5 << 28 | 1 << 31, 0x10, 0xAB, 99, 0xFFFFFFFF, 10 | 0xFFF << 16]
  assert sdma.poll_regmem(0x10, 1)[0] == 0xD0000008
  with pytest.raises(ValueError, match="dword aligned"): sdma.poll_regmem(0x11, 1)
  with pytest.raises(ValueError, match="32-bit"): sdma.poll_regmem(0x10, 1 << 32)

def test_fence_and_fence64():
  assert sdma.fence(0x1_0000_0008, 0xDEADBEEF) == [5, 0x8, 0x1, 0xDEADBEEF]
  # 64-bit signal: high dword (at addr + 4) first, then the low dword
  assert sdma.fence64(0x2000, 0x0000_0007_0000_0009) == [5, 0x2004, 0, 7, 5, 0x2000, 0, 9]
  with pytest.raises(ValueError): sdma.fence(0x2000, 1 << 32)

def test_timestamp_trap_nop():
  assert sdma.timestamp(0x3_0000_0040) == [13 | 2 << 8, 0x40, 0x3]   # op 13, sub_op 2 (GET_GLOBAL)
  assert sdma.trap(0x1234) == [6, 0x1234]
  assert sdma.trap(0xF000_0001) == [6, 0x1]                           # INT_CONTEXT is 28 bits
  assert sdma.nop(1) == [0] and sdma.nop(3) == [2 << 16, 0, 0]        # count [29:16] = dwords after the header
  with pytest.raises(ValueError, match="8-byte aligned"): sdma.timestamp(0x44)
