"""Adreno A6xx/A7xx PM4 packets: type-4 register writes and type-7 opcode packets with their odd-parity bits, encoders that
return dwords, and a header decoder that says what is wrong with a malformed one.

Facts from freedreno's public register database (mesa src/freedreno/registers/adreno/adreno_pm4.xml) and the packet header
helpers next to it (src/freedreno/drm/freedreno_ringbuffer.h):
  type 4: 0x40000000 | count | odd_parity(count) << 7 | (register & 0x3ffff) << 8 | odd_parity(register) << 27
  type 7: 0x70000000 | count | odd_parity(count) << 15 | (opcode & 0x7f) << 16 | odd_parity(opcode) << 23
where count is the number of dwords after the header and odd_parity(v) is 1 when v has an even number of set bits (so
the field and its bit together have odd parity)."""
from __future__ import annotations
import dataclasses

TYPE4, TYPE7 = 0x40000000, 0x70000000
TYPE4_MAX_COUNT, TYPE7_MAX_COUNT = 0x7F, 0x3FFF

# opcodes (adreno_pm4_type3_packets, the A6XX variants)
CP_NOP, CP_WAIT_FOR_ME, CP_WAIT_FOR_IDLE, CP_EXEC_CS, CP_LOAD_STATE6_FRAG = 0x10, 0x13, 0x26, 0x33, 0x34
CP_WAIT_REG_MEM, CP_MEM_WRITE, CP_EVENT_WRITE, CP_SET_MARKER, CP_MEMCPY = 0x3C, 0x3D, 0x46, 0x65, 0x75
OPCODE_NAMES = {CP_NOP: "CP_NOP", CP_WAIT_FOR_ME: "CP_WAIT_FOR_ME", CP_WAIT_FOR_IDLE: "CP_WAIT_FOR_IDLE", CP_EXEC_CS: "CP_EXEC_CS",
                CP_LOAD_STATE6_FRAG: "CP_LOAD_STATE6_FRAG", CP_WAIT_REG_MEM: "CP_WAIT_REG_MEM", CP_MEM_WRITE: "CP_MEM_WRITE",
                CP_EVENT_WRITE: "CP_EVENT_WRITE", CP_SET_MARKER: "CP_SET_MARKER", CP_MEMCPY: "CP_MEMCPY"}

# CP_LOAD_STATE6: a6xx_state_type, a6xx_state_src, a6xx_state_block
ST6_SHADER, ST6_CONSTANTS, ST6_UBO, ST6_IBO = 0, 1, 2, 3
SS6_DIRECT, SS6_BINDLESS, SS6_INDIRECT = 0, 1, 2
SB6_CS_TEX, SB6_CS_SHADER, SB6_IBO, SB6_CS_IBO = 0x5, 0xD, 0xE, 0xF
# vgt_event_type: CACHE_FLUSH_TS flushes UCHE and writes the packet's value (or, with TIMESTAMP, the GPU counter) to ADDR
CACHE_FLUSH_TS = 0x04
EVENT_TIMESTAMP_BIT, EVENT_IRQ_BIT = 30, 31
# CP_WAIT_REG_MEM: cp_cond_function, POLL_MEMORY bit 4
WRITE_GE = 5
POLL_MEMORY = 1 << 4
# CP_SET_MARKER: a6xx_render_mode
RM6_COMPUTE = 8

class PacketError(ValueError):
  """A malformed packet: the message names the byte offset and what is wrong."""

def odd_parity(v: int) -> int: return (bin(v & 0xFFFFFFFF).count("1") + 1) & 1

def pkt4(reg: int, values: list[int]) -> list[int]:
  """Write `values` to consecutive registers from `reg`."""
  n = len(values)
  if not 1 <= n <= TYPE4_MAX_COUNT: raise ValueError(f"a type-4 packet writes 1..{TYPE4_MAX_COUNT} registers, not {n}")
  if not 0 <= reg <= 0x3FFFF: raise ValueError(f"register {reg:#x} does not fit in 18 bits")
  for v in values:
    if not 0 <= v < 1 << 32: raise ValueError(f"register value {v:#x} does not fit in 32 bits")
  return [TYPE4 | n | odd_parity(n) << 7 | reg << 8 | odd_parity(reg) << 27, *values]

def pkt7(opcode: int, body: list[int]) -> list[int]:
  n = len(body)
  if not 0 <= n <= TYPE7_MAX_COUNT: raise ValueError(f"a type-7 packet carries 0..{TYPE7_MAX_COUNT} dwords, not {n}")
  if not 0 <= opcode <= 0x7F: raise ValueError(f"opcode {opcode:#x} does not fit in 7 bits")
  for v in body:
    if not 0 <= v < 1 << 32: raise ValueError(f"{OPCODE_NAMES.get(opcode, hex(opcode))}: dword {v:#x} does not fit in 32 bits")
  return [TYPE7 | n | odd_parity(n) << 15 | opcode << 16 | odd_parity(opcode) << 23, *body]

def _lo(a: int) -> int: return a & 0xFFFFFFFF
def _hi(a: int) -> int: return a >> 32

def load_state6(state_type: int, state_src: int, state_block: int, num_unit: int, addr: int = 0, dst_off: int = 0) -> list[int]:
  """CP_LOAD_STATE6_FRAG (what compute uses): load `num_unit` units of state from `addr` (SS6_INDIRECT). Units: for shader
  code 128 bytes (one instruction cache line of 16 instructions), for constants one vec4 (16 bytes)."""
  if not 0 <= dst_off < 1 << 14: raise ValueError(f"DST_OFF {dst_off} does not fit in 14 bits")
  if not 0 <= num_unit < 1 << 10: raise ValueError(f"NUM_UNIT {num_unit} does not fit in 10 bits")
  if addr % 4: raise ValueError(f"CP_LOAD_STATE6 source address {addr:#x} is not dword aligned")
  return pkt7(CP_LOAD_STATE6_FRAG, [dst_off | state_type << 14 | state_src << 16 | state_block << 18 | num_unit << 22, _lo(addr), _hi(addr)])
LOAD_STATE6_ADDR_DW = 2   # dword index (header = 0) of the 64-bit source address

def exec_cs(ngroups: tuple[int, int, int]) -> list[int]: return pkt7(CP_EXEC_CS, [0, *ngroups])

def event_write(event: int, addr: int = 0, value: int = 0, timestamp: bool = False) -> list[int]:
  """CP_EVENT_WRITE: `event` (e.g. CACHE_FLUSH_TS) and, when it completes, the 32-bit `value` written to `addr` (or with
  `timestamp` the 64-bit GPU counter)."""
  if addr % (8 if timestamp else 4): raise ValueError(f"CP_EVENT_WRITE address {addr:#x} is misaligned")
  return pkt7(CP_EVENT_WRITE, [event | int(timestamp) << EVENT_TIMESTAMP_BIT, _lo(addr), _hi(addr), value])
EVENT_ADDR_DW, EVENT_VALUE_DW = 2, 4

def wait_reg_mem(addr: int, ref: int, mask: int = 0xFFFFFFFF, function: int = WRITE_GE, delay: int = 16) -> list[int]:
  """CP_WAIT_REG_MEM on memory: stall until (*addr & mask) <function> ref (a 32-bit compare), polling every `delay` cycles."""
  if addr % 4: raise ValueError(f"CP_WAIT_REG_MEM address {addr:#x} is not dword aligned")
  if not 0 <= function <= 6: raise ValueError(f"CP_WAIT_REG_MEM function {function} is not one of 0..6")
  return pkt7(CP_WAIT_REG_MEM, [function | POLL_MEMORY, _lo(addr), _hi(addr), ref, mask, delay])
WAIT_ADDR_DW, WAIT_REF_DW = 2, 4

def mem_write(addr: int, dwords: list[int]) -> list[int]:
  if addr % 4: raise ValueError(f"CP_MEM_WRITE address {addr:#x} is not dword aligned")
  if not dwords: raise ValueError("CP_MEM_WRITE needs at least one dword")
  return pkt7(CP_MEM_WRITE, [_lo(addr), _hi(addr), *dwords])
MEM_WRITE_ADDR_DW, MEM_WRITE_DATA_DW = 1, 3

def memcpy(dwords: int, src: int, dst: int) -> list[int]:
  if src % 4 or dst % 4: raise ValueError(f"CP_MEMCPY addresses {src:#x} -> {dst:#x} must be dword aligned")
  return pkt7(CP_MEMCPY, [dwords, _lo(src), _hi(src), _lo(dst), _hi(dst)])
MEMCPY_SRC_DW, MEMCPY_DST_DW = 2, 4

def wait_for_idle() -> list[int]: return pkt7(CP_WAIT_FOR_IDLE, [])
def wait_for_me() -> list[int]: return pkt7(CP_WAIT_FOR_ME, [])
def set_marker(mode: int) -> list[int]: return pkt7(CP_SET_MARKER, [mode])
def nop(body: int = 0) -> list[int]: return pkt7(CP_NOP, [0] * body)

@dataclasses.dataclass(frozen=True)
class Header:
  kind: int      # 4 or 7
  code: int      # the register (type 4) or the opcode (type 7)
  count: int     # dwords after the header

def decode_header(word: int, offset: int) -> Header:
  """The header at byte `offset`; raises PacketError for another packet type or a wrong parity bit."""
  if word >> 28 == 0x4:
    count, reg = word & 0x7F, (word >> 8) & 0x3FFFF
    if (word >> 7) & 1 != odd_parity(count): raise PacketError(f"byte {offset}: type-4 header {word:#010x}: count {count} has a bad parity bit")
    if (word >> 27) & 1 != odd_parity(reg): raise PacketError(f"byte {offset}: type-4 header {word:#010x}: register {reg:#x} has a bad parity bit")
    return Header(4, reg, count)
  if word >> 28 == 0x7:
    count, op = word & 0x3FFF, (word >> 16) & 0x7F
    if (word >> 15) & 1 != odd_parity(count): raise PacketError(f"byte {offset}: type-7 header {word:#010x}: count {count} has a bad parity bit")
    if (word >> 23) & 1 != odd_parity(op): raise PacketError(f"byte {offset}: type-7 header {word:#010x}: opcode {op:#x} has a bad parity bit")
    if word & (1 << 24 | 1 << 25 | 1 << 26 | 1 << 27): raise PacketError(f"byte {offset}: type-7 header {word:#010x} has reserved bits 24-27 set")
    return Header(7, op, count)
  raise PacketError(f"byte {offset}: {word:#010x} is neither a type-4 nor a type-7 packet header (bits 31-28 are {word >> 28:#x})")
