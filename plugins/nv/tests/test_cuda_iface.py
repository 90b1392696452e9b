"""The CUDA+NV interface without a GPU: the parameter buffer packed at the cubin's parameter offsets, the call sequence against
a stand-in for libcuda that records every call (the real library has never been loaded here), and the error naming what to
install when libcuda is missing."""
from __future__ import annotations
import ctypes, os, struct, subprocess, sys
from typing import Any
import pytest
from plugin_nv import iface_cuda as C
from nvtools import ptx_cubin

PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1, .param .u32 k_param_2)
{
  .reg .b64 %rd<4>;
  .reg .b32 %r<3>;
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  ld.param.u32 %r1, [k_param_2];
  cvta.to.global.u64 %rd3, %rd1;
  st.global.u32 [%rd3], %r1;
  ret;
}
"""

def test_pack_params_at_the_offsets():
  blob = C.pack_params([(0, 8), (8, 8), (16, 4)], (0x1122334455667788, 0xAABB), (-3,))
  assert len(blob) == 24 and struct.unpack("<QQi", blob[:20]) == (0x1122334455667788, 0xAABB, -3)
  with pytest.raises(ValueError, match="takes 3 parameters, got 2 buffers and 0 variables"): C.pack_params([(0, 8)] * 3, (1, 2), ())

class FakeCUDA:
  """Answers the CUDA driver calls CUDA+NV makes with CUDA_SUCCESS, recording them; cuLaunchKernel copies the parameter buffer
  from the `extra` array as the driver would read it."""
  def __init__(self) -> None:
    self.calls: list[str] = []
    self.params: bytes = b""
    self.launch: tuple[int, ...] = ()
  def __getattr__(self, name: str) -> Any:
    def call(*args: Any) -> int:
      self.calls.append(name)
      if name == "cuDeviceGetAttribute": ctypes.cast(args[0], ctypes.POINTER(ctypes.c_int))[0] = 9 if args[1] == 75 else 0
      if name == "cuLaunchKernel":
        self.launch = tuple(a.value for a in args[1:7])
        extra = args[10]
        assert extra[0] == C.CU_LAUNCH_PARAM_BUFFER_POINTER and extra[2] == C.CU_LAUNCH_PARAM_BUFFER_SIZE and extra[4] is None
        size = ctypes.c_size_t.from_address(extra[3]).value
        self.params = ctypes.string_at(extra[1], size)
      if name == "cuEventElapsedTime": ctypes.cast(args[0], ctypes.POINTER(ctypes.c_float))[0] = 2.5
      return 0
    return call

def test_launch_packs_the_cubins_parameters():
  cubin = ptx_cubin(PTX, "sm_90")
  fake = FakeCUDA()
  cu = C.CUDA(0, lib=fake)   # type: ignore[arg-type]
  assert cu.arch == "sm_90" and fake.calls[:2] == ["cuInit", "cuDeviceGet"]
  prog = C.CUDAProgram(cu, "k", cubin)
  assert prog.params == [(0, 8), (8, 8), (16, 4)]   # the cubin's .nv.info parameter offsets and sizes
  assert prog(0x7000, 0x8000, global_size=(4, 2, 1), local_size=(32, 1, 1), vals=(77,)) is None
  assert fake.launch == (4, 2, 1, 32, 1, 1)
  assert struct.unpack("<QQi", fake.params[:20]) == (0x7000, 0x8000, 77)
  assert "cuModuleLoadData" in fake.calls and "cuCtxSynchronize" in fake.calls
  assert prog(0x7000, 0x8000, vals=(1,), wait=True) == pytest.approx(2.5e-3)   # event timing, milliseconds -> seconds
  assert fake.calls[-3:] == ["cuEventElapsedTime", "cuEventDestroy_v2", "cuEventDestroy_v2"]

def test_a_failed_call_names_the_call_and_result():
  class Failing(FakeCUDA):
    def __getattr__(self, name: str) -> Any:
      if name == "cuInit": return lambda *a: 100
      return super().__getattr__(name)
  with pytest.raises(C.CUDAError, match=r"cuInit failed: CUresult 100"): C.CUDA(0, lib=Failing())   # type: ignore[arg-type]

@pytest.mark.skipif(C.find_libcuda() is not None, reason="this machine has libcuda")
def test_dev_cuda_is_refused_naming_what_to_install():
  env = dict(os.environ, DEV="CUDA+NV")
  p = subprocess.run([sys.executable, "-c", "from core import Tensor; print(Tensor([1.0]).numpy())"], env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode != 0 and "CUDA+NV needs libcuda.so.1" in p.stderr and "nvidia-driver" in p.stderr, p.stderr[-3000:]
  assert C.find_libcuda() is None
  with pytest.raises(C.CUDAError, match="CUDA\\+NV needs libcuda.so.1"): C.load_libcuda()
