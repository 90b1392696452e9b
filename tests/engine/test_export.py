"""A captured Jit saved as its compiled programs (core/engine/export.py via core/tensor/jit_export.py) and replayed with no
compiler, by direct launches and through the command queues; the UOp data codec (core/ir/serialize.py) it uses."""
import json
import numpy as np
import pytest
from core import Jit, Tensor
from core.device.registry import Device
from core.engine.export import CompiledFileError, graph_from_bytes, load_replay, read_graph
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.serialize import SerializeError, uops_from_data, uops_to_data
from core.tensor.jit import JitError
from core.tensor.jit_export import export_jit

RNG = np.random.default_rng(3)
W = RNG.standard_normal((8, 4)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)

def mlp_jit() -> Jit:
  w, b = Tensor(W), Tensor(B)
  return Jit(lambda x: (x @ w + b).relu().sum(axis=0).contiguous())

def captured() -> Jit:
  j = mlp_jit()
  for _ in range(2): j(Tensor(RNG.standard_normal((3, 8)).astype(np.float32)))
  return j

def want(x: np.ndarray) -> np.ndarray: return np.maximum(x @ W + B, 0).sum(axis=0)

@pytest.fixture
def no_compiler(monkeypatch):
  import core.codegen.program as program
  def boom(*a, **k): raise AssertionError("a compiler ran while replaying")
  comp = Device[Device.DEFAULT].compiler
  for name in ("compile", "compile_cached"): monkeypatch.setattr(comp, name, boom)
  for name in ("get_program", "compile_program"): monkeypatch.setattr(program, name, boom)

@pytest.mark.parametrize("queues", [False, True])
def test_saved_jit_replays_without_compiling(queues, tmp_path, request):
  if queues and Device[Device.DEFAULT].hcq is None: pytest.skip(f"{Device.DEFAULT} has no command queues")
  g = export_jit(captured(), {"note": "mlp"})
  g.save(str(tmp_path / "mlp.core"))
  request.getfixturevalue("no_compiler")
  g2 = read_graph(str(tmp_path / "mlp.core"))
  assert g2.meta == {"note": "mlp"} and [b.role for b in g2.buffers].count("weight") == 2
  assert {b.data for b in g2.buffers if b.role == "weight"} == {W.tobytes(), B.tobytes()}
  r = load_replay(g2, Device.DEFAULT, queues)
  for _ in range(2):
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    (out,) = r([x.tobytes()])
    np.testing.assert_allclose(out.numpy(), want(x), rtol=1e-5, atol=1e-5)

def test_export_needs_a_capture():
  j = mlp_jit()
  j(Tensor(np.zeros((3, 8), np.float32)))
  with pytest.raises(JitError, match="call it twice"): export_jit(j)

def test_export_refuses_random_draws():
  j = Jit(lambda x: (x + Tensor.rand(4)).contiguous())
  for _ in range(2): j(Tensor(np.zeros(4, np.float32)))
  with pytest.raises(JitError, match="random numbers"): export_jit(j)

def test_input_count_is_checked():
  r = load_replay(export_jit(captured()), Device.DEFAULT)
  with pytest.raises(ValueError, match="takes 1 inputs, got 0"): r([])

def test_file_is_json_header_and_raw_sections():
  raw = export_jit(captured()).to_bytes()
  assert raw[:8] == b"COREPRG\x00"
  n = int.from_bytes(raw[8:16], "little")
  h = json.loads(raw[16:16 + n])   # the header is plain JSON
  assert h["format"] == "core-compiled" and h["kind"]["device"] == Device.DEFAULT
  off, ln = next(b["data"] for b in h["buffers"] if b["role"] == "weight" and b["size"] == W.size)
  assert raw[16 + n + off:16 + n + off + ln] == W.tobytes()

def test_truncated_file_is_refused():
  raw = export_jit(captured()).to_bytes()
  for cut in (1, 17, len(raw) // 3, len(raw) - 1):
    with pytest.raises(CompiledFileError): graph_from_bytes(raw[:cut])

# *** the UOp data codec ***

def _program_uops() -> list[UOp]:
  from core.hcq.state import compile_kernel
  from core.codegen.program import program_uops
  j = captured()
  return [u for it in j.items for u in program_uops(compile_kernel(it.ast, it.bufs[0].src[1].arg))]

def test_linearized_programs_round_trip_to_the_same_nodes():
  uops = _program_uops()
  data = json.loads(json.dumps(uops_to_data(uops)))
  back = uops_from_data(data)
  assert set(uops) <= set(back)   # hash-consing: equal nodes are the same objects

def test_codec_round_trips_args_dtypes_and_tags():
  from core.ir.ops import AxisType
  from core.ir.dtype import AddrSpace
  p = UOp(Ops.PARAM, dtypes.float.vec(4).ptr(16, AddrSpace.LOCAL), arg=0)
  r = UOp(Ops.RANGE, dtypes.index, (UOp(Ops.CONST, dtypes.index, arg=8),), arg=(3, AxisType.REDUCE), tag=7)
  c = UOp(Ops.CONST, dtypes.float, arg=float("-inf"))
  s = UOp(Ops.SINK, src=(p, r, c, UOp(Ops.CONST, dtypes.bool, arg=True)), arg="k")
  data = json.loads(json.dumps(uops_to_data([s])))
  assert uops_from_data(data)[-1] is s

def test_codec_refuses_unsafe_args_and_damaged_data():
  with pytest.raises(SerializeError, match="type frozenset"): uops_to_data([UOp(Ops.SINK, arg=frozenset({1}))])
  good = uops_to_data([UOp(Ops.SINK, src=(UOp(Ops.CONST, dtypes.int32, arg=1),))])
  for bad, msg in ((good[::-1], "sources must come before"), ([["NOPE", ["void", 1], [], None, None]], "unknown op 'NOPE'"),
                   ([["SINK", ["float99", 1], [], None, None]], "unknown dtype 'float99'"), ([["SINK", ["void", 1], [], {"e": "os", "v": "system"}, None]], "arg"),
                   ("x", "not a list")):
    with pytest.raises(SerializeError, match=msg): uops_from_data(bad)
