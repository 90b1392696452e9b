"""The LLVM renderer renders functions and assembles modules apart: a module of several functions declares what they call once,
each function's entry block holds its allocas, then its prologue (LLVMRenderer.render_prologue), and each ends with its
render_return; parameters (llvm_ir.Param) print as a signature's and as a call's."""
from __future__ import annotations
import llvmlite.binding as llvm
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops, AxisType
from core.codegen.llvm_ir import TRUNCSFBF2, HostLLVMRenderer, Param
from core.device.compiler import LLVMTarget, llvm_compile_here
from core.device.llvm_host import host_llvm

def _sqrt_kernel(n: int = 16) -> list[UOp]:
  """out[i] = sqrt(in[i]), linearized: the params, the loop, the load, the sqrt, the store, the loop's end."""
  out, inp = UOp.param(0, dtypes.float32.ptr(n)), UOp.param(1, dtypes.float32.ptr(n))
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (0, AxisType.LOOP))
  ld = inp.index(r).load()
  st = out.index(r).store(UOp(Ops.SQRT, dtypes.float32, (ld,)))
  uops: list[UOp] = []
  for u in st.end(r).toposort():
    if u not in uops: uops.append(u)
  return uops

def _defined(src: str) -> list[str]:
  mod = llvm.parse_assembly(src)
  mod.verify()
  return sorted(f.name for f in mod.functions if not f.is_declaration)

def test_a_module_of_two_functions_declares_their_intrinsic_once():
  r = HostLLVMRenderer()
  r.start_module()
  src = r.module([r.function("first", _sqrt_kernel()), r.function("second", _sqrt_kernel(8))])
  assert _defined(src) == ["first", "second"]
  assert [ln for ln in src.split("\n") if ln.startswith("declare ")] == ["declare float @llvm.sqrt.f32(float)"]
  assert src.count("attributes #0 = ") == 1 and src.index("define void @first(") < src.index("define void @second(")

class _Hooked(HostLLVMRenderer):
  def render_prologue(self, params: list[Param]) -> str:
    return f"call void @before({', '.join(p.arg() for p in params)})"
  def render_return(self) -> str:
    self.trailer["declare void @before(ptr, ptr)"] = None
    return "fence release\n  ret void"

def test_the_prologue_follows_the_allocas_and_render_return_ends_the_function():
  src = _Hooked().render("k", _sqrt_kernel())
  assert _defined(src) == ["k"]
  fn = src[src.index("define void @k("):src.index("\n}\n") + 2].split("\n")
  assert fn[0] == "define void @k(ptr noalias %data0, ptr noalias %data1) #0 {" and fn[1] == "entry:"
  assert fn[2] == "  %ridx1.addr = alloca i32" and fn[3] == "  call void @before(ptr %data0, ptr %data1)"
  assert fn[-3:] == ["  fence release", "  ret void", "}"]
  assert src.endswith("attributes #0 = { nounwind }\ndeclare void @before(ptr, ptr)\n")

def test_params_print_as_a_signature_and_as_call_arguments():
  p = Param("ptr addrspace(1)", "%data0", "noalias align 4")
  assert (str(p), p.arg()) == ("ptr addrspace(1) noalias align 4 %data0", "ptr addrspace(1) %data0")
  assert (str(Param("i32", "%n.arg")), Param("i32", "%n.arg").arg()) == ("i32 %n.arg", "i32 %n.arg")

class _Aligned(HostLLVMRenderer):
  aligned_params = True

def test_aligned_params_give_each_buffer_its_element_size_as_alignment():
  out, inp = UOp.param(0, dtypes.float64.ptr(8)), UOp.param(1, dtypes.float16.ptr(8))
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 8),), (0, AxisType.LOOP))
  st = out.index(r).store(inp.index(r).load().cast(dtypes.float64))
  uops = list(dict.fromkeys(st.end(r).toposort()))
  assert "define void @k(ptr noalias align 8 %data0, ptr noalias align 2 %data1) #0 {" in _Aligned().render("k", uops)
  assert "define void @k(ptr noalias %data0, ptr noalias %data1) #0 {" in HostLLVMRenderer().render("k", uops)

def _cast_kernel(to, fr, op=None) -> list[UOp]:
  """out[i] = cast(in[i]) (or op(in[i], in[i]) in the input's dtype first), 8 elements."""
  out, inp = UOp.param(0, to.ptr(8)), UOp.param(1, fr.ptr(8))
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 8),), (0, AxisType.LOOP))
  v = inp.index(r).load()
  if op is not None: v = UOp(op, fr, (v, v))
  st = out.index(r).store(v.cast(to) if to is not fr else v)
  return list(dict.fromkeys(st.end(r).toposort()))

@pytest.mark.parametrize("to, fr, op, rounds", [(dtypes.bfloat16, dtypes.float32, None, True), (dtypes.bfloat16, dtypes.int32, None, True),
                                                (dtypes.bfloat16, dtypes.float16, None, True), (dtypes.bfloat16, dtypes.bfloat16, Ops.MUL, True),
                                                (dtypes.float32, dtypes.bfloat16, None, False), (dtypes.bfloat16, dtypes.bfloat16, None, False),
                                                (dtypes.float32, dtypes.float32, Ops.ADD, False)],
                         ids=["f32->bf16", "i32->bf16", "f16->bf16", "bf16*bf16", "bf16->f32", "bf16 copy", "f32+f32"])
def test_the_host_module_defines_truncsfbf2_exactly_where_a_value_is_rounded_to_bfloat(to, fr, op, rounds):
  # LLVM lowers the rounding to a call of the compiler-runtime helper on x86 without bf16 conversions (haswell): a module that
  # rounds carries its own definition, one that only loads, stores or widens bfloat calls nothing and defines nothing
  src = HostLLVMRenderer().render("k", _cast_kernel(to, fr, op))
  assert src.endswith(TRUNCSFBF2) == rounds and src.count("@__truncsfbf2(") == int(rounds)
  if host_llvm().triple.startswith("x86_64"):
    asm = llvm_compile_here(LLVMTarget(host_llvm().triple, "haswell", "", 3, "pic", "default"), src, assembly=True).decode()
    assert ("__truncsfbf2" in asm) == rounds

class _Addrspace1(HostLLVMRenderer):
  global_addrspace = 1

def test_value_types_are_kept_once_asked_and_pointer_types_are_each_renderers():
  # ty() keeps each value dtype's LLVM type in a table (asked ~30k times a ResNet-18 codegen); a pointer's depends on the
  # renderer's address spaces, so it is never kept
  from core.codegen import llvm_ir
  v = dtypes.float16.vec(7)
  llvm_ir._TYPES.pop(v, None)
  assert HostLLVMRenderer().ty(v) == "<7 x half>" and llvm_ir._TYPES[v] == "<7 x half>"
  assert _Addrspace1().ty(v) == "<7 x half>" and HostLLVMRenderer().ty(dtypes.bool) == "i1"
  p = dtypes.float32.ptr(16)
  assert HostLLVMRenderer().ty(p) == "ptr" and _Addrspace1().ty(p) == "ptr addrspace(1)" and p not in llvm_ir._TYPES
