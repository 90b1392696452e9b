"""The DISK device: files as tensors (disk:<path>), contiguous slices read back without kernels, the DEV grammar's DISK:<path>,
and safetensors loading through it with the file's bytes held once."""
import os, subprocess, sys
import numpy as np
import pytest
from core import Tensor
from core.ir.dtype import dtypes
from core.device.registry import Device
from core.device.target import parse_dev, parse_target
from core.tensor.nn.state import safe_save, safe_load

def test_device_names_keep_the_whole_path(tmp_path):
  p = tmp_path / "dir:with:colons" / "w.bin"
  assert Device.canonicalize(f"disk:{p}") == f"DISK:{p}"
  assert Device.canonicalize("disk:rel/x.bin") == "DISK:" + os.path.abspath("rel/x.bin")
  with pytest.raises(ValueError, match="needs a file"): Device.canonicalize("disk:")

def test_dev_grammar_takes_a_path_with_colons_and_slashes():
  t = parse_target("disk:/data/a:b/c.bin")
  assert (t.device, t.path, t.renderer, t.arch) == ("DISK", "/data/a:b/c.bin", None, None)
  assert str(t) == "DISK:/data/a:b/c.bin"
  assert [x.device for x in parse_dev("CPU;DISK:C:/x")] == ["CPU", "DISK"] and parse_dev("CPU;DISK:C:/x")[1].path == "C:/x"

def test_to_disk_writes_the_file_and_slices_read_back(tmp_path):
  p = tmp_path / "a.bin"
  a = np.arange(60, dtype=np.float32).reshape(5, 12)
  t = Tensor(a).to(f"disk:{p}").realize()
  assert t.device == f"DISK:{p}"
  np.testing.assert_array_equal(np.fromfile(p, dtype=np.float32).reshape(5, 12), a)
  np.testing.assert_array_equal(t.numpy(), a)
  np.testing.assert_array_equal(t[1:4].to("CPU").numpy(), a[1:4])
  np.testing.assert_array_equal(t[3].numpy(), a[3])
  np.testing.assert_array_equal(t.reshape(60)[7:29].reshape(2, 11).numpy(), a.reshape(60)[7:29].reshape(2, 11))
  np.testing.assert_array_equal((t[2:4].to("CPU") * 2).numpy(), a[2:4] * 2)
  assert t[1:1].to("CPU").numpy().shape == (0, 12)

def test_empty_maps_an_existing_file(tmp_path):
  p = tmp_path / "raw.bin"
  data = np.random.default_rng(0).integers(0, 255, 4096, dtype=np.uint8)
  data.tofile(p)
  t = Tensor.empty(4096, dtype=dtypes.uint8, device=f"disk:{p}")
  np.testing.assert_array_equal(t[1000:1100].to("CPU").numpy(), data[1000:1100])
  np.testing.assert_array_equal(t.reshape(64, 64)[10:12].numpy(), data.reshape(64, 64)[10:12])

def test_empty_makes_a_new_file_of_its_size(tmp_path):
  p = tmp_path / "new.bin"
  t = Tensor.empty(16, 4, dtype=dtypes.int32, device=f"disk:{p}")
  np.testing.assert_array_equal(t[2:5].numpy(), np.zeros((3, 4), np.int32))
  assert p.stat().st_size == 16 * 4 * 4

def test_strided_views_and_compute_say_move_it_first(tmp_path):
  t = Tensor(np.ones((4, 4), np.float32)).to(f"disk:{tmp_path / 'x.bin'}").realize()
  with pytest.raises(RuntimeError, match="can't run kernels.*to\\('CPU'\\)"): t[:, 1:3].to("CPU").numpy()
  with pytest.raises(RuntimeError, match="can't run kernels"): (t + 1).numpy()

def test_read_only_file_loads(tmp_path, monkeypatch):
  # a file this user may not write (simulated: root may write anything): opened read-only, reads work, writes say why
  p = tmp_path / "ro.bin"
  np.arange(8, dtype=np.int32).tofile(p)
  real_open = os.open
  def no_write(path, flags, *args):
    if os.fspath(path) == str(p) and flags & (os.O_RDWR | os.O_WRONLY): raise PermissionError(13, "Permission denied", str(p))
    return real_open(path, flags, *args)
  monkeypatch.setattr(os, "open", no_write)
  np.testing.assert_array_equal(Tensor.empty(8, dtype=dtypes.int32, device=f"disk:{p}")[2:6].numpy(), [2, 3, 4, 5])
  with pytest.raises(PermissionError, match="read-only"): Tensor(np.ones(8, np.int32)).to(f"disk:{p}").realize()
  with pytest.raises(PermissionError, match="smaller"): Tensor.empty(16, dtype=dtypes.int32, device=f"disk:{p}")[0:2].numpy()

def test_safe_load_to_disk_returns_views_of_the_file(tmp_path):
  a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(5, dtype=np.int16)
  fn = tmp_path / "m.safetensors"
  safe_save({"a": Tensor(a), "b": Tensor(b), "c": Tensor(np.zeros((0, 3), np.float32))}, fn)
  w = safe_load(fn, device=f"disk:{fn}")
  assert w["a"].device == f"DISK:{fn}" and w["a"].shape == (3, 4) and w["b"].dtype is dtypes.int16
  np.testing.assert_array_equal(w["a"][1:].to("CPU").numpy(), a[1:])
  np.testing.assert_array_equal(w["b"].numpy(), b)
  assert w["c"].shape == (0, 3)

def test_safe_load_of_one_big_tensor_holds_it_once(tmp_path):
  # one 96 MiB tensor: reading it through a mapping would keep the mapping's pages resident next to the copy (2x);
  # DISK reads the file straight into the device buffer
  fn = tmp_path / "big.safetensors"
  safe_save({"w": Tensor(np.arange(24 * 1024 * 1024, dtype=np.float32))}, fn)
  size = fn.stat().st_size
  code = f"""
import numpy as np
from core import Tensor
from core.tensor.nn.state import safe_load
def peak(): return next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
(Tensor([1.0]) + 1).realize()
base = peak()
w = safe_load({str(fn)!r}, device="CPU")["w"].realize()
grew = peak() - base   # before the checks below: their kernels may be the first compile, and LLVM's own memory is not the load's
assert w[-1].item() == float(np.float32(24 * 1024 * 1024 - 1)) and w[12345].item() == 12345
print(grew)
"""
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  grew = int(r.stdout.strip().splitlines()[-1])
  assert grew < 1.3 * size, f"peak RSS grew {grew / 2**20:.0f} MiB loading a {size / 2**20:.0f} MiB file"

def test_reads_without_preadv(tmp_path, monkeypatch):
  # platforms without os.preadv read with pread and copy
  data = np.arange(1000, dtype=np.int16)
  data.tofile(tmp_path / "p.bin")
  monkeypatch.delattr(os, "preadv", raising=False)
  np.testing.assert_array_equal(Tensor.empty(1000, dtype=dtypes.int16, device=f"disk:{tmp_path / 'p.bin'}")[100:900].numpy(), data[100:900])
