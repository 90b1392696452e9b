"""Shared by the optimizer tests: run one kernel AST on the default device, bypassing the optimizer, and read its output."""
from __future__ import annotations
import copy
from typing import Any, Callable
import numpy as np
import pytest
from core.ir.ops import UOp
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.device.registry import Device
from core.engine.run import buffer_of
from core.codegen.program import get_program, launch_vals, program_source

def kernel_of(fn: Any, *shapes: tuple[int, ...], rng: np.random.Generator) -> tuple[Any, np.ndarray]:
  """(the one schedule item of fn over random float32 tensors of `shapes`, fn over the same numpy arrays)."""
  xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  return product_item(fn, *xs), fn(*xs)

def product_item(fn: Any, *arrays: np.ndarray) -> Any:
  """The one schedule item of fn over realized tensors of `arrays`."""
  from core import Tensor
  from core.schedule.kernelize import create_schedule
  items, _, _ = create_schedule([fn(*[Tensor(a).realize() for a in arrays]).uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  return items[0]

def conv1x1_item(rng: np.random.Generator, n: int, c: int, hw: int, o: int, stride: int = 1) -> tuple[Any, np.ndarray]:
  """(the schedule item of a 1x1 conv of n x c x hw x hw float32 images to o channels, its float64 result by numpy)."""
  x, w = rng.standard_normal((n, c, hw, hw)).astype(np.float32), rng.standard_normal((o, c, 1, 1)).astype(np.float32)
  item = product_item(lambda a, b: a.conv2d(b, stride=stride), x, w)
  return item, np.einsum("nchw,oc->nohw", x[:, :, ::stride, ::stride].astype(np.float64), w[:, :, 0, 0].astype(np.float64))

def matmul_item(rng: np.random.Generator, m: int, kk: int, n: int) -> tuple[Any, np.ndarray]:
  """(the schedule item of an m x kk @ kk x n float32 matmul, its float64 result by numpy)."""
  a, b = rng.standard_normal((m, kk)).astype(np.float32), rng.standard_normal((kk, n)).astype(np.float32)
  return product_item(lambda p, q: p @ q, a, b), a.astype(np.float64) @ b

def register_tile(applied: list[Any]) -> tuple[int, int, int]:
  """(lanes, vectors, rows) of a kernel's register tile from its applied opts: the first UPCAST (the lanes), the others of its
  axis (more vectors) and of the other axes (rows)."""
  from core.codegen.opt import OptOps
  ups = [o for o in applied if o.op is OptOps.UPCAST]
  assert ups, applied
  vecs = [o.amt for o in ups[1:] if o.axis == ups[0].axis]
  rows = [o.amt for o in ups[1:] if o.axis != ups[0].axis]
  return ups[0].amt, int(np.prod(vecs or [1])), int(np.prod(rows or [1]))

def permute_fn(perm: tuple[int, ...]) -> Callable[[Any], Any]:
  """x.permute(*perm).contiguous() for a Tensor, x.transpose(perm) for numpy's reference (kernel_of's fn)."""
  return lambda x: x.permute(*perm).contiguous() if hasattr(x, "uop") else x.transpose(perm)

def permuted_kernel(shape: tuple[int, ...], perm: tuple[int, ...], simd_bytes: int, threads: int, rng: np.random.Generator) -> tuple[Any, Any]:
  """(the hand-coded Kernel of a permute of a `shape` array on host_renderer(simd_bytes) with `threads`, that renderer); its
  values checked against numpy's."""
  item, want = kernel_of(permute_fn(perm), shape, rng=rng)
  rnd = host_renderer(simd_bytes)
  rnd.threads = threads
  k = hand_coded(Kernel(item.ast, rnd))
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_array_equal(got.reshape(want.shape), want)
  return k, rnd

def run_ast(item: Any, ast: UOp, renderer: Any = None) -> tuple[np.ndarray, Any]:
  """(the kernel's first buffer after one run of `ast` over `item`'s buffers, its ProgramSpec)."""
  dev = Device[Device.DEFAULT]
  renderer = renderer or dev.renderer
  spec = get_program(ast, renderer, optimize=False)
  bufs = [buffer_of(b) for b in item.bufs]
  for b in bufs:
    if not b.is_allocated(): b.allocate()
  prg = dev.runtime(spec.arg.name, dev.compiler.compile_cached(program_source(spec)))
  prg(*[b._buf for b in bufs], global_size=spec.arg.global_size, local_size=spec.arg.local_size, vals=launch_vals(spec.arg, {}), wait=True)
  return bufs[0].numpy(), spec

def host_renderer(simd_bytes: int, masked: bool = False) -> Any:
  """The default device's renderer as on a host with `simd_bytes`-wide vectors and 2 threads (16 ymm on AVX2, zmm on AVX-512)
  and the per-core L2 of the Zen 3 and Zen 5 we measure on (512 KiB, 1 MiB); skips where the default device is not CPU-style.
  Narrower than this host's vectors, it also takes that CPU's rules (the CPU plugin's narrowed: no AVX-512 vscalefps exp2 at 32).
  masked: for the choices Renderer.masked_vectors decides, a renderer that masks a vector's pad lanes: where the default's masks
  none (the CPU plugin's C renderer) the CPU plugin's LLVM renderer, whose kernels the default device may not build: run the
  default renderer's own plan there."""
  rnd = Device[Device.DEFAULT].renderer
  if not (rnd.supports_float4 and rnd.threads >= 0 and not rnd.has_local): pytest.skip("a CPU-style renderer")
  if masked and not rnd.masked_vectors: rnd = _masking_renderer(rnd)
  rnd = rnd.narrowed(simd_bytes) if hasattr(rnd, "narrowed") else copy.copy(rnd)
  rnd.simd_width, rnd.threads, rnd.simd_regs = simd_bytes, 2, 16 if simd_bytes == 32 else 32
  rnd.l2_bytes = 512 << 10 if simd_bytes == 32 else 1 << 20
  rnd.stream_min_bytes = 0   # this host's streaming bound not known (its L3's): tests of what depends on it set one
  return rnd

def conv_sources(shortcut_off: Callable[[], Any]) -> tuple[str, str]:
  """The source of a conv whose stores go lane by lane on 16 lanes and whose loads are unrolled copies (2x8x5x56, 32 3x3
  filters, pad 1, host_renderer(64)), as built and again after `shortcut_off()` (a monkeypatch of a codegen shortcut)."""
  from core import Tensor
  from core.codegen.program import _program
  from core.schedule.kernelize import create_schedule
  x, w = Tensor(np.ones((2, 8, 5, 56), np.float32)).realize(), Tensor(np.ones((32, 8, 3, 3), np.float32)).realize()
  items, _, _ = create_schedule([x.conv2d(w, padding=1).uop])
  rnd = host_renderer(64)
  built = program_source(_program(items[-1].ast, rnd, True))
  shortcut_off()
  return built, program_source(_program(items[-1].ast, rnd, True))

def _masking_renderer(rnd: Any) -> Any:
  """The CPU plugin's LLVM renderer for `rnd`'s CPU model: it masks the pad lanes of a row's last vector."""
  try: from plugin_cpu.renderer import CPULLVMRenderer
  except ImportError: pytest.skip(f"a renderer with masked vectors ({type(rnd).__name__} has none)")
  return CPULLVMRenderer(arch=getattr(rnd, "arch", None))
