"""The MOCK command processor: words from the real encoders are decoded and acted on; malformed packets are rejected."""
from __future__ import annotations
import struct, threading, time
import pytest
from plugin_amd import pm4, sdma, regs
from plugin_amd.mock_cp import AddressSpace, Actions, MockQueue, PM4Processor, SDMAProcessor, PacketError, MockError, host_buffer

def setup(gen="gfx11", kind="pm4", timeout_s=5.0, **kw):
  mem = AddressSpace()
  dispatches = []
  actions = Actions(mem, on_dispatch=dispatches.append, timeout_s=timeout_s)
  proc = PM4Processor(gen, mem, actions, **kw) if kind == "pm4" else SDMAProcessor(gen, mem, actions)
  return mem, actions, MockQueue(proc, 1 << 12), dispatches

@pytest.mark.parametrize("gen", ["gfx9", "gfx11", "gfx12"])
def test_dispatch_sees_registers_grid_block_kernargs(gen):
  mem, actions, q, dispatches = setup(gen)
  code, kernargs = 0x7_1234_5600, 0x5_0000_1000
  wave32 = gen != "gfx9"
  words = pm4.acquire_mem(gen)
  words += pm4.set_sh_reg(regs.sh_offset(gen, "COMPUTE_PGM_LO"), [(code >> 8) & 0xFFFFFFFF, code >> 40])
  words += pm4.set_sh_reg(regs.sh_offset(gen, "COMPUTE_PGM_RSRC1"), [0x111, 0x222])
  words += pm4.set_sh_reg(regs.sh_offset(gen, "COMPUTE_START_X"), [0, 0, 0, 64, 2, 1])
  words += pm4.set_sh_reg(regs.sh_offset(gen, "COMPUTE_USER_DATA_0"), [kernargs & 0xFFFFFFFF, kernargs >> 32])
  words += pm4.dispatch_direct((10, 20, 3), 1 | 1 << 2 | (1 << 15 if wave32 else 0))
  q.submit(words)
  assert len(dispatches) == 1
  d = dispatches[0]
  assert (d.pgm_addr, d.grid, d.block, d.kernarg_addr, d.wave32) == (code, (10, 20, 3), (64, 2, 1), kernargs, wave32)
  assert d.registers["COMPUTE_PGM_RSRC1"] == 0x111 and d.registers["COMPUTE_PGM_RSRC2"] == 0x222
  assert [n for _, n in q.processor.packets] == ["ACQUIRE_MEM"] + ["SET_SH_REG"] * 4 + ["DISPATCH_DIRECT"]
  assert q.rptr == q.wptr == 4 * len(words)

@pytest.mark.parametrize("gen", ["gfx9", "gfx11", "gfx12"])
def test_release_mem_writes_signal_and_timestamp(gen):
  mem, actions, q, _ = setup(gen)
  sig, sigbuf = mem.alloc(16)
  q.submit(pm4.release_mem(gen, sig, 0x1_0000_0005) + pm4.release_mem(gen, sig + 8, data_sel=pm4.DATA_SEL_GPU_CLOCK,
                                                                         event_type=pm4.BOTTOM_OF_PIPE_TS, cache_flush=False))
  assert struct.unpack_from("<Q", sigbuf, 0)[0] == 0x1_0000_0005
  assert struct.unpack_from("<Q", sigbuf, 8)[0] > 0
  assert [a[0] for a in actions.log] == ["cache", "signal", "cache", "timestamp"]

def test_wait_blocks_until_the_value_is_written():
  mem, actions, q, _ = setup("gfx11")
  sig, _ = mem.alloc(8)
  out, outbuf = mem.alloc(8)
  writer = threading.Timer(0.15, lambda: mem.write_u64(sig, 3))
  st = time.monotonic()
  writer.start()
  q.submit(pm4.wait_reg_mem(sig, 3) + pm4.release_mem("gfx11", out, 42))
  assert time.monotonic() - st >= 0.1
  assert struct.unpack("<Q", outbuf)[0] == 42

def test_wait_timeout_names_the_packet():
  mem, actions, q, _ = setup("gfx11", timeout_s=0.05)
  sig, _ = mem.alloc(8)
  mem.write_u64(sig, 1)
  with pytest.raises(PacketError, match=r"PM4 packet at ring byte offset 0x4: opcode 0x3c \(WAIT_REG_MEM\): wait timed out.*= 0x1, needs >= 0x2"):
    q.submit(pm4.nop(1) + pm4.wait_reg_mem(sig, 2))

def test_event_write_and_nop_padding():
  mem, actions, q, _ = setup("gfx11")
  q.submit(pm4.nop(3) + pm4.event_write(pm4.CS_PARTIAL_FLUSH, 4) + pm4.nop(1))
  assert [n for _, n in q.processor.packets] == ["NOP", "EVENT_WRITE", "NOP"]
  assert ("event", 7) in actions.log

def test_packets_wrap_around_the_ring():
  mem, actions, q, _ = setup("gfx11")
  sig, sigbuf = mem.alloc(8)
  q.submit(pm4.nop(len(q.ring) // 4 - 3))          # leave 3 dwords before the end: RELEASE_MEM (8 dwords) wraps
  q.submit(pm4.release_mem("gfx11", sig, 77))
  assert struct.unpack("<Q", sigbuf)[0] == 77 and q.rptr == len(q.ring) + 20

# *** malformed PM4 ***

@pytest.mark.parametrize("words,match", [
  ([pm4.header(0xEE, 1), 0], r"offset 0x0: opcode 0xee \(unknown opcode\): not a PM4 opcode"),
  ([pm4.header(0x3F, 3), 0, 0, 0], r"opcode 0x3f \(INDIRECT_BUFFER\): not a packet the MOCK command processor executes"),
  (pm4.dispatch_direct((1, 1, 1), 1)[:3], r"opcode 0x15 \(DISPATCH_DIRECT\): truncated: the packet needs 5 dwords, 3 are"),
  ([pm4.header(0x15, 3), 1, 1, 1], r"DISPATCH_DIRECT\): body of 3 dwords, expected 4"),
  (pm4.dispatch_direct((1, 1, 1), 1), r"DISPATCH_DIRECT\): dispatch before COMPUTE_PGM_LO"),
  ([0x00001234], r"type-0 packet.*only type-3 packets"),
  ([pm4.header(0x49, 7)] + [0] * 7, r"RELEASE_MEM\): event index 0, expected 5"),
  ([pm4.header(0x3C, 6), 0x05, 0x100, 0, 1, 0xFFFFFFFF, 4], r"WAIT_REG_MEM\): MEM_SPACE 0"),
  ([pm4.header(0x58, 6)] + [0] * 6, r"ACQUIRE_MEM\): body of 6 dwords, expected 7"),
  ([pm4.header(0x76, 2) | 1 << 4, 0x200, 0], r"reserved bits"),
])
def test_malformed_pm4_rejected(words, match):
  mem, actions, q, _ = setup("gfx11")
  with pytest.raises(PacketError, match=match): q.submit(words)

def test_error_offset_is_the_bad_packets():
  _, _, q, _ = setup("gfx11")
  with pytest.raises(PacketError) as e: q.submit(pm4.nop(2) + pm4.event_write(7, 4) + [pm4.header(0xEE, 1), 0])
  assert (e.value.offset, e.value.opcode, e.value.meaning) == (16, 0xEE, "unknown opcode")

def test_wave32_on_gfx9_rejected():
  mem, actions, q, _ = setup("gfx9")
  words = pm4.set_sh_reg(regs.sh_offset("gfx9", "COMPUTE_PGM_LO"), [1, 0]) + pm4.set_sh_reg(regs.sh_offset("gfx9", "COMPUTE_PGM_RSRC1"), [0, 0])
  words += pm4.set_sh_reg(regs.sh_offset("gfx9", "COMPUTE_START_X"), [0, 0, 0, 1, 1, 1]) + pm4.dispatch_direct((1, 1, 1), 1 | 1 << 15)
  with pytest.raises(PacketError, match="CS_W32_EN on gfx9"): q.submit(words)

def test_unmapped_signal_address_is_a_packet_error():
  _, _, q, _ = setup("gfx11")
  with pytest.raises(PacketError, match=r"RELEASE_MEM\): device address range \[0x8, 0x10\) is not mapped"): q.submit(pm4.release_mem("gfx11", 8, 1))

# *** SDMA ***

@pytest.mark.parametrize("gen", ["gfx9", "gfx11", "gfx12"])
def test_sdma_copy_bytes_equal_across_chunks(gen):
  mem, actions, q, _ = setup(gen, "sdma")
  n = 0x400000 + 4097
  src, srcbuf = mem.alloc(n)
  dst, dstbuf = mem.alloc(n)
  srcbuf[:] = bytes(range(256)) * (n // 256) + bytes(range(n % 256))
  q.submit(sdma.copy_linear(gen, dst, src, n))
  assert dstbuf == srcbuf
  assert [a[1][2] for a in actions.log if a[0] == "copy"] == [0x400000, 4097]

def test_sdma_signal_wait_timestamp_trap():
  mem, actions, q, _ = setup("gfx11", "sdma")
  sig, sigbuf = mem.alloc(16)
  gate, _ = mem.alloc(8)
  threading.Timer(0.1, lambda: mem.write_u32(gate, 9)).start()
  q.submit(sdma.poll_regmem(gate, 9) + sdma.fence64(sig, 0x2_0000_0001) + sdma.timestamp(sig + 8) + sdma.trap(5) + sdma.nop(2))
  assert struct.unpack_from("<Q", sigbuf, 0)[0] == 0x2_0000_0001 and struct.unpack_from("<Q", sigbuf, 8)[0] > 0
  assert [a[0] for a in actions.log] == ["wait", "signal", "signal", "timestamp", "trap"]
  assert [n for _, n in q.processor.packets] == ["POLL_REGMEM", "FENCE", "FENCE", "TIMESTAMP", "TRAP", "NOP"]

@pytest.mark.parametrize("words,match", [
  ([0x0000000A, 0, 0, 0], r"SDMA packet at ring byte offset 0x0: opcode 0x0a \(ATOMIC\): not a packet the MOCK SDMA engine executes"),
  ([0x00000063], r"opcode 0x63 \(unknown opcode\): not an SDMA opcode"),
  ([0x00000101, 0, 0, 0, 0, 0, 0], r"COPY\): COPY sub-op 1: only COPY_LINEAR"),
  (sdma.copy_linear_one("gfx11", 0, 0, 16)[:4], r"COPY\): truncated: the packet needs 7 dwords, 4 are"),
  ([8, 0x10, 0, 1, 0xFFFFFFFF, 0], r"POLL_REGMEM\): register polling"),
  ([13, 0x40, 0], r"TIMESTAMP\): TIMESTAMP sub-op 0"),
])
def test_malformed_sdma_rejected(words, match):
  _, _, q, _ = setup("gfx11", "sdma")
  with pytest.raises(PacketError, match=match): q.submit(words)

def test_sdma_packet_across_the_ring_end_is_rejected():
  # 16 bytes left before the end of the 4 KB ring: a COPY (7 dwords) written across the end, as a submit that wraps anywhere
  # puts it, is refused; the same COPY after a NOP tail, from ring offset 0, runs
  mem, _, q, _ = setup("gfx11", "sdma")
  src, srcbuf = mem.alloc(64)
  dst, dstbuf = mem.alloc(64)
  srcbuf[:] = bytes(range(64))
  q.submit(sdma.nop(1020))
  with pytest.raises(PacketError, match=r"SDMA packet at ring byte offset 0xff0: opcode 0x01 \(COPY\): the packet's 7 dwords wrap past the end "
                                        r"of the 0x1000-byte ring \(it starts at ring offset 0xff0\): an SDMA packet must lie whole"):
    q.submit(sdma.copy_linear("gfx11", dst, src, 64))
  assert dstbuf == bytearray(64)
  mem, _, q, _ = setup("gfx11", "sdma")
  src, srcbuf = mem.alloc(64)
  dst, dstbuf = mem.alloc(64)
  srcbuf[:] = bytes(range(64))
  q.submit(sdma.nop(1020))
  q.submit([sdma.NOP_DWORD] * 4 + sdma.copy_linear("gfx11", dst, src, 64))
  assert dstbuf == srcbuf and q.processor.packets[-5:] == [(0xff0, "NOP"), (0xff4, "NOP"), (0xff8, "NOP"), (0xffc, "NOP"), (0x1000, "COPY")]

def test_pm4_packet_may_wrap():
  # a compute queue's command processor reads its ring as a circle
  mem, actions, q, _ = setup("gfx11")
  sig, sigbuf = mem.alloc(8)
  q.submit(pm4.nop(1020))
  q.submit(pm4.release_mem("gfx11", sig, 0x55))
  assert struct.unpack("<Q", sigbuf)[0] == 0x55 and q.processor.packets[-1] == (0xff0, "RELEASE_MEM")

def test_sdma_gfx9_count_field_is_22_bits():
  _, _, q, _ = setup("gfx9", "sdma")
  with pytest.raises(PacketError, match="bits above the gfx9 count field"): q.submit([1, 0x400000, 0, 0, 0, 0, 0])

def test_address_space_maps_ctypes_and_rejects_overlap():
  mem = AddressSpace()
  buf = host_buffer(64)
  mem.map(0x1000, buf)
  mem.write_u64(0x1008, 0x1122334455667788)
  assert bytes(buf)[8:16] == (0x1122334455667788).to_bytes(8, "little")
  with pytest.raises(MockError, match="overlaps"): mem.map(0x1020, bytearray(64))
  with pytest.raises(MockError, match="not mapped"): mem.read(0x1040, 1)
