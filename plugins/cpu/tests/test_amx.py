"""bf16 x bf16 -> float32 matmuls on AMX tiles (plugin_cpu/amx.py): which kernels the LLVM renderer writes whole, the structure
of their source (rendered for an AMX target's flags on any host), and, where this host has AMX, their results against numpy's
float64 product of the same bf16 values, on the thread pool, and the tile-data permission they need."""
import os, subprocess, sys
import numpy as np
import pytest
from core import Tensor
from core.codegen.program import get_program, program_source
from core.schedule.kernelize import create_schedule
from core.ir.ops import Ops
from plugin_cpu.amx import Matmul, blocks, match_matmul
from plugin_cpu.compiler import host_flags
from cpu_kernels import AVX512

BF16_TARGET = AVX512 | {"avx512_bf16"}
AMX_TARGET = BF16_TARGET | {"amx_tile", "amx_bf16"}
HOST_AMX = {"amx_tile", "amx_bf16"} <= host_flags()

def _ast(out: Tensor):
  (item,) = [it for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK and it.ast.src]
  return item.ast

def _bf16(*shape: int) -> Tensor: return Tensor(np.ones(shape, np.float32)).cast("bfloat16").realize()

def _renderer(flags: frozenset[str]):
  from plugin_cpu.renderer import CPULLVMRenderer
  rnd = CPULLVMRenderer()
  rnd.target(flags)
  rnd.threads = 2
  return rnd

def test_match_plain_matmul():
  assert match_matmul(_ast(_bf16(64, 160).matmul(_bf16(160, 96), dtype="float32"))) == Matmul(64, 96, 160, 0, 1, 2)
  assert match_matmul(_ast(_bf16(1024, 32).matmul(_bf16(32, 64), dtype="float32"))) == Matmul(1024, 64, 32, 0, 1, 2)

@pytest.mark.parametrize("case", ["transposed_b", "ragged_m", "ragged_k", "batched", "float32", "bf16_out"])
def test_no_match(case):
  """What the tile kernel does not compute keeps the usual path: B read by columns, sizes not multiples of 32, a batch axis, float32
  inputs, a bf16 result."""
  out = {"transposed_b": lambda: _bf16(64, 64).matmul(_bf16(96, 64).T, dtype="float32"),
         "ragged_m": lambda: _bf16(48, 64).matmul(_bf16(64, 64), dtype="float32"),
         "ragged_k": lambda: _bf16(64, 80).matmul(_bf16(80, 64), dtype="float32"),
         "batched": lambda: _bf16(2, 64, 64).matmul(_bf16(2, 64, 64), dtype="float32"),
         "float32": lambda: Tensor(np.ones((64, 64), np.float32)).realize() @ Tensor(np.ones((64, 64), np.float32)).realize(),
         "bf16_out": lambda: _bf16(64, 64).matmul(_bf16(64, 64))}[case]()
  assert match_matmul(_ast(out)) is None

def test_blocks():
  # the largest blocks that divide (a copy of B within 256 KiB), halved (rows first) until each of 2 threads has at least 2
  assert blocks(Matmul(1024, 1024, 1024, 0, 1, 2), 2) == (256, 128, 1024)
  assert blocks(Matmul(512, 512, 2048, 0, 1, 2), 2) == (256, 128, 1024)
  assert blocks(Matmul(256, 256, 96, 0, 1, 2), 2) == (128, 128, 32)
  assert blocks(Matmul(32, 512, 64, 0, 1, 2), 2) == (32, 128, 64)
  assert blocks(Matmul(64, 96, 160, 0, 1, 2), 2) == (32, 32, 32)

def test_renders_tiles_for_an_amx_target(monkeypatch):
  """An AMX target's matmul is the tile kernel: 4 tile products (2x2 accumulators), A's tiles read in place with its row stride,
  B's from the VNNI copy, one block per 256x256 outputs; a target without AMX, or CPU_AMX=0, keeps the vdpbf16ps path."""
  ast = _ast(_bf16(1024, 512).matmul(_bf16(512, 768), dtype="float32"))
  p = get_program(ast, _renderer(AMX_TARGET))
  src = program_source(p)
  assert src.count("@llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64") == 4
  assert "i64 1024)" in src and "i64 64)" in src   # A's row stride (512 bf16), the copy's (32 bf16)
  assert "dpbf16ps.512" not in src and p.arg.global_size == (4 * 3, 1, 1)
  assert p.arg.estimates["ops"] == 2 * 1024 * 512 * 768
  assert "tdpbf16ps" not in program_source(get_program(ast, _renderer(BF16_TARGET)))
  monkeypatch.setenv("CPU_AMX", "0")
  src = program_source(get_program(ast, _renderer(AMX_TARGET)))
  assert "tdpbf16ps" not in src and "dpbf16ps.512" in src

def test_an_avx2_rendering_has_no_tiles():
  """The narrowed (AVX2) renderer drops AMX with AVX-512: an AMX CPU has AVX-512, a rendering for 32-byte vectors is another CPU's."""
  assert not _renderer(AMX_TARGET).narrowed(32).amx

CHILD = """
import numpy as np
from core import Tensor, Device
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
assert Device[Device.DEFAULT].renderer.amx   # make_device was granted the tile registers
rng = np.random.default_rng(3)
def bf16_exact(x):
  bits = x.view(np.uint32)
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
paths = []
for m, k, n in ((64, 160, 96), (256, 1024, 512), (32, 32, 32), (512, 64, 1024), (48, 64, 64)):
  a, b = bf16_exact(rng.standard_normal((m, k), dtype=np.float32)), bf16_exact(rng.standard_normal((k, n), dtype=np.float32))
  out = Tensor(a).cast("bfloat16").realize().matmul(Tensor(b).cast("bfloat16").realize(), dtype="float32")
  items, _, _ = create_schedule([out.uop])
  paths.append(any("tdpbf16ps" in program_source(get_program(it.ast, Device[Device.DEFAULT].renderer)) for it in items))
  got, want = out.numpy(), a.astype(np.float64) @ b
  # exact products summed in float32: within a few float32 roundings of sum(|a*b|) (a wrong layout or a lost chunk is off by O(1))
  bound = 2.0 ** -14 * (np.abs(a).astype(np.float64) @ np.abs(b))
  assert (np.abs(got - want) <= bound).all(), (m, k, n, float(np.abs(got - want).max()))
print(*["amx" if p else "plain" for p in paths], "ok")
"""

@pytest.mark.skipif(not HOST_AMX, reason="this CPU has no AMX tiles with bf16 (amx_tile, amx_bf16)")
def test_amx_matmul_matches_numpy():
  env = dict(os.environ, DEV="CPU:LLVM")
  env.pop("CPU_AMX", None)
  res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600)
  assert res.returncode == 0 and res.stdout.split()[-6:] == ["amx"] * 4 + ["plain", "ok"], res.stdout + res.stderr[-3000:]

PERMISSION = """
import ctypes
from plugin_cpu.amx import ARCH_GET_XCOMP_PERM, SYS_ARCH_PRCTL, XFEATURE_XTILEDATA, request_tile_data
def granted():
  bits = ctypes.c_uint64(0)
  assert ctypes.CDLL(None).syscall(SYS_ARCH_PRCTL, ARCH_GET_XCOMP_PERM, ctypes.byref(bits)) == 0
  return bool(bits.value >> XFEATURE_XTILEDATA & 1)
print(granted(), request_tile_data(), granted())
"""

@pytest.mark.skipif(not HOST_AMX, reason="this CPU has no AMX tiles with bf16 (amx_tile, amx_bf16)")
def test_request_tile_data():
  """A new process has no tile registers until it asks (Linux's arch_prctl(ARCH_REQ_XCOMP_PERM)); the request grants them."""
  res = subprocess.run([sys.executable, "-c", PERMISSION], capture_output=True, text=True, timeout=120)
  assert res.stdout.split() == ["False", "True", "True"], res.stdout + res.stderr[-3000:]

SAVE_OR_REPLAY = """
import sys
import numpy as np
from core import Device, Jit, Tensor
from core.engine.export import load_replay, read_graph
from core.tensor.jit_export import export_jit
a, b = np.random.default_rng(5).standard_normal((2, 64, 64), dtype=np.float32)
bf = lambda x: Tensor(x).cast("bfloat16").realize()
if sys.argv[1] == "save":
  jit = Jit(lambda x, y: x.matmul(y, dtype="float32").contiguous())
  for _ in range(2): jit(bf(a), bf(b))
  export_jit(jit).save(sys.argv[2])
else:
  assert not Device[Device.DEFAULT].renderer.amx   # CPU_AMX=0: this process renders no tiles
  (out,) = load_replay(read_graph(sys.argv[2]), Device.DEFAULT)([bf(x).bitcast("uint16").numpy().tobytes() for x in (a, b)])
  want = bf(a).float().numpy().astype(np.float64) @ bf(b).float().numpy()
  print(float(np.abs(np.frombuffer(out.as_buffer(), np.float32).reshape(64, 64) - want).max()))
"""

@pytest.mark.skipif(not HOST_AMX, reason="this CPU has no AMX tiles with bf16 (amx_tile, amx_bf16)")
def test_a_compiled_files_tile_kernel_runs_with_amx_off(tmp_path):
  """A file compiled with the tiles replays in a process with CPU_AMX=0 (same device kind): make_device still asked for them."""
  path, env = str(tmp_path / "mm.core"), dict(os.environ, DEV="CPU:LLVM")
  env.pop("CPU_AMX", None)
  res = subprocess.run([sys.executable, "-c", SAVE_OR_REPLAY, "save", path], capture_output=True, text=True, env=env, timeout=600)
  assert res.returncode == 0, res.stderr[-3000:]
  from core.engine.export import read_graph
  assert "tdpbf16ps" in read_graph(path).programs[-1].source
  res = subprocess.run([sys.executable, "-c", SAVE_OR_REPLAY, "replay", path], capture_output=True, text=True,
                       env=dict(env, CPU_AMX="0"), timeout=600)
  assert res.returncode == 0 and float(res.stdout.split()[-1]) < 1e-3, res.stdout + res.stderr[-3000:]
