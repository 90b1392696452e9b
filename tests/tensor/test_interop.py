"""Zero-copy interop: numpy views of host memory (kept alive, read-only, copies where core rewrites the memory), DLPack both
ways (numpy always, torch when installed), and tensors over foreign pointers."""
from __future__ import annotations
import gc
import numpy as np
import pytest
from core.testing.helpers import ci_run
from core import Tensor, Jit
from core.device.registry import Device

@pytest.fixture
def cpu() -> str:
  # zero-copy needs a device whose memory is host memory: the CPU plugin, which the core job installs (there it must import)
  if not ci_run(): pytest.importorskip("plugin_cpu", reason="zero-copy needs the CPU plugin's host memory")
  return "CPU"

def test_asarray_is_numeric():
  t = Tensor([[1, 2], [3, 4]], dtype="int32")
  a = np.asarray(t)
  assert a.dtype == np.int32 and a.tolist() == [[1, 2], [3, 4]]
  assert np.asarray(t, dtype=np.float64).dtype == np.float64 and np.array(t + 1).tolist() == [[2, 3], [4, 5]]
  with pytest.raises(ValueError, match="needs a copy"): np.asarray(t, dtype=np.float32, copy=False)
  assert np.asarray(t, copy=True).flags.writeable

def test_numpy_is_a_read_only_view_of_host_memory(cpu):
  t = (Tensor(np.arange(8, dtype=np.float32), device=cpu) * 3).realize()
  a, b = t.numpy(), t.numpy()
  assert np.shares_memory(a, b) and not a.flags.writeable and a.tolist() == [3.0 * i for i in range(8)]
  with pytest.raises(ValueError, match="read-only"): a[0] = 1

def test_a_numpy_view_keeps_its_memory_from_being_reused(cpu):
  a = (Tensor(np.full(4096, 7, np.float32), device=cpu) + 1).numpy()
  gc.collect()
  # same-size buffers come from the allocator's cache of freed blocks: none of them may be the viewed one
  others = [(Tensor(np.full(4096, i, np.float32), device=cpu) * 1).realize() for i in range(8)]
  assert (a == 8).all() and len(others) == 8

def test_jit_outputs_are_copied_because_replays_rewrite_them(cpu):
  @Jit
  def f(x): return (x * 2).realize()
  got = [f(Tensor(np.full(16, i, np.float32), device=cpu)).numpy() for i in range(4)]
  assert [g[0] for g in got] == [0, 2, 4, 6]

def test_numpy_of_the_python_device_is_a_view_too():
  # core's PYTHON device keeps buffers in numpy arrays: host memory as well (devices without a host view copy)
  t = (Tensor(np.arange(5, dtype=np.int32), device="PYTHON") + 1).realize()
  a = t.numpy()
  assert a.tolist() == [1, 2, 3, 4, 5] and not a.flags.writeable and np.shares_memory(a, t.numpy())

def test_dlpack_to_numpy_shares_memory(cpu):
  t = (Tensor(np.arange(6, dtype=np.float32), device=cpu) * 2).realize()
  assert t.__dlpack_device__() == (1, 0)
  a = np.from_dlpack(t)
  assert a.tolist() == [0, 2, 4, 6, 8, 10] and np.shares_memory(a, t.numpy())

def test_from_dlpack_wraps_numpy_memory_without_a_copy(cpu):
  src = np.arange(6, dtype=np.int32).reshape(2, 3)
  t = Tensor.from_dlpack(src, device=cpu)
  assert t.shape == (2, 3) and t.dtype.name == "int32" and (t + 1).tolist() == [[1, 2, 3], [4, 5, 6]]
  src[0, 0] = 100   # the tensor is a view of src's memory
  assert (t * 1).tolist()[0][0] == 100
  del src
  gc.collect()
  assert (t + 0).tolist()[1] == [3, 4, 5]   # the buffer keeps the source array alive
  strided = Tensor.from_dlpack(np.arange(10, dtype=np.float32)[::2], device=cpu)   # not contiguous: copied
  assert strided.tolist() == [0, 2, 4, 6, 8]

def test_dlpack_with_torch(cpu):
  torch = pytest.importorskip("torch")
  t = (Tensor(np.arange(4, dtype=np.float32), device=cpu) + 1).realize()
  tt = torch.from_dlpack(t)
  assert tt.tolist() == [1, 2, 3, 4]
  back = Tensor.from_dlpack(torch.arange(5, dtype=torch.float32) * 3, device=cpu)
  assert back.tolist() == [0, 3, 6, 9, 12]

def test_from_blob(cpu):
  src = np.arange(12, dtype=np.float32)
  t = Tensor.from_blob(src.ctypes.data, (3, 4), dtype="float32", device=cpu)
  assert (t.sum(1)).tolist() == [6.0, 22.0, 38.0] and t.device == Device.canonicalize(cpu)
  src[:] = 1
  assert (t * 1).sum().item() == 12.0
  with pytest.raises(ValueError, match="ptr must be a positive int"): Tensor.from_blob(0, (1,))
  with pytest.raises(ValueError, match="shape must be non-negative ints"): Tensor.from_blob(src.ctypes.data, (-1,))
  with pytest.raises(ValueError, match="PYTHON can't wrap host memory"): Tensor.from_blob(src.ctypes.data, (2,), device="PYTHON")

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                   np.int64, np.uint64, np.bool_])
def test_tensor_from_ndarray_copies_its_values(dtype):
  from core.tensor.creation import ndarray_uop
  rng = np.random.default_rng(3)
  base = (rng.standard_normal((3, 4, 5)) * 50).astype(dtype)
  # contiguous arrays (a 0-d one too) take the short way, the others the general conversion: all copied, values and dtype kept
  cases = [(lambda b: b, True), (lambda b: b[1], True), (lambda b: np.array(b[0, 0, 0]), True), (lambda b: b[:, ::2], False),
           (np.asfortranarray, False), (lambda b: b[:0], False), (lambda b: np.frombuffer(b.tobytes(), dtype=dtype).reshape(b.shape), True),
           (lambda b: b[::-1, :, ::-2], False), (lambda b: b.reshape(-1)[:7], True), (lambda b: np.zeros((0, 3), b.dtype), False),
           (lambda b: b.astype(b.dtype.newbyteorder(">")), np.dtype(dtype).itemsize == 1)]   # big-endian: 1-byte dtypes have no byte order
  for make, short in cases:
    a = make(base.copy())
    assert (ndarray_uop(a, Device.DEFAULT) is not None) == short
    want = a.copy()
    t = Tensor(a)
    if a.flags.writeable: a[...] = 0   # the tensor holds its own copy
    got = t.numpy()
    assert got.dtype == want.dtype.newbyteorder("=") and got.shape == want.shape   # held in native byte order
    np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(Tensor(base, dtype="float32").numpy(), base.astype(np.float32))

def test_numpy_of_a_tensor_with_a_symbolic_shape_reads_its_current_size():
  from core.ir.ops import UOp
  v = UOp.variable("n", 1, 8)
  t = Tensor(np.arange(8, dtype=np.int32))
  assert t.reshape(8)[:v.bind(3)].numpy().tolist() == [0, 1, 2]

def test_numpy_on_a_compile_only_device_reads_zeros():
  # the NULL device runs nothing and copies nothing out: .numpy() gives zeros, never whatever the heap held before
  for n in (8, 1024, 4096):
    t = Tensor(np.arange(n, dtype=np.float32), device="NULL") * 3 + 1
    t.realize()
    np.full(n, 7, dtype=np.float32)   # freed at once: the heap block an uninitialized array would reuse holds 7s
    got = t.numpy()
    assert got.shape == (n,) and got.dtype == np.float32 and not got.any()

def test_tensor_from_ndarray_is_one_buffer_and_one_copy(monkeypatch):
  """The short way makes a BUFFER node and its reshape, allocates once and copies once (straight to the allocator), and never
  reaches the general conversion: a Jit fed Tensor(x) pays this every call."""
  import core.tensor.tensor as tensor_mod
  from core.ir.ops import Ops
  from core.engine.realize import buffer_of
  dev = Device[Device.DEFAULT]
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  from core.engine import realize as R
  R._host_pool.clear()   # from_host keeps dead tensors' buffers per shape: none left by earlier tests
  first = Tensor(a)   # first use: imports and per-dtype lookups; kept alive, so the next one can't take its buffer
  allocs, copies = [], []
  real_alloc, real_copyin = dev.allocator.alloc, dev.allocator._copyin
  monkeypatch.setattr(dev.allocator, "alloc", lambda *args: allocs.append(args) or real_alloc(*args))
  monkeypatch.setattr(dev.allocator, "_copyin", lambda *args: copies.append(args) or real_copyin(*args))
  monkeypatch.setattr(tensor_mod, "_host_bytes", lambda *args: pytest.fail("the general conversion ran"))
  t = Tensor(a)
  assert [u.op for u in t.uop.toposort()] == [Ops.UNIQUE, Ops.DEVICE, Ops.BUFFER, Ops.RESHAPE] and t.uop.arg == (2, 3, 4)
  assert len(allocs) == 1 and allocs[0][0] == a.nbytes and len(copies) == 1
  assert buffer_of(t.uop.src[0]).is_allocated()
  a[0, 0, 0] = 99   # a copy, not a view of the array
  np.testing.assert_array_equal(t.numpy(), np.arange(24, dtype=np.float32).reshape(2, 3, 4))
  assert buffer_of(first.uop.src[0]) is not buffer_of(t.uop.src[0])
  assert len(Tensor(a[0, 0]).uop.toposort()) == 3   # 1-d: the BUFFER itself, no reshape

def test_tensor_from_read_only_and_unsupported_arrays():
  a = np.arange(6, dtype=np.int32)
  a.flags.writeable = False
  np.testing.assert_array_equal(Tensor(a).numpy(), np.arange(6, dtype=np.int32))
  with pytest.raises(TypeError, match="complex64 has no core equivalent"): Tensor(np.zeros(3, np.complex64))
