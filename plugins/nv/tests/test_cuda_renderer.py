"""The CUDA renderer (CUDA C through core's C-style renderer) and NVRTCCompiler: source lines, cubins per arch, errors."""
from __future__ import annotations
import re
import pytest
from core.testing.helpers import ci_run
from core.device.compiler import CompileError
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.testing.kernels import c, linear, special
from nv_test_kernels import ARCH_NAMES, cubin_sm, elf_header, have_nvrtc, loop_kernel, shared_kernel
from plugin_nv import compiler as nv_compiler
from plugin_nv.compiler import NVRTCCompiler
from plugin_nv.renderer import CUDARenderer

# skipped off CI only: the job installs the testing extra, so under CI=true a missing NVRTC fails these tests with what to install
needs_nvrtc = pytest.mark.skipif(not have_nvrtc() and not ci_run(),
                                 reason='no NVRTC here: pip install "plugin-nv[nvrtc]" (the testing extra has it)')

def lines(src: str) -> list[str]: return [ln.strip() for ln in src.splitlines()]

def test_shared_kernel_source_lines():
  src = CUDARenderer("sm_90").render("rev", shared_kernel(threads=128, blocks=8))
  assert lines(src) == [
    'extern "C" __global__ void __launch_bounds__(128) rev(float* __restrict__ data0, float* __restrict__ data1) {',
    "int gidx0 = blockIdx.x;", "int lidx0 = threadIdx.x;", "int alu0 = ((gidx0*128)+lidx0);",
    "__shared__ __align__(16) float temp0[128];", "float val0 = (*(data1+alu0));", "*(temp0+lidx0) = val0;", "__syncthreads();",
    "float val1 = (*(temp0+(127-lidx0)));", "*(data0+alu0) = val1;", "}"]

@pytest.mark.parametrize("dt, ctype, header, from_int", [(dtypes.float16, "half", "#include <cuda_fp16.h>", "__double2half"),
                                                        (dtypes.bfloat16, "__nv_bfloat16", "#include <cuda_bf16.h>", "__double2bfloat16")])
def test_half_and_bfloat16_are_native_types_from_the_headers(dt, ctype: str, header: str, from_int: str):
  src = CUDARenderer("sm_80").render("loop", loop_kernel(dt))
  ls = lines(src)
  assert ls[0] == header and all(not ln.startswith("#include") for ln in ls[1:])
  assert ls[1] == (f'extern "C" __global__ void __launch_bounds__(1) loop({ctype}* __restrict__ data0, {ctype}* __restrict__ data1, '
                   "const int n) {")
  assert f"{ctype} acc0[1];" in ls and f"*(acc0+0) = (({ctype})(0.0f));" in ls
  # the int variable rounds once to the narrow type (exact in double first); every result is cast back to it
  assert f"*(acc0+0) = (({ctype})(val0+(({ctype})(val1*{from_int}((double)(n))))));" in ls

def test_casts_round_once():
  r = CUDARenderer()
  assert r.render_cast(dtypes.float16, dtypes.int64, "x") == "__ll2half_rn(x)"
  assert r.render_cast(dtypes.bfloat16, dtypes.uint64, "x") == "__ull2bfloat16_rn(x)"
  assert r.render_cast(dtypes.float16, dtypes.float64, "x") == "__double2half((double)(x))"
  assert r.render_cast(dtypes.bfloat16, dtypes.float32, "x") == "((__nv_bfloat16)(x))"
  assert r.render_cast(dtypes.int32, dtypes.float16, "x") == "((int)((float)(x)))"   # half -> float is exact
  assert r.render_cast(dtypes.float16, dtypes.bfloat16, "x") == "((half)((float)(x)))"
  assert r.render_cast(dtypes.bool, dtypes.float32, "x") == "((bool)(x))"

def test_bitcast_vectors_and_2d_ids():
  out = UOp.param(0, dtypes.uint32.ptr(64))
  gy, lx = special("gidx1", 4), special("lidx0", 16)
  v = UOp(Ops.VECTORIZE, dtypes.float32.vec(2), (lx.cast(dtypes.float32), gy.cast(dtypes.float32)))
  val = (v.gep(0) + v.gep(1)).bitcast(dtypes.uint32)
  src = CUDARenderer().render("k", linear(out.index(gy * c(16) + lx).store(val)))
  ls = lines(src)
  assert ls[0] == "template <class T, class F> __device__ __forceinline__ T core_bitcast(F x) { T y; memcpy(&y, &x, sizeof(T)); return y; }"
  assert ls[1] == "struct __align__(4) floatx2 { float v[2]; };"
  assert ls[2] == 'extern "C" __global__ void __launch_bounds__(16) k(unsigned int* __restrict__ data0) {'
  assert "int gidx1 = blockIdx.y;" in ls and "int lidx0 = threadIdx.x;" in ls
  assert "floatx2 vec0 = floatx2{{(float)(((float)(lidx0))),(float)(((float)(gidx1)))}};" in ls
  assert any("core_bitcast<unsigned int, float>((vec0.v[0]+vec0.v[1]))" in ln for ln in ls)

def test_capabilities_match_the_ptx_renderer():
  from plugin_nv.renderer import PTXRenderer
  r, p = CUDARenderer("sm_120"), PTXRenderer("sm_120")
  assert (r.device, r.suffix, r.arch) == ("NV", "CUDA", "sm_120")
  for attr in ("has_local", "has_shared", "global_max", "local_max", "shared_max", "supported_dtypes", "supports_float4"):
    assert getattr(r, attr) == getattr(p, attr), attr
  with pytest.raises(ValueError, match="NV arch 'sm_75' is not supported"): CUDARenderer("sm_75")
  with pytest.raises(ValueError, match=r"a block of 2048x1x1 threads; NV allows 1024 in all"): r.render("big", shared_kernel(threads=2048, blocks=1))

@needs_nvrtc
@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_nvrtc_cubin_elf_header_names_the_arch(arch: str):
  cubin = NVRTCCompiler(arch).compile(CUDARenderer(arch).render("rev", shared_kernel()))
  h = elf_header(cubin)
  assert (h["class"], h["data"], h["machine"]) == (2, 1, 190)   # ELFCLASS64, little-endian, EM_CUDA
  assert h["abiversion"] in (7, 8) and cubin_sm(cubin) == int(arch[3:])
  assert b"rev\x00" in cubin and b".nv.shared.rev" in cubin

@needs_nvrtc
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float64])
def test_nvrtc_compiles_narrow_and_double_kernels(dt):
  cubin = NVRTCCompiler("sm_80").compile(CUDARenderer("sm_80").render("loop", loop_kernel(dt)))
  assert cubin_sm(cubin) == 80 and b"loop\x00" in cubin

@needs_nvrtc
def test_cache_key_names_nvrtc_version_and_arch():
  comp = NVRTCCompiler("sm_89")
  assert re.fullmatch(r"\d+\.\d+", comp.version)
  assert comp.cachekey == f"nv_cuda_nvrtc{comp.version}_sm_89" and NVRTCCompiler("sm_90").cachekey != comp.cachekey
  assert comp.options()[:2] == ["--gpu-architecture=sm_89", "--fmad=false"]

@needs_nvrtc
def test_nvrtc_error_carries_the_log_and_the_source():
  src = CUDARenderer("sm_90").render("loop", loop_kernel()).replace("__syncthreads();", "").replace("val2;", "undeclared_thing;")
  with pytest.raises(CompileError, match=r'(?s)NVRTC \d+\.\d+ --gpu-architecture=sm_90 .*failed \(NVRTC_ERROR_COMPILATION\):\n'
                                         r'.*identifier "undeclared_thing" is undefined.*--- source ---\nextern "C" __global__'):
    NVRTCCompiler("sm_90").compile(src)

def test_missing_nvrtc_says_what_to_install(monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setattr(nv_compiler, "find_nvrtc", lambda: None)
  comp = NVRTCCompiler("sm_90")
  assert comp.lib is None and comp.cachekey == "nv_cuda_nvrtcmissing_sm_90"
  src = CUDARenderer("sm_90").render("loop", loop_kernel())   # the source still renders
  with pytest.raises(CompileError, match=r'NV CUDA compiler for sm_90: NVRTC \(libnvrtc.so\) was not found .* pip install "plugin-nv\[nvrtc\]"'):
    comp.compile(src)

def test_find_nvrtc_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path):
  monkeypatch.setenv("NVRTC", str(tmp_path / "nope"))
  assert nv_compiler.find_nvrtc() is None   # an explicit NVRTC that is not there is not silently replaced
  fake = tmp_path / "libnvrtc.so.13"
  fake.write_bytes(b"")
  monkeypatch.setenv("NVRTC", str(fake))
  assert nv_compiler.find_nvrtc() == str(fake)
