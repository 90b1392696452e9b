"""A thread block's index (gidx0, an i32 argument) is masked to the bits of its block count on targets with vectors under 64
bytes (CPULLVMRenderer.render_special): LLVM then knows its range, widens the 32-bit index arithmetic that adds it, and folds
each load's constant offset into its address, where every broadcast of a threaded kernel took a lea and a sign extension (the
stem's weight gradient in znver3 code: 26). AVX-512 code keeps the argument as it is. Sources for explicit targets; values
against numpy on this host."""
from __future__ import annotations
import platform, re
import numpy as np
import pytest
from cpu_kernels import arch_renderer, run_rendered
from core import Tensor
from core.codegen.opt import Kernel
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from plugin_cpu.renderer import CPULLVMRenderer

def _threaded(arch: str) -> CPULLVMRenderer:
  rnd = arch_renderer("LLVM", arch)
  rnd.threads = 2
  return rnd

def _conv(x, w): return x.conv2d(w)
def _matmul(a, b): return a @ b

@pytest.mark.parametrize("fn, shapes", [(_conv, [(4, 8, 34, 34), (16, 8, 3, 3)]), (_matmul, [(192, 256), (256, 160)])], ids=["conv", "matmul"])
def test_avx2_block_index_masked_to_block_count(fn, shapes):
  rng = np.random.default_rng(0)
  xs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
  want = fn(*[x.astype(np.float64) for x in xs]) if fn is _matmul else None
  if want is None:   # a valid 3x3 conv in float64
    x, w = (a.astype(np.float64) for a in xs)
    want = sum(np.einsum("nchw,oc->nohw", x[:, :, i:i + 32, j:j + 32], w[:, :, i, j]) for i in range(3) for j in range(3))
  got, src = run_rendered(_threaded("znver3"), fn, *xs)
  blocks = re.search(r"%\S+ = and i32 %gidx0, (\d+)", src)
  assert blocks is not None, src[:2000]
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
  (item,) = [it for it in create_schedule([fn(*(Tensor(x).realize() for x in xs)).uop])[0] if it.ast.op is Ops.SINK]
  src512 = program_source(get_program(item.ast, _threaded("x86-64-v4")))   # the source only: it runs where AVX-512 does
  assert "and i32 %gidx0" not in src512

def test_avx2_threaded_broadcasts_take_no_sign_extension():
  if platform.machine() != "x86_64": pytest.skip("x86-64 code")
  from plugin_cpu.compiler import LLVMCompiler
  # the stem's weight gradient (8x3x224x224 7x7/2 -> 64): its main kernel broadcasts 15 inputs per 24 FMAs at offsets a row apart
  x, g = Tensor(np.zeros((8, 3, 224, 224), np.float32)), Tensor(np.zeros((8, 64, 112, 112), np.float32))
  w = Tensor(np.zeros((64, 3, 7, 7), np.float32), requires_grad=True)
  (gw,) = (x.conv2d(w, stride=2, padding=3) * g).sum().gradient(w)
  items, _, _ = create_schedule([gw.uop])
  rnd, comp = _threaded("znver3"), LLVMCompiler(cpu="znver3")
  main = max((it for it in items if it.ast.op.name == "SINK"), key=lambda it: len(list(it.ast.toposort())))
  k = hand_coded(Kernel(main.ast, rnd))
  asm = comp.disassemble(comp.compile(program_source(get_program(k.ast, rnd, optimize=False))))
  assert len(re.findall(r"\tvbroadcastss", asm)) >= 15
  # two outside the loops (the code before this had 26: one per broadcast and load of the inner loop)
  assert len(re.findall(r"\t(?:cltq|movslq)\b", asm)) <= 2

@pytest.mark.parametrize("shape", [(48, 64, 96), (1000, 32, 24)])
def test_avx2_block_index_mask_keeps_every_block_of_a_count_not_a_power_of_two(shape):
  # the mask is all the bits below the count's next power of two (6 blocks: 7, 167: 255), so no block index loses a bit;
  # the cases above have 2 and 4 blocks, where the count less one would pass too
  from core.ir.ops import Ops
  m, k, n = shape
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
  rnd = _threaded("znver3")
  rnd.l2_bytes = 512 << 10
  (item,) = [it for it in create_schedule([_matmul(Tensor(a), Tensor(b)).uop])[0] if it.ast.op is Ops.SINK]
  blocks = get_program(item.ast, rnd).arg.global_size[0]
  assert blocks > 2 and blocks & (blocks - 1), blocks
  got, src = run_rendered(rnd, _matmul, a, b)
  assert re.search(rf"= and i32 %gidx0, {(1 << (blocks - 1).bit_length()) - 1}\n", src), src[:2000]
  np.testing.assert_allclose(got.reshape(m, n), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
