"""Threaded kernels: both CPU renderers take SPECIAL gidx0 as a trailing `int gidx0` parameter, and the runtime runs its blocks."""
import os, subprocess, sys
import numpy as np
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from plugin_cpu.c_renderer import CPUCRenderer
from plugin_cpu.renderer import CPULLVMRenderer, host_threads
from plugin_cpu.compiler import host_simd_bytes
from cpu_kernels import RENDERERS, Linear, device, c, rng, buf

def block(n: int, dt=dtypes.int32, name: str = "gidx0") -> UOp: return UOp(Ops.SPECIAL, dt, (UOp.const(dt, n),), name)

def launch(renderer: str, uops: list[UOp], arrays: list[np.ndarray], nblocks: int, vals: tuple[int, ...] = ()) -> tuple[str, list[np.ndarray]]:
  dev = device(renderer)
  src = dev.renderer.render("thr", uops)
  prg = dev.runtime("thr", dev.compiler.compile(src))
  hs = []
  for a in arrays:
    h = dev.allocator.alloc(max(a.nbytes, 1))
    dev.allocator._copyin(h, memoryview(np.ascontiguousarray(a)).cast("B"))
    hs.append(h)
  prg(*hs, vals=vals, global_size=(nblocks, 1, 1))
  outs = []
  for a, h in zip(arrays, hs):
    o = np.empty_like(a)
    dev.allocator._copyout(memoryview(o).cast("B"), h)
    outs.append(o)
  return src, outs

def test_renderer_capabilities():
  expect = host_threads() if host_threads() > 1 else 0
  for rnd in (CPUCRenderer(), CPULLVMRenderer()):
    assert rnd.threads == expect and rnd.simd_width == host_simd_bytes() in (16, 32, 64)
  flags = open("/proc/cpuinfo").read()
  if " avx512f" in flags: assert CPUCRenderer().simd_width == 64
  elif " avx2" in flags: assert CPUCRenderer().simd_width == 32

@pytest.mark.parametrize("ren", RENDERERS)
def test_block_index_is_the_last_parameter(ren):
  # out[gidx0] = gidx0 + k with a negative k: the variable comes before the block index in the signature
  n = 37
  out = buf(0, dtypes.int32, n)
  k = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("k", -1000, 1000))
  g = block(n)
  lin = Linear()
  lin.add(out, k, g)
  lin.add(out.index(g).store(g + k))
  src, (res,) = launch(ren, lin.uops, [np.full(n, -1, np.int32)], n, vals=(-500,))
  np.testing.assert_array_equal(res, np.arange(n, dtype=np.int32) - 500)
  assert ("int k, int gidx0)" if ren == "C" else "i32 %k, i32 %gidx0)") in src

@pytest.mark.parametrize("ren", RENDERERS)
def test_blocks_of_loops_match_numpy(ren):
  # 250 blocks of a 16-wide loop: out = a * b + 1 over 4000 floats
  nb, w = 250, 16
  out, a, b = buf(0, dtypes.float32, nb * w), buf(1, dtypes.float32, nb * w), buf(2, dtypes.float32, nb * w)
  g, r = block(nb), rng(w)
  lin = Linear()
  lin.add(out, a, b, g, r)
  i = g * c(w) + r
  lin.add(out.index(i).store(a.index(i).load() * b.index(i).load() + UOp.const(dtypes.float32, 1.0)).end(r))
  x, y = np.random.default_rng(0).standard_normal((2, nb * w)).astype(np.float32)
  _, (res, _, _) = launch(ren, lin.uops, [np.zeros(nb * w, np.float32), x, y], nb)
  np.testing.assert_array_equal(res, x * y + np.float32(1))

@pytest.mark.parametrize("ren", RENDERERS)
def test_int64_block_index(ren):
  # index math wide enough for int64: the int parameter is widened inside the kernel
  n = 9
  out = buf(0, dtypes.int64, n)
  g = block(n, dtypes.int64)
  lin = Linear()
  lin.add(out, g)
  lin.add(out.index(g).store(g * UOp.const(dtypes.int64, 2**33)))
  src, (res,) = launch(ren, lin.uops, [np.zeros(n, np.int64)], n)
  np.testing.assert_array_equal(res, np.arange(n, dtype=np.int64) * 2**33)
  assert ("int gidx0_arg)" if ren == "C" else "i32 %gidx0)") in src

@pytest.mark.parametrize("ren", RENDERERS)
def test_only_gidx0(ren):
  out = buf(0, dtypes.int32, 4)
  lin = Linear()
  g1 = block(4, name="gidx1")
  lin.add(out, g1)
  lin.add(out.index(g1).store(g1))
  with pytest.raises(NotImplementedError, match="gidx1"): device(ren).renderer.render("thr", lin.uops)

END_TO_END = """
import numpy as np
from core import Tensor
from core.engine.run import _runners
a = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
b = np.random.default_rng(1).standard_normal((512, 1024)).astype(np.float32)
np.testing.assert_array_equal((Tensor(a) * Tensor(b) + 1).numpy(), a * b + np.float32(1))
np.testing.assert_allclose(Tensor(a).sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-4, atol=1e-3)
print(max(r.spec.global_size[0] for r in _runners.values()))
"""

@pytest.mark.parametrize("ren", RENDERERS)
def test_tensor_ops_run_threaded(ren):
  # through the optimizer's thread split, the lowerer's gidx0 and the direct launch path, with two pool threads
  env = dict(os.environ, DEV=f"DIRECT+CPU:{ren}", CPU_THREADS="2")
  env.pop("NOOPT", None)
  env.pop("PYTHONSAFEPATH", None)   # the child imports conftest from its working folder (this one)
  res = subprocess.run([sys.executable, "-c", END_TO_END], capture_output=True, text=True, env=env, timeout=600,
                       cwd=os.path.dirname(os.path.abspath(__file__)))
  assert res.returncode == 0, res.stderr[-3000:]
  assert int(res.stdout.split()[-1]) > 1, "no kernel was split into thread blocks"

def test_compiler_flags():
  from plugin_cpu.compiler import CCompiler, LLVMCompiler
  flags = CCompiler().flags
  # exact IEEE results are tested: no fast-math, no contraction of a*b+c; the host's own instructions
  assert "-ffast-math" not in flags and "-ffp-contract=off" in flags and "-march=native" in flags
  assert ("-mprefer-vector-width=512" in flags) == (host_simd_bytes() == 64)
  assert "-mprefer-vector-width=512" not in CCompiler(march="x86-64").flags
  assert LLVMCompiler().opt == 3
  assert ('"prefer-vector-width"="512"' in CPULLVMRenderer().kernel_attrs) == (host_simd_bytes() == 64)
