"""The LLVM renderer writes no instruction whose value nothing reads: a register transpose's lanes (GEPs only read by
VECTORIZEs rendered as shufflevectors) and (index + constant) adds only read by INDEXes addressed from their base
(renderer.unused_values). A 3x3 conv with a residual add wrote 2112 such extractelements and 76 such adds among 3059
instructions for LLVM to parse and delete. Results against numpy."""
import re
import numpy as np
import pytest
from cpu_kernels import AVX512, host_like_renderer, run_item
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
from plugin_cpu.renderer import host_flags

def _unread(src: str) -> list[str]:
  """The instructions of `src` that define a value no other line reads."""
  defs = re.findall(r"^\s*(%[\w.]+) = (.*)$", src, re.M)
  reads = set(re.findall(r"(%[\w.]+)\b(?! =)", src))
  return [f"{v} = {d}" for v, d in defs if v not in reads and not d.startswith(("alloca", "load", "call"))]

def _conv_item(x: np.ndarray, w: np.ndarray, res: np.ndarray):
  out = (Tensor(x).conv2d(Tensor(w), padding=1) + Tensor(res)).relu()
  (item,) = [it for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK]
  return item

@pytest.mark.parametrize("simd", [32, 64])
def test_a_conv_with_transposed_tiles_writes_no_unread_value(simd):
  z = np.zeros((1, 32, 14, 14), np.float32)
  rnd = host_like_renderer("LLVM", simd, threads=0)
  if simd == 64: rnd.target(AVX512)
  src = program_source(get_program(_conv_item(z, np.zeros((32, 32, 3, 3), np.float32), z).ast, rnd))
  if simd == 64: assert src.count("shufflevector") > 100   # the tile's transposes (load_rows, tile_rows)
  assert _unread(src) == [], _unread(src)[:10]

def test_the_conv_gives_numpys_values():
  r = np.random.default_rng(11)
  shape = (2, 32, 14, 14)
  x, res = r.standard_normal(shape).astype(np.float32), r.standard_normal(shape).astype(np.float32)
  w = r.standard_normal((32, 32, 3, 3)).astype(np.float32)
  bufs, src = run_item(_conv_item(x, w, res), host_like_renderer("LLVM", 64 if "avx512f" in host_flags() else 32, threads=0))
  assert _unread(src) == []
  p = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  ref = sum(np.einsum("nchw,oc->nohw", p[:, :, i:i + 14, j:j + 14], w[:, :, i, j]) for i in range(3) for j in range(3))
  np.testing.assert_allclose(bufs[0].numpy().reshape(shape), np.maximum(ref + res, 0), rtol=1e-4, atol=1e-4)
