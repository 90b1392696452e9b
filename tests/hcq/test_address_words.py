"""Submission.run_slots writes a changed slot's plain 64-bit address patches as items of one-word views (_address_words), the
other patches through _patch_slot: an eager op whose result alternates between two pooled buffers is patched every run."""
import ctypes, struct
import numpy as np
import pytest
from core.hcq import pipeline
from core.hcq.pipeline import _address_words

def _patch(view, off=0, fmt="<Q", addend=0, shift=0, own_addr=None):
  # a _fast_patches entry: (slot, view, target, offset, format, mask, addend, shift, width, own addr())
  w = 8 if fmt == "<Q" else 4
  return (0, view, None, off, fmt, (1 << 8 * w) - 1, addend, shift, w, own_addr)

def test_plain_address_patches_become_word_views_that_write_the_address_little_endian():
  mem = bytearray(24)
  words = _address_words([_patch(memoryview(mem), 8), _patch(memoryview(mem), 16)])
  assert words is not None and len(words) == 2
  for w in words: w[0] = 0x1122334455667788
  assert mem[:8] == bytes(8) and mem[8:16] == mem[16:24] == struct.pack("<Q", 0x1122334455667788)

@pytest.mark.parametrize("kw", [{"fmt": "<I"}, {"addend": 4}, {"shift": 32}, {"own_addr": lambda b: 0}, {"view": None}])
def test_a_slot_with_any_other_patch_keeps_the_general_patch(kw):
  mem = memoryview(bytearray(16))
  other = _patch(**{"view": mem, **kw})
  assert _address_words([_patch(mem, 8), other]) is None
  assert _address_words([]) is None

def test_an_eager_op_alternating_its_result_buffers_patches_without_patch_slot(monkeypatch):
  from core.device.registry import Device
  from core.engine.realize import buffer_of
  from core.tensor.tensor import Tensor
  a = np.arange(64, dtype=np.float32)
  x = Tensor(a, device="CPU").realize()
  out = [(x + 1).realize() for _ in range(3)][-1]   # planned, cached, its eager op entry made
  calls, patch_slot = [], pipeline.Submission._patch_slot
  def counted(self, *args):
    calls.append(args[0])   # the slot only: holding the Buffer would keep it out of the pool
    return patch_slot(self, *args)
  monkeypatch.setattr(pipeline.Submission, "_patch_slot", counted)
  values, bufs = [], set()
  for _ in range(6):
    out = (x + 1).realize()   # the previous result is alive while this one runs: the other pooled buffer
    values.append(out.numpy().copy())
    bufs.add(ctypes.addressof(buffer_of(out.uop)._buf))
  Device["CPU"].synchronize()
  assert len(bufs) == 2 and calls == []
  for v in values: np.testing.assert_array_equal(v, a + 1)
