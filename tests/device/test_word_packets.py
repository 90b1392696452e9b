"""core.device.word_packets: the packet format the software command processors (EXAMPLE's SIM, METAL, WEBGPU) share."""
import enum, struct
import pytest
from core.device.word_packets import WordPackets

class Op(enum.IntEnum):
  GO = 1
  STOP = 2

FMT = WordPackets({Op.GO: 3, Op.STOP: 1}, "toy packet")

def test_packets_are_a_header_then_their_fields_and_decode_back():
  words = FMT.packet(Op.GO, 7, 1 << 63) + FMT.packet(Op.STOP)
  assert struct.unpack("<4Q", words) == (1 | 3 << 8, 7, 1 << 63, 2 | 1 << 8)
  assert FMT.decode(words) == [(Op.GO, (7, 1 << 63)), (Op.STOP, ())] and type(FMT.decode(words)[0][0]) is Op
  assert FMT.field(0) == 8 and FMT.field(1) == 16

def test_bad_packets_are_refused_naming_the_format():
  with pytest.raises(ValueError, match="a GO toy packet has 2 fields, got 1"): FMT.packet(Op.GO, 1)
  with pytest.raises(ValueError, match=r"bad toy packet header 0x0000000000000201 \(opcode 1, 2 words\)"): FMT.decode(struct.pack("<2Q", 1 | 2 << 8, 0))
  with pytest.raises(ValueError, match=r"bad toy packet header 0x0000000000000209"): FMT.packet_words(9 | 2 << 8)
  with pytest.raises(ValueError, match="toy packet at byte 8 needs 24 bytes, only 16 left"): FMT.decode(FMT.packet(Op.STOP) + FMT.packet(Op.GO, 1, 2)[:16])

class Ring:
  """A ring of 32 bytes read as a circle, as HostRing.ring_bytes reads one."""
  def __init__(self, data: bytes, rptr: int): self.data, self.rptr = data, rptr
  def ring_bytes(self, off: int, n: int) -> bytes: return bytes(self.data[(off + i) % len(self.data)] for i in range(n))

def test_next_in_reads_the_packet_at_the_read_pointer_across_the_ring_end():
  words = FMT.packet(Op.GO, 5, 6)   # 24 bytes from byte 24 of a 32-byte ring: its last 16 wrap to the start
  ring = Ring(words[8:] + bytes(8) + words[:8], rptr=56)
  assert FMT.next_in(ring) == (Op.GO, (5, 6))
