"""A conv on the channel tile (vectors along the output channels over a packed weight panel, pixels broadcast from the padded
input: heuristic._channel_block) whose input lies beyond the renderer's panel budget prefetches, from the first and last load of
each window row, the same place one output row on (plugin_cpu/prefetch.window_offsets); products and convs without that pattern
render as before. Sources from both CPU renderers at AVX2 and AVX-512 widths (rendered, not run); results against numpy from
kernels rendered for either width and run on this host, and through Tensor under DEV=CPU:LLVM and CPU:C."""
from __future__ import annotations
import re
import numpy as np
import pytest
from cpu_kernels import host_like_renderer as _renderer, device, run_on_renderer
from core import Tensor
from core.device.registry import Device
import core.tensor.conv as conv
from core.schedule.kernelize import create_schedule
from core.engine.run import buffer_of
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, launch_vals, program_source
import plugin_cpu.prefetch as prefetch
from plugin_cpu.compiler import host_flags

# the prefetched address's distance from the loaded one, in elements, as each renderer writes it
PREFETCH = {"LLVM": r"= getelementptr float, ptr %\w+, i64 (\d+)\n  call void @llvm.prefetch.p0", "C": r"__builtin_prefetch\(.*?\)\+(\d+), 0, 3\)"}

@pytest.fixture(autouse=True)
def padded_copy(monkeypatch):
  # these convs read a padded copy of their input (rows of hw + 2), whatever the host: Renderer.large_conv_in_place off, and no
  # conv plan replayed from a test that built the same conv with it on (the plan's key holds the shapes, not the renderer)
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "large_conv_in_place", False)
  monkeypatch.setattr(conv, "replayed", lambda key, inputs, build: build())

def _conv(x: Tensor, w: Tensor, stride: int) -> Tensor: return x.conv2d(w, stride=stride, padding=1)

def _items(n: int, c: int, hw: int, o: int, stride: int = 1) -> list:
  x, w = Tensor(np.zeros((n, c, hw, hw), np.float32)), Tensor(np.zeros((o, c, 3, 3), np.float32))
  items, _, _ = create_schedule([_conv(x, w, stride).uop])
  return items

def _source(ren: str, simd_bytes: int, item, threads: int = 2) -> tuple[list, str]:
  rnd = _renderer(ren, simd_bytes, threads)   # a renderer of its own each time: programs are cached by renderer
  k = hand_coded(Kernel(item.ast, rnd))
  return list(k.applied), program_source(get_program(k.ast, rnd, optimize=False))

# 3x3 pad 1 convs on the channel tile with inputs beyond the panel budget, and the padded input's row step in elements (x a
# stride): rows of 28 on 16 and 8 lanes (ResNet's 28x28 stage; 900 KiB padded), rows of 56 on 16 lanes (the conv2d bench row's
# shape, 2 images: 1.6 MiB), its stride-2 conv to 128 channels
CASES = [(32, (2, 128, 28, 128), 30), (64, (2, 128, 28, 128), 30), (64, (2, 64, 56, 64), 58), (64, (2, 64, 56, 128, 2), 116)]

@pytest.mark.parametrize("ren", ["LLVM", "C"])
@pytest.mark.parametrize("simd_bytes,shape,row", CASES, ids=["AVX2 28", "AVX-512 28", "AVX-512 56", "AVX-512 56/2"])
def test_channel_tile_prefetches_the_next_input_row(simd_bytes, shape, row, ren):
  applied, src = _source(ren, simd_bytes, _items(*shape)[-1])
  assert any(o.op is OptOps.PACK for o in applied), applied
  offs = re.findall(PREFETCH[ren], src)
  # two loads a window row prefetch (the kernel rows are a loop; its columns unrolled), one line each
  assert offs.count(str(row)) == 2, (row, offs)

# rows of 56 are whole vectors only on AVX2's 8 lanes, and only the C renderer keeps the row tile there (the LLVM renderer takes
# the channel tile, heuristic.CHANNEL_ODD_ROWS, whose prefetch test_channel_tile_prefetches_the_next_input_row checks)
OTHER_CONVS = [pytest.param(shape, simd_bytes, ren, id=f"{name}-{simd_name}-{ren}")
               for shape, name in [((8, 512, 7, 512), "7x7: next image"), ((1, 64, 28, 64), "in the L2"), ((2, 64, 56, 64), "56")]
               for simd_bytes, simd_name in [(32, "AVX2"), (64, "AVX-512")] for ren in ["LLVM", "C"]
               if not (shape[2] == 56 and (simd_bytes == 64 or ren == "LLVM"))]

@pytest.mark.parametrize("shape, simd_bytes, ren", OTHER_CONVS)
@pytest.mark.parametrize("threads", [1, 2])
def test_other_convs_render_as_without_the_rule(shape, simd_bytes, ren, threads, monkeypatch):
  item = _items(*shape)[-1]
  with_rule = _source(ren, simd_bytes, item, threads)[1]
  monkeypatch.setattr(prefetch, "WINDOW_PREFETCH", False)
  assert _source(ren, simd_bytes, item, threads)[1] == with_rule

@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
def test_matmul_renders_as_without_the_rule(simd_bytes, monkeypatch):
  # its row-side input is broadcast as well, but no loop inside its row blocks steps along a row
  (item,), _, _ = create_schedule([(Tensor(np.zeros((1024, 1024), np.float32)) @ Tensor(np.zeros((1024, 1024), np.float32))).uop])
  with_rule = _source("LLVM", simd_bytes, item)[1]
  monkeypatch.setattr(prefetch, "WINDOW_PREFETCH", False)
  assert _source("LLVM", simd_bytes, item)[1] == with_rule

def _reference(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
  n, c, hw, _ = x.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  oh = (hw - 1) // stride + 1
  cols = np.stack([xp[:, :, i:i + stride * oh:stride, j:j + stride * oh:stride] for i in range(3) for j in range(3)], axis=2)
  return np.einsum("nckhw,ock->nohw", cols, w.reshape(w.shape[0], c, 9).astype(np.float64))

@pytest.mark.parametrize("simd_bytes,shape,row", CASES, ids=["AVX2 28", "AVX-512 28", "AVX-512 56", "AVX-512 56/2"])
def test_prefetching_kernels_give_numpys_results(simd_bytes, shape, row):
  # the pad kernels as the host runs them, then the conv kernel rendered for `simd_bytes` (its prefetches checked) on this host
  if simd_bytes == 64 and "avx512f" not in host_flags(): pytest.skip("runs 64-byte vector code: a host with avx512f")
  n, c, hw, o, *st = shape
  r = np.random.default_rng(n * c + hw + o)
  x, w = r.standard_normal((n, c, hw, hw), dtype=np.float32), r.standard_normal((o, c, 3, 3), dtype=np.float32)
  items, _, _ = create_schedule([_conv(Tensor(x).realize(), Tensor(w).realize(), st[0] if st else 1).uop])
  dev, host = device("LLVM"), device("LLVM").renderer
  for i, it in enumerate(items):
    spec = get_program(it.ast, _renderer("LLVM", simd_bytes) if i == len(items) - 1 else host)
    if i == len(items) - 1: assert re.findall(PREFETCH["LLVM"], program_source(spec)).count(str(row)) == 2
    bufs = [buffer_of(b) for b in it.bufs]
    for b in bufs:
      if not b.is_allocated(): b.allocate()
    prg = dev.runtime(spec.arg.name, dev.compiler.compile(program_source(spec)))
    prg(*[b._buf for b in bufs], global_size=spec.arg.global_size, vals=launch_vals(spec.arg, {}), wait=True)
  want = _reference(x, w, st[0] if st else 1)
  got = buffer_of(items[-1].bufs[0]).numpy().reshape(want.shape)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

@pytest.mark.parametrize("ren", ["LLVM", "C"])
def test_convs_give_numpys_results(ren):
  # in a process of its own: DEV=CPU:<ren> picks the renderer (this host's width)
  run_on_renderer(ren, (
    "import sys\n"
    f"sys.path.insert(0, {__import__('os').path.dirname(__file__)!r})\n"
    "from test_window_prefetch import _reference\n"
    "for n, c, hw, o, s in ((2, 128, 28, 128, 1), (2, 64, 56, 64, 1), (2, 64, 56, 128, 2), (3, 32, 30, 48, 1)):\n"
    "  r = np.random.default_rng(n * c + hw + o)\n"
    "  x, w = r.standard_normal((n, c, hw, hw), dtype=np.float32), r.standard_normal((o, c, 3, 3), dtype=np.float32)\n"
    "  want = _reference(x, w, s)\n"
    "  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), stride=s, padding=1).numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())\n"
    "print('ok')\n"))
