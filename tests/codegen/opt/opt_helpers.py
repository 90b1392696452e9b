"""Shared by the optimizer tests: run one kernel AST on the default device, bypassing the optimizer, and read its output."""
from __future__ import annotations
import copy
from typing import Any
import numpy as np
import pytest
from core.ir.ops import UOp
from core.device.registry import Device
from core.engine.run import buffer_of
from core.codegen.program import get_program, launch_vals, program_source

def kernel_of(fn: Any, *shapes: tuple[int, ...], rng: np.random.Generator) -> tuple[Any, np.ndarray]:
  """(the one schedule item of fn over random float32 tensors of `shapes`, fn over the same numpy arrays)."""
  from core import Tensor
  from core.schedule.kernelize import create_schedule
  xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  items, _, _ = create_schedule([fn(*[Tensor(x).realize() for x in xs]).uop])
  assert len(items) == 1, [it.ast.arg for it in items]
  return items[0], fn(*xs)

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

def host_renderer(simd_bytes: int) -> Any:
  """The default device's renderer as on a host with `simd_bytes`-wide vectors and 2 threads (16 ymm on AVX2, zmm on AVX-512)
  and the per-core L2 of the Zen 3 and Zen 5 we measure on (512 KiB, 1 MiB); skips where the default device is not CPU-style.
  Narrower than this host's vectors, it also takes that CPU's rules (the CPU plugin's narrowed: no AVX-512 vscalefps exp2 at 32)."""
  rnd = Device[Device.DEFAULT].renderer
  if not (rnd.supports_float4 and getattr(rnd, "threads", 0) >= 0 and not rnd.has_local): pytest.skip("a CPU-style renderer")
  rnd = rnd.narrowed(simd_bytes) if hasattr(rnd, "narrowed") else copy.copy(rnd)
  rnd.simd_width, rnd.threads, rnd.simd_regs = simd_bytes, 2, 16 if simd_bytes == 32 else 32
  rnd.l2_bytes = 512 << 10 if simd_bytes == 32 else 1 << 20
  return rnd
