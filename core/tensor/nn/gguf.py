"""GGUF files (llama.cpp's model format): metadata, tensor infos, and tensors dequantized on the host with numpy."""
from __future__ import annotations
import struct
from typing import Any, Callable
from core.helpers import prod, round_up, is_pow2
from core.ir.dtype import DType, dtypes
from core.tensor.tensor import Tensor
from core.tensor.nn.source import Source, open_source, host_tensor

# *** the header: "GGUF", u32 version, u64 tensor count, u64 metadata count, then key/value pairs and tensor infos ***

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
GGML_MAX_DIMS = 4

class _Reader:
  """A cursor over the file's bytes whose every read is bounds-checked, so a truncated file fails with its name and offset."""
  def __init__(self, buf: Any, fn: str):
    self.buf, self.fn, self.pos = buf, fn, 0
  def fail(self, msg: str) -> ValueError: return ValueError(f"{self.fn}: malformed GGUF file: {msg}")
  def need(self, n: int, what: str) -> None:
    if self.pos + n > len(self.buf):
      raise self.fail(f"{what} at offset {self.pos} needs {n} bytes, but the file ends at {len(self.buf)} (truncated?)")
  def unpack(self, fmt: str, what: str) -> Any:
    n = struct.calcsize(fmt)
    self.need(n, what)
    (v,) = struct.unpack_from(fmt, self.buf, self.pos)
    self.pos += n
    return v
  def string(self, what: str) -> str:
    n = self.unpack("<Q", f"the length of {what}")
    self.need(n, what)
    s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
    self.pos += n
    return s
  def value(self, vtype: int, what: str) -> Any:
    if vtype in _SCALARS: return self.unpack(_SCALARS[vtype], what)
    if vtype == _STRING: return self.string(what)
    if vtype == _ARRAY:
      itype, count = self.unpack("<I", f"the item type of {what}"), self.unpack("<Q", f"the length of {what}")
      if itype in _SCALARS:   # numeric arrays (token scores, types) can hold 100k+ items: read them in one go
        import numpy as np
        size = struct.calcsize(_SCALARS[itype])
        self.need(count * size, what)
        arr = np.frombuffer(self.buf, dtype=np.dtype(_SCALARS[itype]), count=count, offset=self.pos)
        self.pos += count * size
        return arr.tolist()
      return [self.value(itype, f"{what}[{i}]") for i in range(count)]
    raise self.fail(f"{what} has unknown value type {vtype} (known: 0-12)")

# *** dequantization: each type's blocks as rows of a uint8 array (nblocks, block bytes) -> float32 (nblocks, block elements) ***

def _f16(blk: Any, start: int) -> Any:
  import numpy as np
  return blk[:, start:start + 2].copy().view(np.float16).astype(np.float32)   # (nblocks, 1)

def _nibbles(qs: Any) -> Any:
  import numpy as np
  return np.concatenate([qs & 0x0F, qs >> 4], axis=1)   # elements j and j+16 share byte j: low nibble first

def _fifth_bit(qh: Any) -> Any:
  import numpy as np
  bits = qh.copy().view("<u4")   # bit j of the little-endian u32 is element j's fifth bit
  return ((bits >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8) << 4

def _q8_0(blk: Any) -> Any:
  import numpy as np
  return _f16(blk, 0) * blk[:, 2:].copy().view(np.int8)

def _q4_0(blk: Any) -> Any:
  import numpy as np
  return _f16(blk, 0) * (_nibbles(blk[:, 2:]).astype(np.int8) - 8)

def _q4_1(blk: Any) -> Any: return _f16(blk, 0) * _nibbles(blk[:, 4:]) + _f16(blk, 2)

def _q5_0(blk: Any) -> Any:
  import numpy as np
  return _f16(blk, 0) * ((_nibbles(blk[:, 6:]) | _fifth_bit(blk[:, 2:6])).astype(np.int8) - 16)

def _q5_1(blk: Any) -> Any: return _f16(blk, 0) * (_nibbles(blk[:, 8:]) | _fifth_bit(blk[:, 4:8])) + _f16(blk, 2)

def _k_scales_mins(s: Any) -> tuple[Any, Any]:
  """Q4_K/Q5_K pack eight 6-bit scales and eight 6-bit mins in 12 bytes: sub-blocks 0-3 in the low 6 bits of bytes 0-3
  (scales) and 4-7 (mins); sub-blocks 4-7 in the nibbles of bytes 8-11, with their top two bits in bytes 0-7's top bits."""
  import numpy as np
  lo, mid, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
  scales = np.concatenate([lo & 63, (hi & 0x0F) | ((lo >> 6) << 4)], axis=1)
  mins = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=1)
  return scales.astype(np.float32), mins.astype(np.float32)

def _k_nibbles(qs: Any) -> Any:
  """(nblocks, 8, 32): each 32 bytes hold two sub-blocks of 32, the low nibbles first."""
  import numpy as np
  q = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
  return (q & 0x0F).reshape(-1, 8, 32)

def _q4_k(blk: Any) -> Any:
  sc, mn = _k_scales_mins(blk[:, 4:16])
  d, dmin = _f16(blk, 0), _f16(blk, 2)
  return ((d * sc)[:, :, None] * _k_nibbles(blk[:, 16:144]) - (dmin * mn)[:, :, None]).reshape(-1, 256)

def _q5_k(blk: Any) -> Any:
  import numpy as np
  sc, mn = _k_scales_mins(blk[:, 4:16])
  d, dmin = _f16(blk, 0), _f16(blk, 2)
  high = (blk[:, None, 16:48] >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1   # bit i of byte l: sub-block i, element l
  q = _k_nibbles(blk[:, 48:176]) | (high << 4)
  return ((d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]).reshape(-1, 256)

def _crumbs(qs: Any) -> Any:
  """(nblocks, 16, 16) 2-bit values: each 32 bytes hold four groups of 32 (bits 0-1 first), split in sub-blocks of 16."""
  import numpy as np
  return ((qs.reshape(-1, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)) & 3).reshape(-1, 16, 16)

def _q6_k(blk: Any) -> Any:
  import numpy as np
  # per half of 128: 64 bytes of low nibbles (two groups of 32, each byte's low then high nibble = four groups) and
  # 32 bytes holding each of the four groups' top two bits
  low = (blk[:, 0:128].reshape(-1, 2, 1, 2, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1, 1)) & 0x0F
  high = (blk[:, 128:192].reshape(-1, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)) & 3
  q = (low.reshape(-1, 2, 4, 32) | (high << 4)).astype(np.int8) - 32
  sc = blk[:, 192:208].copy().view(np.int8).astype(np.float32)
  return ((_f16(blk, 208) * sc)[:, :, None] * q.reshape(-1, 16, 16)).reshape(-1, 256)

def _q2_k(blk: Any) -> Any:
  s = blk[:, 0:16]
  d, dmin = _f16(blk, 80), _f16(blk, 82)
  return ((d * (s & 0x0F))[:, :, None] * _crumbs(blk[:, 16:80]) - (dmin * (s >> 4))[:, :, None]).reshape(-1, 256)

def _q3_k(blk: Any) -> Any:
  import numpy as np
  s = blk[:, 96:108]
  # sixteen 6-bit scales: low nibbles in bytes 0-7 (sub-blocks 0-7 low, 8-15 high nibble), top two bits in bytes 8-11
  low = np.concatenate([s[:, 0:8] & 0x0F, s[:, 0:8] >> 4], axis=1)
  top = (s[:, None, 8:12] >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 4, 1)) & 3   # (nblocks, 4, 4): [i // 4, i % 4]
  sc = (low | (top.reshape(-1, 16) << 4)).astype(np.float32) - 32
  # the hmask bit (one bit per group of 32, bit 4 * half + group of byte l) set means +0, clear means -4
  hbit = (blk[:, None, 0:32] >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
  q = _crumbs(blk[:, 32:96]).astype(np.int8) - 4 * (1 - hbit.reshape(-1, 16, 16).astype(np.int8))
  return ((_f16(blk, 108) * sc)[:, :, None] * q).reshape(-1, 256)

class GGMLType:
  """One tensor type: `dtype` for the plain types (read as they are), else the dequantizer of its blocks."""
  def __init__(self, name: str, block: int, nbytes: int, dtype: DType | None = None, dequant: Callable[[Any], Any] | None = None):
    self.name, self.block, self.nbytes, self.dtype, self.dequant = name, block, nbytes, dtype, dequant

GGML_TYPES: dict[int, GGMLType] = {
  0: GGMLType("F32", 1, 4, dtypes.float32), 1: GGMLType("F16", 1, 2, dtypes.float16), 30: GGMLType("BF16", 1, 2, dtypes.bfloat16),
  28: GGMLType("F64", 1, 8, dtypes.float64), 24: GGMLType("I8", 1, 1, dtypes.int8), 25: GGMLType("I16", 1, 2, dtypes.int16),
  26: GGMLType("I32", 1, 4, dtypes.int32), 27: GGMLType("I64", 1, 8, dtypes.int64),
  2: GGMLType("Q4_0", 32, 18, dequant=_q4_0), 3: GGMLType("Q4_1", 32, 20, dequant=_q4_1), 6: GGMLType("Q5_0", 32, 22, dequant=_q5_0),
  7: GGMLType("Q5_1", 32, 24, dequant=_q5_1), 8: GGMLType("Q8_0", 32, 34, dequant=_q8_0),
  10: GGMLType("Q2_K", 256, 84, dequant=_q2_k), 11: GGMLType("Q3_K", 256, 110, dequant=_q3_k),
  12: GGMLType("Q4_K", 256, 144, dequant=_q4_k), 13: GGMLType("Q5_K", 256, 176, dequant=_q5_k),
  14: GGMLType("Q6_K", 256, 210, dequant=_q6_k),
}

# *** the loader ***

def _read_header(r: _Reader) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int, int]], int]:
  if len(r.buf) < 4 or bytes(r.buf[0:4]) != b"GGUF": raise r.fail(f"bad magic {bytes(r.buf[0:4])!r}, expected b'GGUF'")
  r.pos = 4
  version = r.unpack("<I", "the version")
  if version not in (2, 3):
    if version & 0xFFFF == 0 and (version >> 16) != 0: raise r.fail("it is big-endian (byte-swapped version); only little-endian is read")
    raise r.fail(f"version {version} is not supported (GGUF v2 and v3 are)")
  n_tensors, n_kv = r.unpack("<Q", "the tensor count"), r.unpack("<Q", "the metadata count")
  if n_tensors > len(r.buf) or n_kv > len(r.buf): raise r.fail(f"counts ({n_tensors} tensors, {n_kv} keys) larger than the file")
  kv: dict[str, Any] = {}
  for i in range(n_kv):
    key = r.string(f"metadata key #{i}")
    kv[key] = r.value(r.unpack("<I", f"the value type of {key!r}"), f"the value of {key!r}")
  infos = []
  for i in range(n_tensors):
    name = r.string(f"tensor name #{i}")
    n_dims = r.unpack("<I", f"the dimension count of {name!r}")
    if not 1 <= n_dims <= GGML_MAX_DIMS: raise r.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {GGML_MAX_DIMS} allowed)")
    dims = tuple(r.unpack("<Q", f"a dimension of {name!r}") for _ in range(n_dims))
    infos.append((name, dims, r.unpack("<I", f"the type of {name!r}"), r.unpack("<Q", f"the data offset of {name!r}")))
  align = kv.get("general.alignment", 32)
  if not isinstance(align, int) or not is_pow2(align): raise r.fail(f"general.alignment is {align!r}, not a power of two")
  return kv, infos, align

def gguf_load(src: Source, device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
  """(metadata, tensors) of a GGUF v2/v3 file: a path (memory-mapped), its bytes, or a uint8 Tensor of them.

  Quantized tensors are dequantized to float32; plain ones keep their type. GGUF lists dimensions fastest first, so a
  tensor with dims [ne0, ne1] comes back with shape (ne1, ne0), row-major as numpy and torch hold it."""
  import numpy as np
  buf, fn = open_source(src, "GGUF")
  r = _Reader(buf, fn)
  kv, infos, align = _read_header(r)
  data_start = round_up(r.pos, align)
  tensors: dict[str, Tensor] = {}
  for name, dims, type_id, offset in infos:
    if (tt := GGML_TYPES.get(type_id)) is None:
      raise r.fail(f"tensor {name!r} has ggml type {type_id}, which is unknown or not supported (supported: "
                   f"{', '.join(t.name for t in GGML_TYPES.values())})")
    if dims[0] % tt.block: raise r.fail(f"tensor {name!r} ({tt.name}) has {dims[0]} elements per row, not a multiple of its block of {tt.block}")
    nbytes = prod(dims) // tt.block * tt.nbytes
    start = data_start + offset
    if offset % align or start + nbytes > len(buf):
      raise r.fail(f"tensor {name!r} ({tt.name} {list(dims)}, {nbytes} bytes) has data offset {offset}, which is "
                   + (f"not a multiple of the alignment {align}" if offset % align else f"past the end of the {len(buf)}-byte file"))
    shape = tuple(reversed(dims))
    if tt.dtype is not None:
      arr = np.frombuffer(buf, dtype=_NP_LE[tt.dtype], count=prod(dims), offset=start)
      tensors[name] = host_tensor(arr.astype(arr.dtype.newbyteorder("=")).reshape(shape), tt.dtype, device)
    else:
      assert tt.dequant is not None
      blocks = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=start).reshape(-1, tt.nbytes)
      tensors[name] = Tensor(tt.dequant(blocks).astype(np.float32, copy=False).reshape(shape), device=device, requires_grad=False)
  return kv, tensors

# the plain types as numpy reads them, little-endian as GGUF stores them (bf16 as its u16 bits)
_NP_LE = {dtypes.float32: "<f4", dtypes.float16: "<f2", dtypes.bfloat16: "<u2", dtypes.float64: "<f8", dtypes.int8: "<i1",
          dtypes.int16: "<i2", dtypes.int32: "<i4", dtypes.int64: "<i8"}
