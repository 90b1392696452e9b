"""The optimizer tests' AVX2-like renderer (host_renderer(32)) renders as an AVX2 CPU would on any host: on an AVX-512 host it
takes AVX2's rules, so its exp2 is the bits path (shifts), not AVX-512's vscalefps."""
import numpy as np
from core import Tensor
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.codegen.program import get_program, program_source
from tests.codegen.opt.opt_helpers import host_renderer

def test_avx2_renderer_renders_exp2_without_vscalefps():
  x = Tensor(np.linspace(-10, 10, 4096, dtype=np.float32)).realize()
  (item,) = [it for it in create_schedule([x.exp2().uop])[0] if it.ast.op is Ops.SINK]
  rnd = host_renderer(32)
  src = program_source(get_program(item.ast, rnd))
  assert rnd.simd_width == 32 and "scalef" not in src, src
