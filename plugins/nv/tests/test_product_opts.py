"""The optimizer's products on the CUDA renderer keep the workgroup path: the CPU's few-row register reuse (a @ W.T summed along the
reduce axis in vectors, each load reused across a rows x columns tile of UPCASTs, the columns swapped outermost for its threads)
is for renderers without local ids; b453846 gave it to GPUs too (512^3: UNROLL 16, LOCAL 32 became UNROLL 4, two UPCASTs, a
SWAP), unmeasured there."""
from __future__ import annotations
import numpy as np
import pytest
from core import Tensor
from core.codegen.opt import Kernel, OptOps
from core.codegen.opt.heuristic import hand_coded
from core.schedule.kernelize import create_schedule
from plugin_nv.renderer import CUDARenderer

@pytest.mark.parametrize("rows, k, n", [(8, 512, 1000), (4, 768, 3072), (512, 512, 512)])
def test_a_times_w_transposed_keeps_the_workgroup_path(rows, k, n):
  rng = np.random.default_rng(rows)
  x, w = rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
  items, _, _ = create_schedule([(Tensor(x).realize() @ Tensor(w).realize().T).uop])
  ops = [o.op for o in hand_coded(Kernel(items[0].ast, CUDARenderer("sm_89"))).applied]
  assert OptOps.LOCAL in ops and OptOps.UPCAST not in ops and OptOps.SWAP not in ops, ops
