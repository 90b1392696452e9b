"""A kernel the renderer writes whole (Renderer.own_kernel: the AMX bf16 matmul) in a compiled file: its PROGRAM's LINEAR holds
only its parameters, so the file saves its estimates, and both replays (direct launches, command queues) run its blocks on the
pool as the Jit does, not serially as estimates recomputed from those parameters (0 FLOPs) would."""
import numpy as np
import pytest
from core import Jit, Tensor
from core.codegen import program
from core.device.registry import Device
from core.engine.export import graph_from_bytes, load_replay
from core.ir.ops import Ops
from core.ir.serialize import uops_from_data
from core.schedule.kernelize import create_schedule
from core.tensor.jit_export import export_jit
from plugin_cpu import queue as CQ, runtime
from plugin_cpu.renderer import THREADS

M, K, N = 160, 96, 224   # sizes of their own: no earlier test's program of this kernel is cached

def _launches(monkeypatch) -> list[int]:
  """The block count of every launch from now on, direct or queued (negative: run serially on the launching thread)."""
  counts: list[int] = []
  enc, real = CQ.enc_launch, runtime._guarded_launcher()
  monkeypatch.setattr(CQ, "enc_launch", lambda fn, ka, nargs, nb: (counts.append(nb), enc(fn, ka, nargs, nb))[1])
  def launch(fn, n, args, nb, *out):
    counts.append(nb.value)
    return real(fn, n, args, nb, *out)
  monkeypatch.setattr(runtime, "_guarded_launcher", lambda: launch)
  return counts

@pytest.mark.skipif(THREADS == 1, reason="one thread: no kernel has several blocks")
def test_compiled_file_keeps_an_own_kernels_estimates(monkeypatch):
  rng = np.random.default_rng(11)
  a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
  (item,) = [it for it in create_schedule([(Tensor(a).realize() @ Tensor(b).realize()).uop])[0] if it.ast.op is Ops.SINK and it.ast.src]
  rnd = Device[Device.DEFAULT].renderer
  usual = program._program(item.ast, rnd, True)   # (uncached) the optimizer's program: its source stands in for an own kernel's
  spec = usual.arg
  assert spec.global_size[0] > 1 and not runtime.serial_by_estimate(spec.estimates)
  own = (program.program_source(usual), spec.global_size, spec.estimates)
  monkeypatch.setattr(rnd, "own_kernel", lambda ast, name: own if ast is item.ast else None)
  jit = Jit(lambda x, y: (x @ y).contiguous())
  for _ in range(2): jit(Tensor(a), Tensor(b))
  graph = graph_from_bytes(export_jit(jit).to_bytes())
  (p,) = [p for p in graph.programs if p.name == spec.name]
  assert all(u.op is Ops.PARAM for u in uops_from_data(p.linear)) and p.estimates == spec.estimates
  for queues in (False, True):
    counts = _launches(monkeypatch)
    replay = load_replay(graph, Device.DEFAULT, queues=queues)
    (out,) = replay([a.tobytes(), b.tobytes()])
    np.testing.assert_allclose(np.frombuffer(out.as_buffer(), np.float32).reshape(M, N), a @ b, rtol=1e-4, atol=1e-4)
    assert counts == [spec.global_size[0]], (queues, counts)
