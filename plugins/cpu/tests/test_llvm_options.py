"""LLVM options a target compiles with (LLVMTarget.options): the CPU's shorter dead store walk, and the process-wide option
put back to LLVM's default for a target that does not name it."""
import pytest
from core.device.compiler import LLVMTarget, llvm_compile_here
from core.device.hostjit import host_compiler
from core.device.llvm_host import host_llvm
from plugin_cpu.compiler import LLVM_OPTIONS, LLVMCompiler

def dead_store_ir(between: int) -> str:
  """p = 11, then `between` stores to q, then p = 22: the first store is dead, found by walking up past the others."""
  stores = [f"  %q{i} = getelementptr i32, ptr %q, i64 {i}\n  store i32 %n, ptr %q{i}" for i in range(between)]
  return "\n".join(["define void @f(ptr noalias %p, ptr noalias %q, i32 %n) {", "entry:", "  store i32 11, ptr %p", *stores,
                    "  store i32 22, ptr %p", "  ret void", "}", ""])

def keeps_dead_store(options: tuple[str, ...], between: int) -> bool:
  h = host_llvm()
  asm = llvm_compile_here(LLVMTarget(h.triple, h.cpu, "", 3, "pic", "default", options), dead_store_ir(between), assembly=True).decode()
  assert "$22" in asm
  return "$11" in asm

def test_cpu_target_compiles_with_its_options():
  assert LLVMCompiler().target.options == LLVM_OPTIONS
  assert any(o.startswith("-dse-memoryssa-walklimit=") for o in LLVM_OPTIONS)

def test_cpu_target_walks_no_store_up():
  # a dead store with one store between is kept (LLVM's default walk removes it); one right before its overwrite still goes
  assert keeps_dead_store(LLVM_OPTIONS, 1)
  assert not keeps_dead_store((), 1)
  assert not keeps_dead_store(LLVM_OPTIONS, 0)

def test_the_submit_programs_compiler_keeps_the_walk():
  # hcq_submit's template words that the launch patches lie up to 40 stores up: the host compiler still removes them
  t = host_compiler().target
  assert t.options == ()
  asm = llvm_compile_here(t, dead_store_ir(40), assembly=True).decode()
  assert "$22" in asm and "$11" not in asm

def test_options_apply_to_their_target_only():
  # 70 stores up is past the CPU's walk, not LLVM's default one: a target without options gets the default back
  assert not keeps_dead_store((), 70)
  assert keeps_dead_store(LLVM_OPTIONS, 70)
  assert not keeps_dead_store((), 70)
  assert keeps_dead_store(LLVM_OPTIONS, 70)

def test_an_option_without_a_known_default_is_refused():
  with pytest.raises(ValueError, match="no default"): keeps_dead_store(("-dse-memoryssa-scanlimit=0",), 1)
