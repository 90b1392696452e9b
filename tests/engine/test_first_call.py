"""A first call's general path: scheduling, codegen and compiles run with the cyclic garbage collector off (a cold ResNet-18
training step set off ~590 collections, 5 of them full), and a submission's new kernels are compiled in a second thread while
the next kernel's code is generated (core.hcq.state.compile_kernels; on two or more cores): the same programs as one at a
time, errors raised the same. Values from numpy."""
import gc, threading
import numpy as np
import pytest
from core import Tensor, Device
from core.helpers import Context
from core.ir.ops import Ops
from core.device.compiler import CompileError
import core.engine.realize as realize
import core.codegen.program as program
from core.hcq import state
from core.schedule.kernelize import create_schedule

def _asts(t: Tensor) -> list:
  return [it.ast for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def test_the_general_path_runs_without_the_collector_and_restores_it(gc_state_at):
  seen = gc_state_at(realize, "create_schedule")
  x = np.arange(29 * 31, dtype=np.float32).reshape(29, 31)
  assert gc.isenabled()
  out = ((Tensor(x) + 7) * 2).max(0).numpy()
  assert seen == [False] and gc.isenabled()
  np.testing.assert_allclose(out, ((x + 7) * 2).max(0))

def _three_kernels(rows: int) -> tuple[Tensor, np.ndarray]:
  # each test its own shape: kernels are cached by their AST, which a shape changes and data doesn't
  x = np.random.default_rng(rows).standard_normal((rows, 47)).astype(np.float32)
  # three kernels: each contiguous() is a buffer of its own
  t = ((Tensor(x) * 2).contiguous().exp().contiguous() + 1).sum(0)
  return t, (np.exp(x * 2) + 1).sum(0)

def test_kernels_compile_in_a_second_thread_to_the_same_programs(monkeypatch):
  # the compile thread runs the compiler only: the PROGRAMs and the caches are made in the calling thread
  compiled_in, built_in = [], []
  dev = Device.DEFAULT
  comp, orig = Device[dev].compiler, program.compile_program
  cached = comp.compile_cached
  def compile_spy(src):
    compiled_in.append(threading.get_ident())
    return cached(src)
  def build_spy(*a):
    built_in.append(threading.get_ident())
    return orig(*a)
  monkeypatch.setattr(comp, "compile_cached", compile_spy)
  monkeypatch.setattr(program, "compile_program", build_spy)
  t, want = _three_kernels(23)
  kernels = [(a, dev) for a in _asts(t)]
  assert len(kernels) >= 2 and not any(k in state._compiled for k in kernels)
  state.compile_kernels(kernels)
  assert len(compiled_in) == len(kernels) and threading.get_ident() not in compiled_in
  assert built_in == [threading.get_ident()] * len(kernels)
  monkeypatch.undo()
  for ast, d in kernels:
    got = state._compiled[(ast, d)]
    one = orig(program.get_program(ast, Device[d].renderer), Device[d].compiler)
    assert program.program_source(got) == program.program_source(one)
    assert program.program_binary(got) == program.program_binary(one)
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-7)

def test_a_compile_error_in_the_thread_is_raised_by_the_call(monkeypatch):
  comp = Device[Device.DEFAULT].compiler
  cached, calls = comp.compile_cached, []
  def failing(src):
    calls.append(src)
    if len(calls) == 2: raise CompileError("the second kernel's compiler failed")
    return cached(src)
  monkeypatch.setattr(comp, "compile_cached", failing)
  t, _ = _three_kernels(19)
  kernels = [(a, Device.DEFAULT) for a in _asts(t)]
  with pytest.raises(CompileError, match="second kernel"): state.compile_kernels(kernels)
  assert kernels[0] in state._compiled and kernels[1] not in state._compiled
  monkeypatch.undo()
  t2, want = _three_kernels(19)
  np.testing.assert_allclose(t2.numpy(), want, rtol=1e-5, atol=1e-7)

def test_kernels_that_share_a_source_compile_once(monkeypatch):
  # kernels that differ only in a lifted literal render one source: it compiles once, and both PROGRAMs carry its binary
  x = np.random.default_rng(17).standard_normal((17, 41)).astype(np.float32)
  ts = [(Tensor(x) * 2 + c).sum(0) for c in (3, 5, 7)]
  dev = Device.DEFAULT
  comp = Device[dev].compiler
  cached, srcs = comp.compile_cached, []
  def spy(src):
    srcs.append(src)
    return cached(src)
  monkeypatch.setattr(comp, "compile_cached", spy)
  kernels = [(a, dev) for t in ts for a in _asts(t)]
  assert len(kernels) == 3 and not any(k in state._compiled for k in kernels)
  with Context(CORE_DISABLE_COMPILER_CACHE=1): state.compile_kernels(kernels)
  assert len(srcs) == 1
  monkeypatch.undo()
  assert len({program.program_binary(state._compiled[k]) for k in kernels}) == 1
  for t, c in zip(ts, (3, 5, 7)): np.testing.assert_allclose(t.numpy(), (x * 2 + c).sum(0), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("why", ["one core", "BEAM"])
def test_kernels_left_to_compile_kernel(why, monkeypatch):
  # one core: nothing to overlap on; BEAM times its candidates as it generates code, and a compile on the other core would
  # slow them (RV, after ee2e16d)
  if why == "one core": monkeypatch.setattr(state, "_cores", lambda: 1)
  t, want = _three_kernels(13 if why == "one core" else 11)
  kernels = [(a, Device.DEFAULT) for a in _asts(t)]
  with Context(BEAM=int(why == "BEAM")): state.compile_kernels(kernels)
  assert not any(k in state._compiled for k in kernels)   # left to compile_kernel, as the submission is built
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-7)

def _six_kernels(rows: int) -> tuple[Tensor, np.ndarray]:
  x = np.random.default_rng(rows).standard_normal((rows, 43)).astype(np.float32)
  t = Tensor(x)
  for k in range(5): t = (t * (k + 2)).contiguous()
  return t.sum(0), (x * 720).sum(0)

def test_a_backlog_of_compiles_goes_to_a_second_thread_in_the_llvm_worker(monkeypatch):
  # the in-process compile thread holds its first kernel until the second thread has compiled one in the worker process: the
  # results still land in the kernels' order, each compile_kernel's source and binary
  from core.device import compiler, llvm_worker
  if not isinstance(getattr(Device[Device.DEFAULT].compiler, "target", None), compiler.LLVMTarget): pytest.skip("not an LLVM compiler")
  monkeypatch.setattr(state, "COMPILE_BACKLOG", 0)
  monkeypatch.setattr(llvm_worker, "_off_process_failed", False)
  dev = Device.DEFAULT
  comp = Device[dev].compiler
  cached, orig, worker_done, where = comp.compile_cached, program.compile_program, threading.Event(), {}
  def spy(src):
    off = getattr(compiler.off_process, "on", False)
    if not off: worker_done.wait(10)
    out = cached(src)
    where[src] = off
    if off: worker_done.set()
    return out
  monkeypatch.setattr(comp, "compile_cached", spy)
  t, want = _six_kernels(31)
  kernels = [(a, dev) for a in _asts(t)]
  assert len(kernels) >= 5 and not any(k in state._compiled for k in kernels)
  before = llvm_worker.worker_compiles
  with Context(CORE_DISABLE_COMPILER_CACHE=1): state.compile_kernels(kernels)   # compiles, not an earlier run's cache entries
  assert worker_done.is_set() and llvm_worker.worker_compiles > before and any(where.values())
  for ast, d in kernels:
    got = state._compiled[(ast, d)]
    one = orig(program.get_program(ast, Device[d].renderer), Device[d].compiler)
    assert program.program_source(got) == program.program_source(one)
    assert program.program_binary(got) == program.program_binary(one)
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-4)
