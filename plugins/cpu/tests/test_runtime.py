"""The CPU runtime: aligned host memory with zero-copy views, kernels loaded from memory, and make_device."""
import ctypes, os
import numpy as np
import pytest
from core.device.allocator import BufferSpec
from core.device.target import Target
from plugin_cpu.runtime import CPUAllocator, CPUProgram, make_device
from plugin_cpu.compiler import CCompiler
from plugin_cpu.c_renderer import CPUCRenderer
from plugin_cpu.renderer import CPULLVMRenderer

SRC = "void k(int* restrict data0, int* restrict data1, int n) { for (int i = 0; i < n; i++) data0[i] = data1[i] * %d; }\n"

@pytest.fixture(scope="module")
def cc(): return CCompiler()

def test_alloc_is_64_byte_aligned():
  al = CPUAllocator("CPU")
  for size in (1, 3, 64, 1000, 4097):
    b = al.alloc(size, BufferSpec(nolru=True))
    assert ctypes.addressof(b) % 64 == 0 and ctypes.sizeof(b) == size

def test_copyin_copyout_and_zero_copy_views():
  al = CPUAllocator("CPU")
  b = al.alloc(16)
  al._copyin(b, memoryview(bytes(range(16))))   # read-only source
  view = al._offset(b, 8, 4)
  mv = al._as_buffer(view)
  assert bytes(mv) == bytes(range(4, 12))
  mv[0] = 200                                   # writes through to the base: no copy
  out = bytearray(16)
  al._copyout(memoryview(out), b)
  assert out[4] == 200 and out[5] == 5
  al._copyin(b, memoryview(bytearray(b"\x07" * 16)))  # a writable source
  assert bytes(al._as_buffer(b)) == b"\x07" * 16

def test_view_keeps_base_alive():
  al = CPUAllocator("CPU")
  b = al.alloc(32, BufferSpec(nolru=True))
  al._copyin(b, memoryview(b"\x05" * 32))
  view = al._offset(b, 8, 8)
  del b
  import gc
  gc.collect()
  assert bytes(al._as_buffer(view)) == b"\x05" * 8

def test_program_loads_from_memory_and_runs(cc):
  prg = CPUProgram("k", cc.compile(SRC % 3))
  maps = open("/proc/self/maps").read()
  assert "/memfd:core_k" in maps   # mapped from an anonymous memfd, not from a file on disk
  al = CPUAllocator("CPU")
  out, inp = al.alloc(16), al.alloc(16)
  al._copyin(inp, memoryview(np.array([1, 2, 3, 4], np.int32)))
  t = prg(out, inp, vals=(3,), wait=True)
  assert isinstance(t, float) and t >= 0
  res = np.frombuffer(al._as_buffer(out), np.int32)
  np.testing.assert_array_equal(res[:3], [3, 6, 9])
  assert prg(out, inp, vals=(4,)) is None

def test_programs_with_one_name_do_not_collide(cc):
  # the loader caches libraries by path: two live programs must get distinct /proc/self/fd paths, and a freed one must unload
  al = CPUAllocator("CPU")
  out, inp = al.alloc(4), al.alloc(4)
  al._copyin(inp, memoryview(np.array([5], np.int32)))
  def result(prg):
    prg(out, inp, vals=(1,))
    return int(np.frombuffer(al._as_buffer(out), np.int32)[0])
  p2, p7 = CPUProgram("k", cc.compile(SRC % 2)), CPUProgram("k", cc.compile(SRC % 7))
  assert (result(p2), result(p7)) == (10, 35)
  fd = p2.fd
  del p2
  p11 = CPUProgram("k", cc.compile(SRC % 11))
  assert p11.fd == fd and result(p11) == 55 and result(p7) == 35

def test_missing_kernel_name(cc):
  with pytest.raises(RuntimeError, match="no kernel named 'nope'"): CPUProgram("nope", cc.compile(SRC % 1))

@pytest.mark.parametrize("ren, cls", [("C", CPUCRenderer), ("LLVM", CPULLVMRenderer)])
def test_make_device_picks_the_renderer(ren, cls):
  dev = make_device("CPU", Target(device="CPU", renderer=ren))
  assert type(dev.renderer) is cls and dev.device == "CPU" and dev.renderer.device == "CPU"
  assert dev.renderer.has_local is False and dev.renderer.global_max is None
  assert dtypes_fp8_unsupported(dev.renderer)
  dev.synchronize()

def test_make_device_default_is_llvm_when_llvmlite_is_installed(monkeypatch):
  import plugin_cpu.runtime as rt
  from plugin_cpu.renderer import CPULLVMRenderer
  assert type(make_device("CPU").renderer) is (CPULLVMRenderer if rt.llvmlite_available() else CPUCRenderer)
  monkeypatch.setattr(rt, "llvmlite_available", lambda: False)
  assert type(make_device("CPU", Target(device="CPU")).renderer) is CPUCRenderer

def test_make_device_unknown_renderer():
  with pytest.raises(ValueError, match="no renderer 'PTX'.*C"): make_device("CPU", Target(device="CPU", renderer="PTX"))

def dtypes_fp8_unsupported(r) -> bool:
  from core.ir.dtype import dtypes
  return all(d not in r.supported_dtypes for d in dtypes.fp8s) and dtypes.float16 in r.supported_dtypes

def test_in_memory_load_writes_no_file(cc, tmp_path, monkeypatch):
  lib = cc.compile(SRC % 5)
  monkeypatch.setenv("TMPDIR", str(tmp_path))
  before = set(os.listdir(tmp_path))
  CPUProgram("k", lib)
  assert set(os.listdir(tmp_path)) == before
