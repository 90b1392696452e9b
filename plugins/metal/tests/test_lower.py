"""The command-buffer program format (cmdbuf.py) and pm_lower's encoder calls for each abstract queue command, with the byte
offsets its patches land on."""
from __future__ import annotations
import struct
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from core.ir.pattern import graph_rewrite
from core.hcq import queue_ir as qir
from plugin_metal.cmdbuf import Call, packet, decode, field
from plugin_metal.lower import pm_lower
from plugin_metal.prep import MetalProgramData

def test_packets_round_trip_and_bad_headers_are_refused() -> None:
  words = packet(Call.SET_BUFFER, 3, 0x1000) + packet(Call.DISPATCH, 4, 2, 1, 32, 1, 1) + packet(Call.MEMORY_BARRIER)
  assert decode(words) == [(Call.SET_BUFFER, (3, 0x1000)), (Call.DISPATCH, (4, 2, 1, 32, 1, 1)), (Call.MEMORY_BARRIER, ())]
  assert struct.unpack_from("<Q", words)[0] == 2 | 3 << 8
  with pytest.raises(ValueError, match="bad encoder call header"): decode(struct.pack("<Q", 2 | 4 << 8))
  with pytest.raises(ValueError, match="only 8 left"): decode(packet(Call.SIGNAL, 1, 2)[:8])
  with pytest.raises(ValueError, match="a WAIT encoder call has 2 fields, got 1"): packet(Call.WAIT, 1)

def _lower(cmd: UOp) -> UOp:
  out = graph_rewrite(cmd, pm_lower, ctx=None, name="test lower")
  assert out.op is Ops.INS
  return out

def test_launch_sets_pipeline_binds_arguments_and_dispatches() -> None:
  image = qir.placeholder("program", "METAL", 8)
  kernargs = qir.placeholder("kernargs", "METAL", 24)
  data = MetalProgramData("k", 24, 8, (0, 8, 16), handle=5, nbufs=2)
  ins = _lower(qir.launch(qir.prepared_program("METAL", image, data), kernargs, (4, 2), (32,)))
  words, offsets = ins.arg
  calls = decode(words)
  assert [c for c, _ in calls] == [Call.SET_PIPELINE, Call.SET_BUFFER_AT, Call.SET_BUFFER_AT, Call.SET_BUFFER, Call.DISPATCH]
  assert [f[0] for c, f in calls[1:4]] == [0, 1, 2] and calls[4][1] == (4, 2, 1, 32, 1, 1)
  # the pipeline's handle is read through the image's address, each argument through its kernarg slot's address
  starts = [0, 16, 40, 64]
  assert offsets == (starts[0] + field(0), starts[1] + field(1), starts[2] + field(1), starts[3] + field(1))
  assert ins.src[0] is qir.getaddr(image)
  assert [ins.src[i] is qir.getaddr(kernargs, off) for i, off in ((1, 0), (2, 8), (3, 16))] == [True] * 3

def test_copy_wait_signal_timestamp_barrier() -> None:
  a, b = qir.placeholder("staging", "METAL", 64), qir.placeholder("scratch", "METAL", 64)
  sig = qir.queue_buffer("timeline_signal", "COMPUTE:0", "METAL")
  copy = _lower(qir.copy(a, b, 64))
  assert decode(copy.arg[0]) == [(Call.BLIT_COPY, (0, 0, 64))] and copy.arg[1] == (field(0), field(1))
  for cmd, call in ((qir.wait(sig, qir.u64(7)), Call.WAIT), (qir.signal(sig, qir.u64(9)), Call.SIGNAL)):
    ins = _lower(cmd)
    assert decode(ins.arg[0]) == [(call, (0, 0))] and ins.arg[1] == (field(0), field(1))
    assert ins.src[1].dtype == dtypes.uint64
  assert decode(_lower(qir.timestamp(a)).arg[0]) == [(Call.TIMESTAMP, (0,))]
  assert decode(_lower(qir.barrier()).arg[0]) == [(Call.MEMORY_BARRIER, ())]
