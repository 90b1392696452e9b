"""Helpers for the CPU plugin tests: build linearized kernels by hand, and compile and run them on real buffers."""
from __future__ import annotations
import copy, functools, re
import numpy as np
from core.ir.dtype import AddrSpace, DType, dtypes, to_np
from core.ir.ops import UOp, Ops, AxisType
from core.device.target import Target

RENDERERS = ["C", "LLVM"]
# the C renderer as it renders for a compiler without _Float16 (clang < 15 on x86-64), whatever compiler this host has
C_EMULATED_HALF = "C-emulated-half"

@functools.cache
def device(renderer: str):
  from plugin_cpu.runtime import make_device
  if renderer == C_EMULATED_HALF:
    dev = copy.copy(device("C"))
    dev.renderer = copy.copy(dev.renderer)
    dev.renderer.native_half = False
    return dev
  return make_device("CPU", Target(device="CPU", renderer=renderer))

class Linear:
  """Appends nodes (and their not yet emitted sources) in dependency order: a hand-driven linearizer."""
  def __init__(self): self.uops: list[UOp] = []
  def add(self, *nodes: UOp) -> UOp:
    for n in nodes:
      for u in n.toposort():
        if u not in self.uops: self.uops.append(u)
    return nodes[-1]

def c(v, dt: DType = dtypes.int32) -> UOp: return UOp.const(dt, v)
def rng(n: int | UOp, axis: int = 0) -> UOp:
  return UOp(Ops.RANGE, dtypes.int32, (n if isinstance(n, UOp) else c(n),), (axis, AxisType.LOOP))
def buf(slot: int, dt: DType, n: int) -> UOp: return UOp.param(slot, dt.ptr(n))

def run(renderer: str, uops: list[UOp], arrays: list[np.ndarray], vals: tuple[int, ...] = (), name: str = "test_kernel",
        ren=None, compiler=None) -> list[np.ndarray]:
  """Renders, compiles and runs the kernel on copies of `arrays` (one per PARAM, in slot order); returns their contents after.
  `ren` and `compiler` replace the device's renderer and compiler."""
  dev = device(renderer)
  src = (ren or dev.renderer).render(name, uops)
  prg = dev.runtime(name, (compiler or dev.compiler).compile(src))
  handles = []
  for a in arrays:
    h = dev.allocator.alloc(max(a.nbytes, 1))
    dev.allocator._copyin(h, memoryview(np.ascontiguousarray(a)).cast("B"))
    handles.append(h)
  prg(*handles, vals=vals, wait=True)
  outs = []
  for a, h in zip(arrays, handles):
    o = np.empty_like(a)
    dev.allocator._copyout(memoryview(o).cast("B"), h)
    outs.append(o)
  return outs

def offset_row_sums(offsets: tuple[int, ...] = (1, 2), size: int = 40) -> list[UOp]:
  """out[i] = sum over j < 8 and o in `offsets` of x[i*8 + j + o], 4 rows (x of `size` floats) into a register accumulator: scalar
  loads at constant offsets from an index inside a reduce loop (an offset 0 indexes without the add)."""
  out, x = buf(0, dtypes.float32, 4), buf(1, dtypes.float32, size)
  acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1, AddrSpace.REG), (), 0)
  lin = Linear()
  lin.add(out, x, acc)
  i = lin.add(rng(4, 0))
  lin.add(acc.index(c(0)).store(c(0.0, dtypes.float32)))
  j = lin.add(UOp(Ops.RANGE, dtypes.int32, (c(8),), (1, AxisType.REDUCE)))
  total = acc.index(c(0)).load()
  for o in offsets: total = total + x.index(i * c(8) + j + c(o) if o else i * c(8) + j).load()
  lin.add(out.index(i).store(acc.after(lin.add(acc.index(c(0)).store(total).end(j))).index(c(0)).load()).end(i))
  return lin.uops

def lane_copy() -> list[UOp]:
  """out[k*4 + i] = x[i*8 + k]: 8 scalar loads and stores a step of one loop of 4, at constant offsets (k, 4k) from the row's
  index, all in the loop's one block (a tile's lanes, as the LLVM renderer addresses them: renderer._llvm_offset_index)."""
  out, x = buf(0, dtypes.float32, 32), buf(1, dtypes.float32, 32)
  lin = Linear()
  lin.add(out, x)
  i = lin.add(rng(4, 0))
  for k in range(8): lin.add(out.index(i + c(4 * k)).store(x.index(i * c(8) + c(k)).load()))
  lin.add(lin.uops[-1].end(i))
  return lin.uops

def elementwise(n: int, in_dtypes: list[DType], out_dtype: DType, fn, vec: int = 1) -> list[UOp]:
  """out[i] = fn(in0[i], in1[i], ...) over one loop of n; with `vec` > 1, fn maps vectors of `vec` lanes (vector loads and stores
  at i = vec * r)."""
  out = buf(0, out_dtype, n)
  ins = [buf(i + 1, dt, n) for i, dt in enumerate(in_dtypes)]
  lin = Linear()
  lin.add(out, *ins)
  r = lin.add(rng(n // vec))
  i = r if vec == 1 else r * c(vec)
  lin.add(out.index(i).store(fn(*[b.index(i).load() if vec == 1 else b.index(i).load(dtype=dt.vec(vec)) for b, dt in zip(ins, in_dtypes)])).end(r))
  return lin.uops

def np_dtype(dt: DType): return to_np(dt)

def run_on_renderer(ren: str, body: str, timeout: int = 300, **env: str) -> None:
  """Runs `body` (Python with numpy as np and core's Tensor imported) in a process of its own under DEV=CPU:<ren>, which picks
  the renderer at startup; it must print 'ok'. `env` adds environment variables."""
  import os, subprocess, sys
  code = ("import numpy as np\nfrom core import Tensor\nfrom core.device.registry import Device\n"
          f"assert type(Device['CPU'].renderer).__name__ == 'CPU{ren}Renderer'\n" + body)
  res = subprocess.run([sys.executable, "-c", code], env={**os.environ, "DEV": f"CPU:{ren}", **env}, capture_output=True, text=True,
                       timeout=timeout)
  assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]

def run_item(item, rnd, compiler=None, ast: UOp | None = None) -> tuple[list, str]:
  """Schedule item `item` rendered by the renderer object `rnd` (its own optimizer's choices, or `ast`: the item's kernel as the
  test optimized it) and compiled by `compiler` (the LLVM device's by default), run on this host over the item's buffers: (the
  buffers, the rendered source)."""
  from core.engine.run import buffer_of
  from core.codegen.program import get_program, launch_vals, program_source
  spec = get_program(item.ast, rnd) if ast is None else get_program(ast, rnd, optimize=False)
  src, bufs, dev = program_source(spec), [buffer_of(b) for b in item.bufs], device("LLVM")
  for b in bufs:
    if not b.is_allocated(): b.allocate()
  prg = dev.runtime(spec.arg.name, (compiler or dev.compiler).compile(src))
  prg(*[b._buf for b in bufs], global_size=spec.arg.global_size, local_size=spec.arg.local_size, vals=launch_vals(spec.arg, {}), wait=True)
  return bufs, src

def run_rendered(rnd, fn, *xs: np.ndarray) -> tuple[np.ndarray, str]:
  """fn over Tensors of xs as one kernel rendered by the renderer object `rnd` and run on the LLVM device over the schedule's
  buffers: (the output, flat; the rendered source)."""
  from core import Tensor
  bufs, src = run_item(sink_item(fn(*(Tensor(x).realize() for x in xs))), rnd)
  return bufs[0].numpy(), src

def arch_renderer(ren: str, arch: str):
  """The CPU plugin's LLVM or C renderer for the CPU model `arch` as DEV=CPU:<ren>:<arch> builds it (its vectors, registers and
  rules), also where this CPU lacks that model's features: sources only (the device refuses such a model, compiler.arch_flags)."""
  from plugin_cpu.c_renderer import CPUCRenderer
  from plugin_cpu.compiler import arch_flags
  from plugin_cpu.renderer import CPULLVMRenderer
  rnd = CPULLVMRenderer() if ren == "LLVM" else CPUCRenderer()
  rnd.arch = arch
  rnd.target(arch_flags(arch, runs_here=False))
  return rnd

# an AVX-512 target's flags, for tests that render its code on any host (renderer.target): rules key on flags, not the host
AVX512 = frozenset({"avx", "avx2", "fma", "avx512f", "avx512vl", "avx512dq", "avx512bw"})

def host_like_renderer(ren: str, simd_bytes: int, threads: int = 2):
  """The CPU plugin's LLVM or C renderer as on the hosts we measure: 32-byte vectors with 16 registers and the Zen 3's 512 KiB L2,
  or 64-byte ones with 32 registers and the Zen 5's 1 MiB (panel budgets of 256 and 512 KiB), on `threads` threads. Sources
  only: what it renders runs where the host has those vectors. Narrower than this host's vectors it also takes that CPU's
  rules (narrowed: on an AVX-512 host the 32-byte renderer renders as an AVX2 host's does, no vscalefps or 64-byte streams)."""
  from plugin_cpu.c_renderer import CPUCRenderer
  from plugin_cpu.renderer import CPULLVMRenderer
  rnd = (CPULLVMRenderer() if ren == "LLVM" else CPUCRenderer()).narrowed(simd_bytes)
  rnd.simd_width, rnd.simd_regs, rnd.threads = simd_bytes, 16 if simd_bytes == 32 else 32, threads
  rnd.l2_bytes = 512 << 10 if simd_bytes == 32 else 1 << 20
  if ren == "LLVM": rnd.target(rnd.flags)   # its rules that read the L2 (large_conv_in_place) as that host's
  return rnd

def sink_item(out):
  """The one kernel (SINK) item of the Tensor `out`'s schedule."""
  from core.schedule.kernelize import create_schedule
  (item,) = [it for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK]
  return item

def unroll_disabled(src: str) -> list[tuple[int, str]]:
  """(step count, loop id) of the loops of LLVM IR `src` whose back edge carries unroll.disable metadata; any other mark is an
  AVX2 register tile's unroll.count (renderer.fma_unroll_loops)."""
  if not (off := re.findall(r'^(!\d+) = !\{!"llvm.loop.unroll.disable"\}$', src, re.M)): return []
  counts = re.findall(r'^(!\d+) = !\{!"llvm.loop.unroll.count", i32 \d+\}$', src, re.M)
  out = []
  for loop, md in re.findall(r"br label %(loop\d+)\.head, !llvm.loop (!\d+)\n", src):
    if any(re.search(rf"^{md} = distinct !\{{{md}, {c}\}}$", src, re.M) for c in counts): continue
    assert re.search(rf"^{md} = distinct !\{{{md}, {off[0]}\}}$", src, re.M), src
    out.append((int(re.search(rf"^{loop}\.head:\n.*\n\s+%t\d+ = icmp slt i32 %ridx\d+, (\d+)", src, re.M).group(1)), md))
  return out

def unroll_disabled_steps(src: str) -> list[int]:
  """The step counts of the loops whose back edge carries unroll.disable metadata (unroll_disabled)."""
  return [n for n, _ in unroll_disabled(src)]

def numpy_conv(x: np.ndarray, w: np.ndarray, stride: int = 1, pad: int = 0) -> np.ndarray:
  """conv2d of NCHW `x` by OIHW `w` (square kernels) in float64."""
  k = w.shape[2]
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  oh, ow = (xp.shape[2] - k) // stride + 1, (xp.shape[3] - k) // stride + 1
  win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride][:, :, :oh, :ow]
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))
