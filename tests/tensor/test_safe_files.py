"""Hardened files: safetensors headers that lie are refused with a clear ValueError, loading maps the file (memory about the
tensors' size, not twice the file), saves keep the user's umask and leave no temporary file when killed with SIGTERM, and a
non-regular file in the compile cache is skipped without blocking."""
from __future__ import annotations
import json, os, pathlib, signal, struct, subprocess, sys, time
import numpy as np
import pytest
from core import Tensor
from core.tensor.nn.state import safe_load, safe_save

def write_raw(path: pathlib.Path, header: bytes | str, data: bytes = b"") -> pathlib.Path:
  h = header.encode() if isinstance(header, str) else header
  path.write_bytes(struct.pack("<Q", len(h)) + h + data)
  return path

GOOD = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}

@pytest.mark.parametrize("header, says", [
  ({"a": {"dtype": "F32", "shape": [2]}}, "must have exactly dtype, shape and data_offsets"),
  ({"a": {**GOOD, "extra": 1}}, "must have exactly dtype, shape and data_offsets"),
  ({"a": {**GOOD, "dtype": 7}}, "unknown dtype 7"),
  ({"a": {**GOOD, "dtype": "F33"}}, "unknown dtype 'F33'"),
  ({"a": {**GOOD, "shape": "2"}}, "not a list of non-negative ints"),
  ({"a": {**GOOD, "shape": [-2]}}, "not a list of non-negative ints"),
  ({"a": {**GOOD, "shape": [2.0]}}, "not a list of non-negative ints"),
  ({"a": {**GOOD, "data_offsets": [0]}}, "not \\[begin, end\\]"),
  ({"a": {**GOOD, "data_offsets": ["0", "8"]}}, "not \\[begin, end\\]"),
  ({"a": {**GOOD, "data_offsets": [8, 16]}}, "don't fit its size or the 8-byte data section"),
  ({"a": {**GOOD, "data_offsets": [0, 4]}}, "don't fit its size"),
  ({"a": GOOD, "b": {**GOOD, "shape": [1], "data_offsets": [4, 8]}}, "'a' and 'b' overlap"),
  ({"__metadata__": {"k": 1}, "a": GOOD}, "__metadata__ must map names to strings"),
  ([1, 2], "must be a JSON object"),
  ("a" * 3, "not valid JSON"),
])
def test_malformed_headers_are_refused(tmp_path, header, says):
  f = write_raw(tmp_path / "bad.safetensors", header if isinstance(header, str) else json.dumps(header), np.zeros(2, np.float32).tobytes())
  with pytest.raises(ValueError, match=says): safe_load(f)

def test_duplicate_names_deep_nesting_and_huge_lengths_are_refused(tmp_path):
  f = write_raw(tmp_path / "dup.safetensors", '{"a": %s, "a": %s}' % (json.dumps(GOOD), json.dumps(GOOD)), bytes(8))
  with pytest.raises(ValueError, match=r"duplicate names \['a'\]"): safe_load(f)
  f = write_raw(tmp_path / "deep.safetensors", "[" * 100000 + "]" * 100000)
  with pytest.raises(ValueError, match="nests too deeply|must be a JSON object"): safe_load(f)
  (tmp_path / "long.safetensors").write_bytes(struct.pack("<Q", 1 << 60) + b"{}")
  with pytest.raises(ValueError, match="runs past the end"): safe_load(tmp_path / "long.safetensors")

def test_round_trip_and_order_independent_offsets(tmp_path):
  a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False])
  safe_save({"a": Tensor(a), "b": Tensor(b), "e": Tensor(np.zeros((0, 4), np.float32))}, tmp_path / "m.safetensors")
  got = safe_load(tmp_path / "m.safetensors")
  np.testing.assert_array_equal(got["a"].numpy(), a)
  np.testing.assert_array_equal(got["b"].numpy(), b)
  assert got["e"].shape == (0, 4)

@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_saves_keep_the_umask(tmp_path, mask, mode):
  old = os.umask(mask)
  try: safe_save({"x": Tensor([1.0, 2.0])}, tmp_path / "x.safetensors")
  finally: os.umask(old)
  assert (tmp_path / "x.safetensors").stat().st_mode & 0o777 == mode

def test_loading_costs_the_tensors_memory_not_the_file_twice(tmp_path):
  # 160 MiB in 20 tensors, loaded in a fresh process: its peak RSS grows by about the data's size (the pages of the mapping are
  # dropped after each tensor is copied), where reading the file whole and converting cost 3-4x
  n = 20
  safe_save({f"w{i}": Tensor(np.full(2 * 1024 * 1024, i, np.float32)) for i in range(n)}, tmp_path / "big.safetensors")
  size = (tmp_path / "big.safetensors").stat().st_size
  code = f"""
from core import Tensor
from core.tensor.nn.state import safe_load
def peak(): return next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
(Tensor([1.0]) + 1).realize()   # the device and its kernels, before the baseline
base = peak()   # VmHWM: this process's own high-water mark (ru_maxrss would carry over the parent's from before exec)
w = safe_load({str(tmp_path / 'big.safetensors')!r})
Tensor.realize(*w.values())
grew = peak() - base   # before the checks below: their kernels may be the first compile, and LLVM's own memory is not the load's
assert all(w[f"w{{i}}"][-1].item() == i for i in range({n}))
print(grew)
"""
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  grew = int(r.stdout.strip().splitlines()[-1])
  assert grew < 1.25 * size, f"peak RSS grew {grew / 2**20:.0f} MiB loading a {size / 2**20:.0f} MiB file"

def test_a_save_killed_by_sigterm_leaves_no_temporary_file(tmp_path):
  code = f"""
import numpy as np
from core import Tensor
from core.tensor.nn.state import safe_save
ts = {{f"w{{i}}": Tensor(np.full(8 * 1024 * 1024, i, np.float32)) for i in range(12)}}
print("saving", flush=True)
safe_save(ts, {str(tmp_path / 'm.safetensors')!r})
"""
  p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
  assert p.stdout is not None and p.stdout.readline().strip() == "saving"
  deadline = time.monotonic() + 60
  while not list(tmp_path.glob(".m.safetensors.*.tmp")) and p.poll() is None and time.monotonic() < deadline: time.sleep(0.001)
  p.send_signal(signal.SIGTERM)
  assert p.wait(timeout=60) in (-signal.SIGTERM, 0)   # 0: it had finished before the signal came
  assert not list(tmp_path.glob("*.tmp")), "a temporary file was left behind"
  if (tmp_path / "m.safetensors").exists(): assert len(safe_load(tmp_path / "m.safetensors")) == 12

def test_a_fifo_in_the_compile_cache_is_skipped_not_opened(tmp_path):
  code = f"""
import os
os.environ["CORE_CACHE_DIR"] = {str(tmp_path)!r}
from core.device.compiler import Compiler
class Echo(Compiler):
  def compile(self, src): return src.encode()
c = Echo("echo_test")
path = c.cache_path("hello")
path.parent.mkdir(parents=True, exist_ok=True)
os.mkfifo(path)
print(c.compile_cached("hello"), c.cache_misses)
"""
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == ["b'hello'", "1"]
