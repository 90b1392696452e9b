"""A large 3x3 conv reads its padded input in place on AVX-512 (CPULLVMRenderer.large_conv_in_place) except where the core's L2
holds 2 MiB or more (heuristic.big_l2: the Intel AVX-512 server core, where the padded copy and its ungated channel tile ran
faster); the Zen-5-like renderer of the tests (host_like_renderer, 1 MiB) keeps it in place on any host."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt.heuristic import BIG_L2_BYTES
from core.schedule.kernelize import create_schedule
from core.device.registry import Device
import core.tensor.conv as conv
from plugin_cpu.renderer import CPULLVMRenderer
from cpu_kernels import AVX512, host_like_renderer

@pytest.mark.parametrize("l2, simd_flags, in_place", [(1 << 20, AVX512, True), (BIG_L2_BYTES, AVX512, False),
                                                      (BIG_L2_BYTES, AVX512 - {"avx512f", "avx512vl", "avx512dq", "avx512bw"}, False),
                                                      (1 << 20, AVX512 - {"avx512f", "avx512vl", "avx512dq", "avx512bw"}, False)],
                         ids=["AVX-512 1 MiB", "AVX-512 2 MiB", "AVX2 2 MiB", "AVX2 1 MiB"])
def test_large_conv_in_place_by_the_l2(l2, simd_flags, in_place):
  rnd = CPULLVMRenderer()
  rnd.l2_bytes = l2
  rnd.target(simd_flags)
  assert rnd.large_conv_in_place is in_place

def test_zen5_like_renderer_keeps_it_in_place():
  assert host_like_renderer("LLVM", 64).large_conv_in_place and not host_like_renderer("LLVM", 32).large_conv_in_place

def test_big_l2_conv_takes_the_padded_copy(monkeypatch):
  # the bench's conv (32x64x56x56 -> 64, a realized input) on a 2 MiB-L2 AVX-512 renderer with a thread pool: the padded copy's
  # kernels (its border and interior), then the conv reads it; on a 1 MiB one a single kernel reads the input in place
  monkeypatch.setattr(conv, "replayed", lambda key, inputs, build: build())
  def kernels(l2: int) -> int:
    rnd = CPULLVMRenderer()
    rnd.l2_bytes, rnd.threads = l2, 2
    rnd.target(AVX512)
    monkeypatch.setattr(Device[Device.DEFAULT], "renderer", rnd)
    x = Tensor(np.ones((32, 64, 56, 56), np.float32)).realize()
    items = create_schedule([x.conv2d(Tensor.ones(64, 64, 3, 3).contiguous().realize(), padding=1).uop])[0]
    assert all(it.bufs[0] in items[-1].bufs[1:] for it in items[:-1]), [it.ast.arg for it in items]   # the copy's, into the conv
    return len(items)
  assert kernels(1 << 20) == 1 and kernels(BIG_L2_BYTES) > 1
