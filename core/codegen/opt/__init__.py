"""The kernel optimizer: give a kernel's axes roles (thread blocks, vector lanes, unrolled registers) by heuristics or BEAM."""
from __future__ import annotations
from typing import TYPE_CHECKING
from core.ir.ops import UOp
from core.helpers import BEAM, NOOPT, DEBUG
from core.codegen.opt.kernel import Kernel, Opt, OptOps, KernelOptError, apply_opts
if TYPE_CHECKING: from core.device.renderer import Renderer

def optimize(ast: UOp, renderer: Renderer) -> UOp:
  """The kernel AST with optimizations applied: none with NOOPT=1, a timed search with BEAM=n, else the hand-coded ones."""
  if NOOPT or not ast.src: return ast
  k = Kernel(ast, renderer)
  if BEAM >= 1:
    from core.codegen.opt.search import beam_search
    k = beam_search(k, int(BEAM))
  else:
    from core.codegen.opt.heuristic import hand_coded
    k = hand_coded(k)
  if DEBUG >= 3: print(f"opt {ast.arg}: {list(k.applied)} -> {k}")
  return k.ast

__all__ = ["optimize", "Kernel", "Opt", "OptOps", "KernelOptError", "apply_opts"]
