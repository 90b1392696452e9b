"""A small MessagePack decoder (the format of the AMDGPU metadata note), per the public msgpack spec; decoding only."""
from __future__ import annotations
import struct
from typing import Any

class MsgpackError(ValueError):
  """The bytes are not valid MessagePack."""

# fixed-width codes: code -> (struct format, size)
_NUM = {0xca: (">f", 4), 0xcb: (">d", 8), 0xcc: (">B", 1), 0xcd: (">H", 2), 0xce: (">I", 4), 0xcf: (">Q", 8),
        0xd0: (">b", 1), 0xd1: (">h", 2), 0xd2: (">i", 4), 0xd3: (">q", 8)}
_LEN = {1: ">B", 2: ">H", 4: ">I"}

class _Reader:
  def __init__(self, data: bytes):
    self.data, self.pos = memoryview(data), 0
  def take(self, n: int) -> bytes:
    if self.pos + n > len(self.data): raise MsgpackError(f"truncated: need {n} bytes at offset {self.pos}, have {len(self.data) - self.pos}")
    out = bytes(self.data[self.pos:self.pos + n])
    self.pos += n
    return out
  def num(self, fmt: str, size: int) -> Any: return struct.unpack(fmt, self.take(size))[0]

  def value(self, depth: int = 0) -> Any:
    if depth > 64: raise MsgpackError("nesting deeper than 64 levels")
    at = self.pos
    c = self.take(1)[0]
    if c <= 0x7f: return c
    if c >= 0xe0: return c - 0x100
    if 0x80 <= c <= 0x8f: return self.map(c & 0x0f, depth)
    if 0x90 <= c <= 0x9f: return self.array(c & 0x0f, depth)
    if 0xa0 <= c <= 0xbf: return self.str(c & 0x1f)
    if c == 0xc0: return None
    if c == 0xc2: return False
    if c == 0xc3: return True
    if c in _NUM: return self.num(*_NUM[c])
    if c in (0xc4, 0xc5, 0xc6): return self.take(self.num(_LEN[1 << (c - 0xc4)], 1 << (c - 0xc4)))          # bin 8/16/32
    if c in (0xd9, 0xda, 0xdb): return self.str(self.num(_LEN[1 << (c - 0xd9)], 1 << (c - 0xd9)))          # str 8/16/32
    if c in (0xdc, 0xdd): return self.array(self.num(_LEN[2 << (c - 0xdc)], 2 << (c - 0xdc)), depth)        # array 16/32
    if c in (0xde, 0xdf): return self.map(self.num(_LEN[2 << (c - 0xde)], 2 << (c - 0xde)), depth)          # map 16/32
    if c in (0xd4, 0xd5, 0xd6, 0xd7, 0xd8): return self.ext(1 << (c - 0xd4))                                # fixext 1..16
    if c in (0xc7, 0xc8, 0xc9): return self.ext(self.num(_LEN[1 << (c - 0xc7)], 1 << (c - 0xc7)))          # ext 8/16/32
    raise MsgpackError(f"byte {c:#04x} at offset {at} is not a MessagePack type code")

  def str(self, n: int) -> str:
    raw = self.take(n)
    try: return raw.decode("utf-8")
    except UnicodeDecodeError as e: raise MsgpackError(f"string at offset {self.pos - n} is not UTF-8: {e}") from None
  def array(self, n: int, depth: int) -> list[Any]: return [self.value(depth + 1) for _ in range(n)]
  def map(self, n: int, depth: int) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for _ in range(n):
      k = self.value(depth + 1)
      if isinstance(k, (list, dict)): raise MsgpackError(f"unhashable map key {k!r}")
      out[k] = self.value(depth + 1)
    return out
  def ext(self, n: int) -> tuple[int, bytes]:
    kind = self.num(">b", 1)
    return (kind, self.take(n))

def unpackb(data: bytes) -> Any:
  """Decodes exactly one MessagePack value that fills `data` (trailing bytes are an error)."""
  r = _Reader(data)
  out = r.value()
  if r.pos != len(data): raise MsgpackError(f"{len(data) - r.pos} trailing bytes after the value (at offset {r.pos})")
  return out
