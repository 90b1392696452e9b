"""The CL interface: device discovery, build errors with the log and the failing line, the binary cache, buffers and
sub-buffers, kernels with events; and a whole Tensor program on DEV=CL+QCOM against numpy."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from core.device.allocator import BufferSpec
from core.device.compiler import CompileError

def test_device_info_is_read(clctx: Any) -> None:
  i = clctx.info
  assert i.name and i.version.startswith("OpenCL") and i.max_work_group >= 1 and i.base_align >= 4 and len(i.max_work_items) >= 3

def test_build_error_shows_the_log_and_the_failing_line(clctx: Any) -> None:
  from plugin_qcom.compiler import CLCompiler
  src = "__kernel void k(__global float* a) {\n  a[0] = 1.0f;\n  a[1] = undefined_name;\n}\n"
  with pytest.raises(CompileError) as e: CLCompiler(clctx).compile(src)
  msg = str(e.value)
  assert "build log" in msg and "undefined_name" in msg and ">    3 |   a[1] = undefined_name;" in msg

def test_binaries_are_cached_by_source(clctx: Any, tmp_path: Any, monkeypatch: Any) -> None:
  from plugin_qcom.compiler import CLCompiler
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  comp = CLCompiler(clctx)
  src = "__kernel void twice(__global int* a) { a[get_global_id(0)] *= 2; }\n"
  first = comp.compile_cached(src)
  assert comp.cache_path(src) is not None and comp.compile_cached(src) == first and comp.cache_hits == 1 and comp.cache_misses == 1

def test_buffers_sub_buffers_kernels_and_events(clctx: Any) -> None:
  from plugin_qcom.compiler import CLCompiler
  from plugin_qcom.iface_cl import CLAllocator, CLProgram
  alloc = CLAllocator("QCOM", clctx)
  buf = alloc.alloc(4096, BufferSpec())
  data = np.arange(1024, dtype=np.int32)
  alloc._copyin(buf, memoryview(data).cast("B"))
  align = clctx.info.base_align
  view = alloc._offset(buf, 64 * 4, align)   # elements align/4 .. align/4+63
  prg = CLProgram(clctx, "twice", CLCompiler(clctx).compile("__kernel void twice(__global int* a, const int k) { a[get_global_id(0)] *= k; }\n"))
  t = prg(view, global_size=(4, 1, 1), local_size=(16, 1, 1), vals=(3,), wait=True)
  assert isinstance(t, float) and t >= 0
  out = np.empty(1024, np.int32)
  alloc._copyout(memoryview(out).cast("B"), buf)
  want = data.copy()
  want[align // 4:align // 4 + 64] *= 3
  np.testing.assert_array_equal(out, want)

def test_a_kernel_is_built_once_per_binary(clctx: Any, monkeypatch: Any) -> None:
  """The compiler's built program is what CLProgram loads (no second build from its binary); a binary the context does not hold
  (from the disk cache, or evicted) is built once, and later programs of it share that build."""
  from plugin_qcom import iface_cl
  from plugin_qcom.compiler import CLCompiler
  from plugin_qcom.iface_cl import CLAllocator, CLProgram
  builds: list[str] = []
  real = iface_cl.build
  monkeypatch.setattr(iface_cl, "build", lambda ctx, prog, what, src=None: (builds.append(what), real(ctx, prog, what, src))[1])
  src = "__kernel void plus_k_once(__global int* a, const int k) { a[get_global_id(0)] += k; }\n"
  binary = CLCompiler(clctx).compile(src)
  alloc = CLAllocator("QCOM", clctx)
  buf = alloc.alloc(64 * 4, BufferSpec())
  alloc._copyin(buf, memoryview(np.arange(64, dtype=np.int32)).cast("B"))
  CLProgram(clctx, "plus_k_once", binary)(buf, global_size=(4, 1, 1), local_size=(16, 1, 1), vals=(5,), wait=True)
  assert builds == []
  with clctx.lock: clctx.programs.clear()
  for k in (2, 3):   # the first of these builds the binary, the second reuses that build
    CLProgram(clctx, "plus_k_once", binary)(buf, global_size=(4, 1, 1), local_size=(16, 1, 1), vals=(k,), wait=True)
  assert builds == ["the binary of kernel plus_k_once"]
  out = np.empty(64, np.int32)
  alloc._copyout(memoryview(out).cast("B"), buf)
  np.testing.assert_array_equal(out, np.arange(64, dtype=np.int32) + 10)
  with pytest.raises(NotImplementedError, match="not a multiple of the device's sub-buffer alignment"): alloc._offset(buf, 16, 4)

def run_dev(dev: str, code: str) -> str:
  """Runs `code` in a subprocess with DEV=`dev` (the device registry reads DEV once per process); returns its stdout."""
  import os, subprocess, sys
  r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "DEV": dev}, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  return r.stdout

MATMUL = """
import numpy as np
from core import Tensor
x = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
w = np.random.default_rng(1).standard_normal((32, 8)).astype(np.float32)
got = (Tensor(x) @ Tensor(w)).relu().sum(axis=0).numpy()
np.testing.assert_allclose(got, np.maximum(x @ w, 0).sum(0), rtol=1e-5, atol=1e-5)
h = np.random.default_rng(2).uniform(-4, 4, 33).astype(np.float16)
np.testing.assert_array_equal((Tensor(h) * Tensor(h) + 1).numpy(), h * h + np.float16(1))
print(Tensor(x).device)
"""

def test_tensor_program_on_cl_qcom(clctx: Any) -> None:
  assert run_dev("CL+QCOM", MATMUL).strip() == "QCOM"

def test_images_create_upload_read_back_and_sample(clctx: Any) -> None:
  from plugin_qcom.compiler import CLCompiler
  from plugin_qcom.iface_cl import CLAllocator, CLProgram
  alloc = CLAllocator("QCOM", clctx)
  pix = np.random.default_rng(3).standard_normal((5, 7, 4)).astype(np.float32)   # (height, width, RGBA)
  img = alloc.alloc_image(5, 7)
  alloc._copyin(img, memoryview(pix).cast("B"))
  back = np.empty_like(pix)
  alloc._copyout(memoryview(back).cast("B"), img)
  np.testing.assert_array_equal(back, pix)
  # read_imagef with int2 (x, y) and a nearest, unnormalized, clamp sampler: out of range reads give the border (0)
  src = ("__constant sampler_t smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;\n"
         "__kernel void rd(__global float4* out, read_only image2d_t im) { int x = get_global_id(0), y = get_global_id(1);\n"
         "  out[y*8+x] = read_imagef(im, smp, (int2)(x, y)); }\n")
  prg = CLProgram(clctx, "rd", CLCompiler(clctx).compile(src))
  out = alloc.alloc(6 * 8 * 16, BufferSpec())
  prg(out, img, global_size=(8, 6, 1), local_size=(1, 1, 1))
  got = np.empty((6, 8, 4), np.float32)
  alloc._copyout(memoryview(got).cast("B"), out)
  want = np.zeros((6, 8, 4), np.float32)
  want[:5, :7] = pix
  np.testing.assert_array_equal(got, want)
  half = alloc.alloc_image(2, 3, half=True)
  hp = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
  alloc._copyin(half, memoryview(hp).cast("B"))
  hb = np.empty_like(hp)
  alloc._copyout(memoryview(hb).cast("B"), half)
  np.testing.assert_array_equal(hb, hp)
  wmax, hmax = clctx.info.image2d_max
  with pytest.raises(ValueError, match="exceeds the device's 2-D image limit"): alloc.alloc_image(hmax + 1, 4)

# a kernel reading data0 as a 2x4 image of float pixels and writing data1 = 2 * data0 (pixel by pixel)
IMG_READ = ("__constant sampler_t smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;\n"
            "__kernel void rd(read_only image2d_t data0_2x4f, __global float4* data1) { int x = get_global_id(0), y = get_global_id(1);\n"
            "  data1[y*4+x] = 2.0f * read_imagef(data0_2x4f, smp, (int2)(x, y)); }\n")
# writes data0 as an image: pixel p = (p, p, p, p) + data1[0]
IMG_WRITE = ("__kernel void wr(write_only image2d_t data0_2x4f, __global const float* data1) { int x = get_global_id(0), y = get_global_id(1);\n"
             "  write_imagef(data0_2x4f, (int2)(x, y), (float4)(y*4+x) + data1[0]); }\n")
# adds 1 to every element of data0 through a plain pointer
PLAIN_ADD = "__kernel void add(__global float* data0) { data0[get_global_id(0)] += 1.0f; }\n"

def test_buffers_used_as_images_keep_a_current_shadow_image(clctx: Any) -> None:
  """A whole buffer a kernel takes as an image is copied into an image once and reused while nothing writes the buffer; a copy
  in, a plain kernel's write, or an image write each make the other copy stale, and the next user sees the current bytes."""
  from plugin_qcom.compiler import CLCompiler
  from plugin_qcom.iface_cl import CLAllocator, CLProgram
  alloc, comp = CLAllocator("QCOM", clctx), CLCompiler(clctx)
  rd, wr, add = (CLProgram(clctx, n, comp.compile(s)) for n, s in (("rd", IMG_READ), ("wr", IMG_WRITE), ("add", PLAIN_ADD)))
  assert wr.readonly == frozenset({1}) and add.readonly == frozenset() and rd.images == {0: ((2, 4, False), False)}
  buf, out, one = (alloc.alloc(128, BufferSpec()) for _ in range(3))
  def put(b: Any, a: np.ndarray) -> None: alloc._copyin(b, memoryview(np.ascontiguousarray(a, np.float32)).cast("B"))
  def get(b: Any, n: int = 32) -> np.ndarray:
    r = np.empty(n, np.float32)
    alloc._copyout(memoryview(r).cast("B"), b)
    return r
  def read_twice() -> np.ndarray:
    rd(buf, out, global_size=(4, 2, 1))
    return get(out)
  x = np.random.default_rng(5).integers(-50, 50, 32).astype(np.float32)   # whole numbers: every sum below is exact
  put(buf, x)
  np.testing.assert_array_equal(read_twice(), 2 * x)
  shadow = buf.shadow
  np.testing.assert_array_equal(read_twice(), 2 * x)
  assert buf.shadow is shadow and buf.img_ok and buf.buf_ok   # reused: nothing wrote the buffer
  put(buf, x + 3)                                              # a copy in: the image is stale
  np.testing.assert_array_equal(read_twice(), 2 * (x + 3))
  add(buf, global_size=(32, 1, 1))                             # a plain kernel writes the buffer
  np.testing.assert_array_equal(read_twice(), 2 * (x + 4))
  put(one, np.full(32, 10))
  wr(buf, one, global_size=(4, 2, 1))                          # a kernel writes the image: the buffer is stale until needed
  assert not buf.buf_ok and buf.shadow is shadow
  want = np.repeat(np.arange(8, dtype=np.float32), 4) + 10
  np.testing.assert_array_equal(read_twice(), 2 * want)        # an image reader takes the image as it is
  np.testing.assert_array_equal(get(buf), want)                 # a copy out gets the image's pixels
  wr(buf, one, global_size=(4, 2, 1))
  add(buf, global_size=(32, 1, 1))                             # a plain kernel after an image write sees the pixels
  np.testing.assert_array_equal(get(buf), want + 1)
  np.testing.assert_array_equal(read_twice(), 2 * (want + 1))
  view = alloc._offset(buf, 128, 0)                             # a view of it: taken as an image, it is staged per launch
  wr(buf, one, global_size=(4, 2, 1))
  rd(view, out, global_size=(4, 2, 1))
  np.testing.assert_array_equal(get(out), 2 * want)
  add(view, global_size=(32, 1, 1))                            # a plain write through the view makes the root's image stale
  np.testing.assert_array_equal(read_twice(), 2 * (want + 1))
  np.testing.assert_array_equal(get(view), want + 1)
  alloc.free(buf, 128, BufferSpec())
  assert buf.shadow is None
