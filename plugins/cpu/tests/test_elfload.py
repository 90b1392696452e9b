"""The in-process ELF object loader: LLVM objects with constant pools, libm calls and data run correctly without a linker."""
import ctypes
import numpy as np
import pytest
from plugin_cpu import elfload

pytestmark = pytest.mark.skipif(not elfload.supported(), reason="the in-process loader handles x86-64 objects only")

IR = """
@table = internal constant [4 x float] [float 1.5, float -2.0, float 3.25, float 0.5]
@counter = internal global i32 0
declare float @sinf(float)
declare float @llvm.exp2.f32(float)
define void @kern(ptr noalias %out, ptr noalias %in, i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %loop]
  %p = getelementptr float, ptr %in, i32 %i
  %x = load float, ptr %p
  %m = and i32 %i, 3
  %tp = getelementptr [4 x float], ptr @table, i32 0, i32 %m
  %t = load float, ptr %tp
  %s = call float @sinf(float %x)
  %e = call float @llvm.exp2.f32(float %x)
  %a = fmul float %s, %t
  %b = fadd float %a, %e
  %q = getelementptr float, ptr %out, i32 %i
  store float %b, ptr %q
  %c = load i32, ptr @counter
  %c1 = add i32 %c, 1
  store i32 %c1, ptr @counter
  %i1 = add i32 %i, 1
  %done = icmp eq i32 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
define i32 @count() {
  %c = load i32, ptr @counter
  ret i32 %c
}
"""

def _object(ir: str) -> bytes:
  import llvmlite.binding as llvm
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(opt=2, reloc="pic", codemodel="default")
  mod = llvm.parse_assembly(ir)
  mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
  return tm.emit_object(mod)

def test_kernel_with_constants_libm_and_globals():
  obj = _object(IR)
  assert elfload.is_relocatable(obj)
  lo = elfload.LoadedObject(obj)
  kern = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(lo.symbols["kern"])
  count = ctypes.CFUNCTYPE(ctypes.c_int32)(lo.symbols["count"])
  x = np.linspace(-3, 3, 37, dtype=np.float32)
  out = np.zeros_like(x)
  kern(out.ctypes.data, x.ctypes.data, len(x))
  table = np.array([1.5, -2.0, 3.25, 0.5], dtype=np.float32)[np.arange(len(x)) % 4]
  np.testing.assert_allclose(out, np.sin(x) * table + np.exp2(x), rtol=1e-5, atol=1e-6)
  kern(out.ctypes.data, x.ctypes.data, 5)
  assert count() == len(x) + 5     # the writable global kept its state between calls

def test_rejects_what_it_cannot_load():
  with pytest.raises(elfload.ELFLoadError, match="header: bad magic"): elfload.LoadedObject(b"garbage" * 10)
  obj = bytearray(_object("define void @f() {\n ret void\n}\n"))
  obj[16] = 3   # pretend to be a shared object
  with pytest.raises(elfload.ELFLoadError, match="not a relocatable object"): elfload.LoadedObject(bytes(obj))
  with pytest.raises(elfload.ELFLoadError, match="neither libc nor libm"):
    elfload.LoadedObject(_object("declare void @no_such_function_xyz()\ndefine void @f() {\n call void @no_such_function_xyz()\n ret void\n}\n"))
