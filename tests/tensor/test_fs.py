"""Content-addressed storage: fs_store writes a uint8 tensor's bytes as a hash tree of chunks, fs_load reads them back exactly
(to any device, or a file), and a corrupted or missing chunk raises instead of returning wrong bytes."""
import hashlib
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes
from core.tensor.fs import CorruptChunk, level_counts

@pytest.fixture
def store(tmp_path, monkeypatch):
  monkeypatch.setenv("CORE_FS_DIR", str(tmp_path / "store"))
  monkeypatch.setattr(Tensor, "CHUNK_SIZE", 64)   # small chunks: a few hundred bytes make a tree of three levels
  return tmp_path / "store"

def _bytes(n: int, seed: int = 0) -> np.ndarray: return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)

@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 64 * 4, 64 * 4 + 1, 1000])
def test_round_trip(store, n):
  data = _bytes(n, n)
  h = Tensor(data).fs_store()
  assert h.shape == (16,) and h.dtype is dtypes.uint8
  back = Tensor(bytes(h.data()), device="CPU").fs_load(n)
  assert back.dtype is dtypes.uint8 and back.shape == (n,)
  np.testing.assert_array_equal(back.numpy(), data)

def test_tree_layout_and_root_by_hand(store):
  # 200 bytes in 64-byte chunks: 4 data chunks, their 4 hashes (64 bytes) are one chunk whose hash is the root
  data = _bytes(200, 1)
  assert level_counts(200, 64) == [4, 1]
  def h(b: bytes) -> bytes: return hashlib.blake2b(b, digest_size=16).digest()
  padded = data.tobytes() + bytes(56)
  leaves = [h(padded[i:i + 64]) for i in range(0, 256, 64)]
  root = h(b"".join(leaves))
  assert bytes(Tensor(data).fs_store().data()) == root
  assert sorted(p.name for p in store.iterdir()) == sorted({x.hex() for x in leaves + [root]})

def test_three_levels_and_dedup(store):
  n = 64 * 9   # 9 data chunks -> 144 bytes of hashes = 3 chunks -> 1 chunk: three levels
  assert level_counts(n, 64) == [9, 3, 1]
  data = np.tile(_bytes(64, 2), 9)   # nine equal chunks are stored once
  h = Tensor(data).fs_store()
  np.testing.assert_array_equal(Tensor(bytes(h.data())).fs_load(n).numpy(), data)
  # one data chunk; level 1 holds nine equal hashes: chunks [h h h h], [h h h h] (equal, stored once) and [h 0 0 0]; the root
  assert len(list(store.iterdir())) == 1 + 2 + 1

def test_corrupted_chunk_is_detected_never_returned(store):
  data = _bytes(300, 3)
  h = Tensor(data).fs_store()
  victim = next(p for p in sorted(store.iterdir()))
  raw = bytearray(victim.read_bytes())
  raw[5] ^= 0xFF
  victim.write_bytes(bytes(raw))
  with pytest.raises(CorruptChunk, match=victim.name): Tensor(bytes(h.data())).fs_load(300).numpy()

def test_missing_chunk_raises(store):
  h = Tensor(_bytes(300, 4)).fs_store()
  for p in list(store.iterdir())[:1]: p.unlink()
  with pytest.raises((FileNotFoundError, CorruptChunk)): Tensor(bytes(h.data())).fs_load(300)

def test_load_to_a_file(store, tmp_path):
  data = _bytes(777, 5)
  h = Tensor(data).fs_store()
  out = tmp_path / "out.bin"
  Tensor(bytes(h.data()), device="CPU").fs_load(777).to(f"disk:{out}").realize()
  np.testing.assert_array_equal(np.fromfile(out, dtype=np.uint8), data)

def test_bad_arguments(store):
  with pytest.raises(TypeError, match="uint8"): Tensor([1.0, 2.0]).fs_store()
  with pytest.raises(ValueError, match="16-byte"): Tensor(bytes(8)).fs_load(4)
  with pytest.raises(ValueError, match="CHUNK_SIZE"):
    Tensor.CHUNK_SIZE = 40
    Tensor(bytes(8)).fs_store()

def test_default_store_is_in_the_cache_dir(monkeypatch, tmp_path):
  monkeypatch.delenv("CORE_FS_DIR", raising=False)
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path / "cache"))
  from core.tensor.fs import store_dir
  assert store_dir() == tmp_path / "cache" / "fs"
