"""A large regular conv reads its padded input in place, with images as its outer blocks, only where the target has AVX-512's
masked loads (CPULLVMRenderer.large_conv_in_place): x86-64-v4 yes; haswell, znver3 and the C renderer keep the padded copy."""
from __future__ import annotations
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from cpu_kernels import arch_renderer, run_rendered
from core import Tensor
from core.device.registry import Device
import core.tensor.conv as conv
from core.codegen.opt import Kernel, OptOps
from core.device.compiler import CompileError
from core.codegen.opt.heuristic import hand_coded
from core.codegen.opt.kernel import range_size
from core.ir.ops import AxisType
from core.schedule.kernelize import create_schedule
from plugin_cpu.compiler import arch_flags
from plugin_cpu.c_renderer import CPUCRenderer

@pytest.mark.parametrize("arch, on", [("x86-64-v4", True), ("haswell", False), ("znver3", False)])
def test_large_conv_in_place_by_target(arch, on):
  rnd = arch_renderer("LLVM", arch)
  rnd.l2_bytes = 1 << 20   # a Zen 4/5's L2, whatever this host's (2 MiB keeps the copy: test_big_l2_conv_copy)
  rnd.target(rnd.flags)
  assert rnd.large_conv_in_place is on
  assert arch_renderer("LLVM", arch).narrowed(32).large_conv_in_place is False
  assert CPUCRenderer().large_conv_in_place is False

@pytest.mark.parametrize("arch, images", [("x86-64-v4", True), ("haswell", False)])
def test_in_place_conv_blocks(monkeypatch, arch, images):
  # the conv read in place (as the graph is on an AVX-512 host), 6 images of 200 KB over an L2 of 256 KiB: on AVX-512 the thread
  # blocks are the images and the channel blocks run inside them; haswell's keep the channel blocks outermost
  monkeypatch.setattr(dev := Device[Device.DEFAULT].renderer, "large_conv_in_place", True)
  if not dev.threads: monkeypatch.setattr(dev, "threads", 2)
  monkeypatch.setattr(conv, "replayed", lambda key, inputs, build: build())   # no plan built with the fact off
  rng = np.random.default_rng(6)
  xn, wn = rng.standard_normal((6, 16, 56, 56)).astype(np.float32), rng.standard_normal((64, 16, 3, 3)).astype(np.float32)
  def f(a: Tensor, b: Tensor) -> Tensor: return a.conv2d(b, padding=1)
  items, _, _ = create_schedule([f(Tensor(xn).realize(), Tensor(wn).realize()).uop])
  assert len(items) == 1
  rnd = arch_renderer("LLVM", arch)
  rnd.threads, rnd.l2_bytes = 2, 256 << 10
  rnd.target(rnd.flags)   # (the rules that read the L2: large_conv_in_place)
  k = hand_coded(Kernel(items[0].ast, rnd))
  assert any(o.op is OptOps.PACK for o in k.applied), k.applied
  assert (not any(o.op is OptOps.SWAP for o in k.applied)) is images, k.applied
  assert ([range_size(r) for r in k.of_type(AxisType.GLOBAL)] == [6]) is images, k.applied
  # the same conv's values, rendered for the target, where this CPU runs its code
  try: arch_flags(arch)
  except CompileError: pytest.skip(f"this CPU cannot run {arch} code")
  got, _ = run_rendered(rnd, f, xn, wn)
  win = sliding_window_view(np.pad(xn.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
  want = np.einsum("nchwij,ocij->nohw", win, wn.astype(np.float64))
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
