"""SubmitProgram.bind: the submit program's call with its host addresses fixed once, as every run of a submission makes it."""
import ctypes, gc
from core.device.hostjit import host_library
from core.hcq.callify import SubmitProgram

# two stores through pointer parameters, as a submit program's ring and doorbell writes are
SRC = """define void @hcq_submit(ptr %a, ptr %b) {
  store i64 81985529216486895, ptr %a
  store i64 -2, ptr %b
  ret void
}
"""

def program() -> SubmitProgram:
  lib = host_library(SRC)   # as compile_submit_program loads it
  return SubmitProgram(lib.function("hcq_submit", None, ctypes.c_void_p, ctypes.c_void_p), lib.function("hcq_submit", None))

def test_a_bound_submit_program_writes_through_its_full_width_addresses():
  x, y = ctypes.c_int64(), ctypes.c_int64()
  program().bind(ctypes.addressof(x), ctypes.addressof(y))()
  assert (x.value, y.value) == (0x0123456789ABCDEF, -2)

def test_the_bound_call_converts_no_argument_per_call():
  # no argtypes on the bound call's function: its c_void_p objects pass as they are (the unbound program keeps its argtypes,
  # so a call with plain ints still passes 64-bit pointers)
  x, y = ctypes.c_int64(), ctypes.c_int64()
  p = program()
  bound = p.bind(ctypes.addressof(x), ctypes.addressof(y))
  assert not bound.func.argtypes and all(type(a) is ctypes.c_void_p for a in bound.args)
  assert p.fn.argtypes == (ctypes.c_void_p, ctypes.c_void_p)
  p(ctypes.addressof(y), ctypes.addressof(x))
  assert (x.value, y.value) == (-2, 0x0123456789ABCDEF)

def test_a_bound_call_keeps_its_library_loaded():
  x, y = ctypes.c_int64(), ctypes.c_int64()
  bound = program().bind(ctypes.addressof(x), ctypes.addressof(y))
  gc.collect()   # the SubmitProgram and its function are gone: only the bound call holds the code now
  bound()
  assert (x.value, y.value) == (0x0123456789ABCDEF, -2)
