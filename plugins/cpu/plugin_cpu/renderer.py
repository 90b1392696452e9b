"""The CPU plugin's renderers: host C and host LLVM IR, kernels as plain functions where every axis is a loop."""
from __future__ import annotations
from core.ir.dtype import dtypes
from core.ir.ops import UOp
from core.codegen.c_style import CStyleRenderer
from core.codegen.llvm_ir import LLVMRenderer

# bf16: gcc before 13 has __bf16 only as a storage type, so the C renderer leaves it to codegen's decompositions
_HOST_DTYPES = frozenset((dtypes.bool,) + dtypes.ints + (dtypes.float16, dtypes.float32, dtypes.float64))

class CPUCRenderer(CStyleRenderer):
  """`void name(T* restrict data0, ..., int var0, ...)` compiled by the system C compiler."""
  device = "CPU"
  suffix = "C"
  has_local = False
  global_max = None
  supports_float4 = True
  supported_dtypes = _HOST_DTYPES

# LLVM lowers float -> bfloat on CPUs without bf16 instructions to a call of __truncsfbf2, which libgcc only has from gcc 13:
# each module that uses bfloat carries its own (hidden: never exported; not linkonce: the optimizer would drop it), rounding to
# nearest even like dtypes.truncate
TRUNCSFBF2 = """define hidden bfloat @__truncsfbf2(float %x) nounwind {
  %b = bitcast float %x to i32
  %lsb = lshr i32 %b, 16
  %odd = and i32 %lsb, 1
  %bias = add i32 %odd, 32767
  %r = add i32 %b, %bias
  %h = lshr i32 %r, 16
  %nan = fcmp uno float %x, %x
  %q = select i1 %nan, i32 32704, i32 %h
  %t = trunc i32 %q to i16
  %bf = bitcast i16 %t to bfloat
  ret bfloat %bf
}
"""

class CPULLVMRenderer(LLVMRenderer):
  """The same kernel as LLVM IR for llvmlite; the compiler fills in the host triple and data layout."""
  device = "CPU"
  suffix = "LLVM"
  has_local = False
  global_max = None
  supports_float4 = True
  supported_dtypes = _HOST_DTYPES | {dtypes.bfloat16}

  def render(self, name: str, uops: list[UOp]) -> str:
    src = super().render(name, uops)
    return src + TRUNCSFBF2 if "bfloat" in src else src
