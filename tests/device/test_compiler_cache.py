"""Compiler.compile_cached: disk cache keyed by compiler identity and source hash, atomic, self-healing, bypassable."""
from __future__ import annotations
import os, pathlib
import pytest
from core.device.compiler import Compiler
from core.helpers import Context

class Upper(Compiler):
  """A compiler whose output is easy to check, counting real compiles."""
  def __init__(self, key: str | None = "upper-1.0"):
    super().__init__(key)
    self.compiles = 0
  def compile(self, src: str) -> bytes:
    self.compiles += 1
    return src.upper().encode()

@pytest.fixture(autouse=True)
def cache_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path))
  return tmp_path

def test_second_compile_hits_the_cache_even_in_a_new_compiler(cache_dir: pathlib.Path) -> None:
  c = Upper()
  assert c.compile_cached("abc") == b"ABC" and c.compiles == 1 and c.cache_misses == 1
  c2 = Upper()
  assert c2.compile_cached("abc") == b"ABC" and c2.compiles == 0 and c2.cache_hits == 1
  entries = list((cache_dir / "compile" / "upper-1.0").iterdir())
  assert len(entries) == 1 and len(entries[0].name) == 64          # sha256 of the source, nothing else left behind

def test_key_includes_compiler_identity() -> None:
  Upper("upper-1.0").compile_cached("x")
  c = Upper("upper-2.0")
  assert c.compile_cached("x") == b"X" and c.compiles == 1

@pytest.mark.parametrize("damage", [b"", b"garbage", "truncate", "flip"])
def test_corrupt_entry_is_recompiled_and_repaired(cache_dir: pathlib.Path, damage) -> None:
  Upper().compile_cached("hello")
  (path,) = (cache_dir / "compile" / "upper-1.0").iterdir()
  data = path.read_bytes()
  path.write_bytes(data[:-2] if damage == "truncate" else data[:-1] + b"?" if damage == "flip" else damage)
  c = Upper()
  assert c.compile_cached("hello") == b"HELLO" and c.compiles == 1
  assert path.read_bytes() == data
  assert Upper().compile_cached("hello") == b"HELLO"

def test_unreadable_entry_is_recompiled(cache_dir: pathlib.Path) -> None:
  Upper().compile_cached("d")
  (path,) = (cache_dir / "compile" / "upper-1.0").iterdir()
  path.unlink()
  path.mkdir()                                # reading a directory fails with OSError; so does replacing it
  c = Upper()
  assert c.compile_cached("d") == b"D" and c.compiles == 1

def test_cachekey_none_and_disable_flag_bypass_the_cache(cache_dir: pathlib.Path) -> None:
  c = Upper(None)
  c.compile_cached("a"); c.compile_cached("a")  # noqa: E702
  assert c.compiles == 2 and not (cache_dir / "compile").exists()
  with Context(CORE_DISABLE_COMPILER_CACHE=1):
    d = Upper()
    d.compile_cached("a"); d.compile_cached("a")  # noqa: E702
    assert d.compiles == 2 and not (cache_dir / "compile").exists()

def test_keys_with_path_characters_stay_inside_the_cache(cache_dir: pathlib.Path) -> None:
  Upper("../../evil/clang 17").compile_cached("z")
  assert [p.name for p in (cache_dir / "compile").iterdir()] == ["_.._evil_clang_17"]
  Upper("..").compile_cached("z")
  assert sorted(p.name for p in (cache_dir / "compile").iterdir()) == ["_", "_.._evil_clang_17"]

def test_write_is_atomic_no_temp_files_left(cache_dir: pathlib.Path) -> None:
  c = Upper()
  for i in range(5): c.compile_cached(f"src{i}")
  names = os.listdir(cache_dir / "compile" / "upper-1.0")
  assert len(names) == 5 and not [n for n in names if n.endswith(".tmp")]
