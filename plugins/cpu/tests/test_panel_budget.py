"""One bound, the renderer's panel_budget (l2_bytes // panel_l2_share), decides both where the optimizer reads a product's panel
in place (heuristic._panel_in_place) and where the CPU renderers' in-place loads prefetch the next panel (prefetch.reread_offsets);
the prefetch rules read it from the renderer, not from the optimizer's module. Rendered from both CPU renderers at AVX-512 width;
results against numpy on the host with each renderer."""
from __future__ import annotations
import ast, copy, pathlib, re
import numpy as np
import pytest
from cpu_kernels import run_on_renderer
from core import Tensor
from core.device.renderer import Renderer
from core.schedule.kernelize import create_schedule
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.codegen.program import get_program, program_source
import plugin_cpu.prefetch as prefetch
from plugin_cpu.c_renderer import CPUCRenderer
from plugin_cpu.renderer import CPULLVMRenderer

# a prefetch as each renderer writes it
PREFETCH = {"LLVM": r"call void @llvm\.prefetch\.p0", "C": r"__builtin_prefetch\("}

def test_prefetch_rules_do_not_import_the_optimizer():
  tree = ast.parse(pathlib.Path(prefetch.__file__).read_text())
  mods = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + \
         [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
  assert not [m for m in mods if m.startswith("core.codegen.opt")], mods

def test_panel_budget_is_a_share_of_the_l2():
  assert Renderer().panel_budget() == 0   # L2 unknown: nothing is read in place for fitting it
  rnd = copy.copy(CPULLVMRenderer())
  rnd.l2_bytes = 1 << 20
  assert rnd.panel_budget() == 512 << 10
  rnd.panel_l2_share = 8
  assert rnd.panel_budget() == 128 << 10

def _source(ren: str, share: int) -> tuple[tuple, str]:
  # 1x96x24x24 -> 24 on one thread: a 216 KiB input, 6 row blocks of 4 channels; a renderer of its own each time (programs are
  # cached by renderer)
  rnd = copy.copy(CPULLVMRenderer() if ren == "LLVM" else CPUCRenderer())
  rnd.simd_width, rnd.simd_regs, rnd.threads, rnd.l2_bytes, rnd.panel_l2_share = 64, 32, 1, 1 << 20, share
  x, w = Tensor(np.zeros((1, 96, 24, 24), np.float32)), Tensor(np.zeros((24, 96, 1, 1), np.float32))
  (item,), _, _ = create_schedule([x.conv2d(w).uop])
  k = hand_coded(Kernel(item.ast, rnd))
  return k.applied, program_source(get_program(k.ast, rnd, optimize=False))

@pytest.mark.parametrize("ren", ["LLVM", "C"])
def test_a_smaller_budget_prefetches_the_panel_it_reads_in_place(ren):
  # within half the L2 the panel stays there: read in place, nothing prefetched; beyond an eighth of it, still read in place (6 row
  # blocks) and its loads prefetch the next panel: both rules moved with the renderer's share
  in_l2, beyond = _source(ren, 2), _source(ren, 8)
  assert not any(o.op is OptOps.PACK for o in in_l2[0] + beyond[0]), (in_l2[0], beyond[0])
  assert not re.search(PREFETCH[ren], in_l2[1])
  assert re.search(PREFETCH[ren], beyond[1])

@pytest.mark.parametrize("ren", ["LLVM", "C"])
def test_products_under_a_smaller_budget_give_numpys_results(ren):
  # in a process of its own: DEV=CPU:<ren> picks the renderer; an eighth of the L2 puts these inputs beyond the budget
  run_on_renderer(ren, (
    "Device['CPU'].renderer.panel_l2_share = 8\n"
    "for n, c, hw, o in ((1, 96, 24, 24), (4, 256, 28, 64), (2, 64, 28, 32)):\n"
    "  r = np.random.default_rng(n * c + hw + o)\n"
    "  x, w = r.standard_normal((n, c, hw, hw), dtype=np.float32), r.standard_normal((o, c, 1, 1), dtype=np.float32)\n"
    "  want = np.einsum('nchw,oc->nohw', x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))\n"
    "  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w)).numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())\n"
    "print('ok')\n"), CPU_PREFETCH="1")
