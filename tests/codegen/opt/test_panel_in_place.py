"""A product whose column-side input fits half the L2 and has rows on whole cache lines spread over the L1 sets reads it in place
instead of copying panels of it (heuristic._panel_in_place): mobilenet's small 1x1 convs (1x96x24x24 -> 24: a 221 KiB input).
Inputs beyond the L2 whose panels more than heuristic.PANEL_STREAM_REUSE row blocks reuse (fewer: plugins/cpu
test_reread_prefetch), on rows off line boundaries or on rows a page apart (a few L1 sets) keep the PACK. Opts from AVX2-like
(8 lanes, 16 registers, 512 KiB L2) and AVX-512-like (16 lanes, 32 registers, 1 MiB L2) renderers; results against numpy on both."""
from __future__ import annotations
import numpy as np
import pytest
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from opt_helpers import run_ast, host_renderer, conv1x1_item, matmul_item

rng = np.random.default_rng(23)

CASES = {   # name: (build, reads in place)
  "1x1 conv 1x96x24x24 -> 24": (lambda: conv1x1_item(rng, 1, 96, 24, 24), True),    # 221 KiB, rows of 2304 bytes
  "matmul 64x64 @ 64x64": (lambda: matmul_item(rng, 64, 64, 64), True),              # 16 KiB, rows of 256 bytes
  "1x1 conv 4x256x28x28 -> 256": (lambda: conv1x1_item(rng, 4, 256, 28, 256), False),  # 3.1 MiB: beyond the L2, 32+ row blocks
  "1x1 conv 1x96x14x14 -> 64": (lambda: conv1x1_item(rng, 1, 96, 14, 64), False),   # rows of 784 bytes: off line boundaries
  "matmul 64x64 @ 64x1024": (lambda: matmul_item(rng, 64, 64, 1024), False),          # rows 4 KiB apart: in 4 of the 64 L1 sets
}

@pytest.mark.parametrize("simd_bytes", [32, 64], ids=["AVX2", "AVX-512"])
@pytest.mark.parametrize("case", list(CASES))
def test_small_panel_input_is_read_in_place(simd_bytes, case):
  build, in_place = CASES[case]
  item, want = build()
  rnd = host_renderer(simd_bytes)
  k = hand_coded(Kernel(item.ast, rnd))
  assert any(o.op is OptOps.UPCAST for o in k.applied), k.applied   # a register-tiled product either way
  assert (not any(o.op is OptOps.PACK for o in k.applied)) == in_place, k.applied
  got, _ = run_ast(item, k.ast, rnd)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
