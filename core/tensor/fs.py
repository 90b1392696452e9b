"""Content-addressed storage of bytes: `t.fs_store()` puts a uint8 tensor's bytes in a local store as a tree of hashed chunks
and returns the root hash; `Tensor(root).fs_load(size)` gets them back, checking every chunk against its hash.

The store is a folder of files, each one chunk of `Tensor.CHUNK_SIZE` bytes named by the hex of its hash: CORE_FS_DIR, or
`fs` in core's cache folder (core.helpers.cache_dir). The data, zero-padded to whole chunks, is level 0; the 16-byte hashes of
one level's chunks, concatenated and zero-padded, are the next level's data, until a level is one chunk: its hash is the root.
Equal chunks are stored once, so storing the same bytes again (or a file that shares chunks with another) costs nothing.

The hash is BLAKE2b with a 16-byte digest (hashlib.blake2b(digest_size=16)): it is one of hashlib's guaranteed algorithms, so
every Python build has it without OpenSSL; it produces a 16-byte digest natively (no truncation of a longer one); and it is the
fastest of the guaranteed cryptographic hashes in CPython, so hashing costs little next to the disk."""
from __future__ import annotations
import os, pathlib
from typing import TYPE_CHECKING, ClassVar
from core.helpers import blake2b, cache_dir
from core.ir.dtype import dtypes

if TYPE_CHECKING:
  from core.tensor.tensor import Tensor

HASH_BYTES = 16

class CorruptChunk(ValueError):
  """A stored chunk whose bytes don't hash to its name: it is never returned."""

def chunk_hash(data: bytes | memoryview) -> bytes: return blake2b(data, digest_size=HASH_BYTES).digest()

def store_dir() -> pathlib.Path:
  """Where chunks live: CORE_FS_DIR, else <core's cache folder>/fs."""
  return pathlib.Path(d) if (d := os.getenv("CORE_FS_DIR")) else cache_dir() / "fs"

def _check_chunk_size(n: int) -> int:
  if not isinstance(n, int) or n < 2 * HASH_BYTES or n % HASH_BYTES:
    raise ValueError(f"Tensor.CHUNK_SIZE must be an int multiple of {HASH_BYTES} and at least {2 * HASH_BYTES}, got {n!r}")
  return n

def _write_chunk(d: pathlib.Path, chunk: memoryview | bytes) -> bytes:
  h = chunk_hash(chunk)
  path = d / h.hex()
  if not path.exists():
    # a temporary file renamed into place: a reader (or a crash) never sees half a chunk
    tmp = d / f".{h.hex()}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    with open(tmp, "wb") as f: f.write(chunk)
    os.replace(tmp, path)
  return h

def _read_chunk(d: pathlib.Path, h: bytes, size: int) -> bytes:
  path = d / h.hex()
  try: data = path.read_bytes()
  except FileNotFoundError: raise FileNotFoundError(f"fs_load: chunk {h.hex()} is not in the store {d} (stored elsewhere, or removed)") from None
  if len(data) != size or chunk_hash(data) != h:
    raise CorruptChunk(f"fs_load: chunk {path} is corrupted (its bytes hash to {chunk_hash(data).hex()}); remove it and store the data again")
  return data

def _padded(data: bytes | memoryview, chunk: int) -> bytes:
  return bytes(data) + bytes(-len(data) % chunk or (chunk if not len(data) else 0))

def level_counts(size: int, chunk: int) -> list[int]:
  """Chunks per level, data first, for `size` bytes: the last level has one chunk, whose hash is the root."""
  counts = [max(1, -(-size // chunk))]
  while counts[-1] > 1: counts.append(-(-counts[-1] * HASH_BYTES // chunk))
  return counts

def store_bytes(data: bytes | memoryview, chunk: int) -> bytes:
  """Stores `data` as a hash tree of chunks; returns the root hash."""
  d = store_dir()
  d.mkdir(parents=True, exist_ok=True)
  level = _padded(data, chunk)
  while True:
    hashes = [_write_chunk(d, memoryview(level)[i:i + chunk]) for i in range(0, len(level), chunk)]
    if len(hashes) == 1: return hashes[0]
    level = _padded(b"".join(hashes), chunk)

def load_bytes(root: bytes, size: int, chunk: int) -> bytes:
  """The `size` bytes under hash tree `root`, every chunk checked against its hash on the way down."""
  if len(root) != HASH_BYTES: raise ValueError(f"fs_load: a root hash is {HASH_BYTES} bytes, got {len(root)}")
  if size < 0: raise ValueError(f"fs_load: size must be >= 0, got {size}")
  d = store_dir()
  hashes = [root]
  counts = level_counts(size, chunk)
  for lvl in reversed(range(len(counts))):
    data = b"".join(_read_chunk(d, h, chunk) for h in hashes)
    if lvl == 0: return data[:size]
    n = counts[lvl - 1]
    hashes = [data[i * HASH_BYTES:(i + 1) * HASH_BYTES] for i in range(n)]
  raise AssertionError("unreachable: level 0 returns")

class StoreMixin:
  """fs_store/fs_load on Tensor. CHUNK_SIZE: bytes per stored chunk (a multiple of 16, at least 32); a tree stored with one
  size is read back with the same."""
  CHUNK_SIZE: ClassVar[int] = 1 << 20

  def fs_store(self: Tensor) -> Tensor:  # type: ignore[misc]
    """Writes this uint8 tensor's bytes (row-major) into the local content-addressed store (CORE_FS_DIR, default
    <cache>/fs) and returns the 16-byte root hash as a uint8 tensor on this tensor's device. Read back with
    `hash.fs_load(self.numel())`."""
    from core.tensor.tensor import Tensor
    if self.dtype is not dtypes.uint8: raise TypeError(f"fs_store stores uint8 tensors, got {self.dtype}; bitcast or cast it first")
    root = store_bytes(self.data() if self.numel() else b"", _check_chunk_size(type(self).CHUNK_SIZE))
    return Tensor(root, device=self.device, requires_grad=False)

  def fs_load(self: Tensor, size: int) -> Tensor:  # type: ignore[misc]
    """The `size` bytes stored under this 16-byte uint8 root hash (from fs_store), as a uint8 tensor on this tensor's device
    (move it anywhere with .to(), a file included: .to("disk:<path>")). A chunk whose bytes don't match its hash raises
    CorruptChunk; a missing one FileNotFoundError."""
    from core.tensor.tensor import Tensor
    if self.dtype is not dtypes.uint8 or self.shape != (HASH_BYTES,):
      raise ValueError(f"fs_load needs the 16-byte uint8 root hash fs_store returned, got shape {self.shape} {self.dtype}")
    data = load_bytes(bytes(self.data()), size, _check_chunk_size(type(self).CHUNK_SIZE))
    return Tensor(data, device=self.device, requires_grad=False)
