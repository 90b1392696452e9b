"""The native library built at install time (setup.py): found when its sources match, ignored when they don't, and enough for
DEV=CPU:LLVM on a machine with no C compiler at all."""
from __future__ import annotations
import ctypes, os, pathlib, subprocess, sys
import pytest
from core import helpers
from core.testing.helpers import missing_tool
from plugin_cpu import native

def require_prebuilt() -> pathlib.Path:
  if (path := native.prebuilt()) is None:
    # CI installs the plugin with a compiler present, so the library must have been built then
    missing_tool("this install has no prebuilt native library (no C compiler when it was installed, or setup.py's build_ext failed)")
  return path

def test_the_prebuilt_library_matches_the_installed_sources():
  path = require_prebuilt()
  assert path.parent == native.NATIVE_DIR.parent and path.name.startswith("_native")

def test_the_prebuilt_library_has_the_python_entries_of_the_library_in_use():
  require_prebuilt()
  from plugin_cpu import iface_hcq
  iface_hcq.native()
  entries = native.python_entries()
  assert entries is not None and entries.__file__ == str(native.prebuilt())
  # the same loaded library as ctypes': one process-wide fault count and queue registry
  faults = native.lib().cmdproc_faults
  faults.restype = ctypes.c_uint64
  assert entries.idle_clean(faults()) == bool(native.lib().cmdproc_pending() == 0)

def test_a_library_built_at_run_time_has_no_python_entries():
  # no Python headers on that path (native.NATIVE_FLAGS): the module init is not there, and the ctypes calls are used
  try: lib = native.NativeCompiler().compile_cached(native.sources_json(native.sources()))
  except native.CompileError: pytest.skip("no C compiler")
  # its dynamic symbol names, read from the bytes: loading it would keep a memfd's /proc/self/fd path taken for good
  assert b"PyInit__native" not in lib and b"cmdproc_submit_wait" in lib

def _copied_sources(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
  # the native sources copied to a folder the plugin then reads as its own (NATIVE_DIR), with its own cache folder
  (d := tmp_path / "native").mkdir()
  for p in native.NATIVE_DIR.iterdir():
    if p.suffix in (".c", ".h"): (d / p.name).write_bytes(p.read_bytes())
  monkeypatch.setattr(native, "NATIVE_DIR", d)
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path / "cache"))
  return d

def test_a_library_built_from_other_sources_is_not_used(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):
  lib = require_prebuilt()
  d = _copied_sources(tmp_path, monkeypatch)
  (tmp_path / lib.name).write_bytes(lib.read_bytes())   # beside the copy, as setup.py leaves it beside the sources
  monkeypatch.setattr(helpers, "SETTLE_NS", 0)   # the copy's stamp counts as settled: its hash is cached
  assert native.prebuilt() is not None and native.prebuilt() is not None   # the same sources, the second from the cache
  with open(d / "pool.c", "a") as f: f.write("\n/* edited after the install */\n")
  assert native.prebuilt() is None

def test_the_source_hash_is_cached_until_a_source_changes(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):
  d, hashed = _copied_sources(tmp_path, monkeypatch), []
  source_hash = native.source_hash
  monkeypatch.setattr(native, "source_hash", lambda: hashed.append(1) or source_hash())
  first = native.installed_source_hash()
  assert native.installed_source_hash() == first == source_hash() and len(hashed) == 2   # changed in the last SETTLE_NS: hashed
  monkeypatch.setattr(helpers, "SETTLE_NS", 0)
  assert native.installed_source_hash() == first and len(hashed) == 3   # hashed and written
  assert native.installed_source_hash() == first and len(hashed) == 3   # read back
  with open(d / "pool.c", "a") as f: f.write("\n")   # an edit, a new header, a removal: each hashed again
  assert native.installed_source_hash() == native.installed_source_hash() == source_hash() != first and len(hashed) == 4
  (d / "extra.h").write_text("#define X 1\n")
  assert native.installed_source_hash() == native.installed_source_hash() == source_hash() and len(hashed) == 5
  (d / "extra.h").unlink()
  (d / "pool.c").write_bytes((native_dir := pathlib.Path(native.__file__).parent / "native" / "pool.c").read_bytes())
  assert native.installed_source_hash() == first and len(hashed) == 6 and native_dir.exists()

def test_the_source_hash_is_setup_pys():
  # setup.py hashes json.dumps of the sources; the plugin writes the same text without importing json
  import hashlib, json
  files = native.sources()
  assert native.sources_json(files) == json.dumps(files, sort_keys=True)
  assert native.source_hash() == hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
  odd = {"b\"q": "x\\y\n\t\x01\x7f é \U0001f600 \u2028", "a": "", "A": "/*"}   # quotes, escapes, control, non-ASCII, surrogates, order
  assert native.sources_json(odd) == json.dumps(odd, sort_keys=True) and native.sources_json({}) == "{}"

def test_cpu_llvm_runs_without_a_c_compiler(tmp_path: pathlib.Path):
  require_prebuilt()
  # an empty PATH: no cc, gcc or clang to find; an empty kernel cache so every kernel is really compiled
  bindir = tmp_path / "bin"
  bindir.mkdir()
  env = {k: v for k, v in os.environ.items() if k not in ("CC", "DEV", "CORE_CACHE_DIR")}
  env.update(PATH=str(bindir), DEV="CPU:LLVM", CORE_CACHE_DIR=str(tmp_path / "cache"))
  code = "from core import Tensor; import numpy as np; print((Tensor(np.arange(1000, dtype=np.float32)) * 2).sum().item())"
  r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  assert float(r.stdout.strip()) == 999000.0
