"""The MSL renderer, checked on the NULL device (DEV=NULL:METAL): representative Tensor programs are rendered to MSL and every
kernel is checked by clang++ against the host <metal_stdlib>; the text carries Metal's forms. One subprocess: DEV is read once."""
from __future__ import annotations
import json, os, re, subprocess, sys
import pytest
from metal_tools import need_cxx

SCRIPT = r'''
import json, numpy as np
from core.tensor.tensor import Tensor
from core.ir.dtype import dtypes
from core.engine import run
x = Tensor(np.linspace(-3, 3, 96, dtype=np.float32).reshape(8, 12))
progs = {"add": x + 1, "exp_log": x.exp2().log2(), "sin": x.sin(), "sqrt": x.abs().sqrt(), "half": x.cast(dtypes.float16) * 2,
         "bfloat": x.cast(dtypes.bfloat16).sum(1), "idiv": x.cast(dtypes.int32) // 3, "long": x.cast(dtypes.int64) * 7 >> 1,
         "bitcast": x.bitcast(dtypes.uint32) & 0x7fffffff, "group_sum": Tensor.ones(64, 4096).sum(1), "where": (x > 0).where(x, -x),
         "matmul": x @ Tensor.ones(12, 5)}
out = {}
for name, p in progs.items():
  before = set(run._runners)
  p.realize()
  out[name] = [run._runners[k].program.src[3].arg for k in set(run._runners) - before]
print("RESULT " + json.dumps(out))
'''

@pytest.fixture(scope="module")
def sources() -> dict[str, list[str]]:
  need_cxx()
  env = dict(os.environ, DEV="NULL:METAL", CORE_DISABLE_COMPILER_CACHE="1")
  p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900)
  assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
  return json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))[7:])

def test_every_kernel_is_a_metal_kernel_function(sources: dict[str, list[str]]) -> None:
  for name, srcs in sources.items():
    assert srcs, name
    for s in srcs:
      assert s.startswith("#include <metal_stdlib>\nusing namespace metal;\n") and "kernel void " in s, name
      assert "device " in s and "[[buffer(0)]]" in s and "[[threadgroup_position_in_grid]]" in s, name
      assert "double" not in s and "long long" not in s and not re.search(r"\dll\b", s), name   # Metal has neither

def test_grouped_reduction_uses_threadgroup_memory_and_barriers(sources: dict[str, list[str]]) -> None:
  s = "\n".join(sources["group_sum"])
  assert "\n  threadgroup float temp" in s and "threadgroup_barrier(mem_flags::mem_threadgroup);" in s and "lid." in s

def test_dtypes_and_math_take_metal_forms(sources: dict[str, list[str]]) -> None:
  assert "half" in sources["half"][0]
  assert "bfloat" in "".join(sources["bfloat"])
  assert "as_type<uint>(" in sources["bitcast"][0]
  assert "precise::exp2(" in sources["exp_log"][0] and "precise::log2(" in sources["exp_log"][0]
  assert "precise::sin(" in sources["sin"][0] and "precise::sqrt(" in sources["sqrt"][0]
  assert "long " in sources["long"][0]

def test_check_compiler_rejects_wrong_msl() -> None:
  need_cxx()
  from core.device.compiler import CompileError
  from plugin_metal.compiler import MetalCheckCompiler
  good = "#include <metal_stdlib>\nusing namespace metal;\nkernel void k(device float* d [[buffer(0)]], uint3 gid [[threadgroup_position_in_grid]]) { d[gid.x] = precise::exp2(d[gid.x]); }\n"
  assert MetalCheckCompiler().compile(good) == good.encode()
  with pytest.raises(CompileError, match="undeclared identifier"): MetalCheckCompiler().compile(good.replace("d[gid.x] =", "e[gid.x] ="))
  # a `constant` argument is read-only
  with pytest.raises(CompileError): MetalCheckCompiler().compile(good.replace("device float* d", "constant float* d"))

def test_check_compiler_rejects_a_cast_between_address_spaces() -> None:
  need_cxx()
  from core.device.compiler import CompileError
  from plugin_metal.compiler import MetalCheckCompiler
  src = ("#include <metal_stdlib>\nusing namespace metal;\nkernel void k(device float* d [[buffer(0)]], uint3 gid [[threadgroup_position_in_grid]], "
         "uint3 lid [[thread_position_in_threadgroup]]) {\n  threadgroup float temp0[16];\n  temp0[lid.x] = d[lid.x];\n"
         "  threadgroup_barrier(mem_flags::mem_threadgroup);\n  d[lid.x] = *((threadgroup float*)(temp0+15-lid.x));\n}\n")
  assert MetalCheckCompiler().compile(src) == src.encode()
  with pytest.raises(CompileError, match="address space"): MetalCheckCompiler().compile(src.replace("(threadgroup float*)", "(device float*)"))
