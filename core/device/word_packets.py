"""The packet format of the software command processors (EXAMPLE's SIM, METAL, WEBGPU): little-endian uint64 words, a header
word `opcode | nwords << 8` (nwords counts the header), then one word per field."""
from __future__ import annotations
import enum, struct
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
  from core.device.hcq import HostRing

E = TypeVar("E", bound=enum.IntEnum)

class WordPackets(Generic[E]):
  """The format over the opcodes of `words` (each opcode's packet length in words, header included); `what` names a packet
  in error messages ("packet", METAL's "encoder call")."""
  def __init__(self, words: dict[E, int], what: str = "packet"):
    self.words, self.what = words, what
    self.ops: type[E] = type(next(iter(words)))

  def packet(self, op: E, *fields: int) -> bytes:
    """The words of one packet: its header, then `fields`."""
    if len(fields) != (n := self.words[op]) - 1: raise ValueError(f"a {op.name} {self.what} has {n - 1} fields, got {len(fields)}")
    return struct.pack(f"<{n}Q", op | n << 8, *fields)

  @staticmethod
  def field(i: int) -> int:
    """Byte offset of field `i` inside its packet: where a patch writes a value known only later."""
    return 8 * (i + 1)

  def packet_words(self, header: int) -> int:
    """The length in words of the packet that starts with `header`. Raises ValueError when it starts no packet of this format."""
    op, n = header & 0xff, header >> 8
    if op not in self.words or n != self.words[self.ops(op)]:
      raise ValueError(f"bad {self.what} header 0x{header:016x} (opcode {op}, {n} words)")
    return n

  def decode(self, words: bytes) -> list[tuple[E, tuple[int, ...]]]:
    """Packets -> [(opcode, fields)]: what the command processor runs (tests and debugging read it too). Raises ValueError
    on a bad header or a packet cut short."""
    out, off = [], 0
    while off < len(words):
      n = self.packet_words(struct.unpack_from("<Q", words, off)[0])
      if off + 8 * n > len(words): raise ValueError(f"{self.what} at byte {off} needs {8 * n} bytes, only {len(words) - off} left")
      header, *fields = struct.unpack_from(f"<{n}Q", words, off)
      out.append((self.ops(header & 0xff), tuple(fields)))
      off += 8 * n
    return out

  def next_in(self, ring: HostRing) -> tuple[E, tuple[int, ...]]:
    """The packet at `ring`'s read pointer, (opcode, fields) (a HostRing's next_packet); ValueError when the words there are
    no packet."""
    header = struct.unpack("<Q", ring.ring_bytes(ring.rptr, 8))[0]
    (op, fields), = self.decode(ring.ring_bytes(ring.rptr, 8 * self.packet_words(header)))
    return op, fields
