"""Model state: state_dict walking and loading, and the safetensors format (round trips and an independent writer/reader)."""
from __future__ import annotations
import json, os, struct
from collections import namedtuple
import numpy as np
import pytest
from core.ir.dtype import dtypes, from_np
from core.testing.capabilities import requires_dtype
from core.tensor.tensor import Tensor
from core.tensor import nn
from core.tensor.nn.state import get_state_dict, get_parameters, load_state_dict, safe_save, safe_load, safe_load_metadata

class Block:
  def __init__(self):
    self.conv = nn.Conv2d(1, 2, 3)
    self.norm = nn.BatchNorm2d(2)
    self.heads = [nn.Linear(4, 3), nn.Linear(3, 2, bias=False)]
    self.extra = {"scale": Tensor([2.0])}
    self.not_a_tensor = 3

# *** state_dict ***

def test_state_dict_keys_follow_attribute_paths():
  sd = get_state_dict(Block())
  assert sorted(sd) == sorted(["conv.weight", "conv.bias", "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var",
                               "norm.num_batches_tracked", "heads.0.weight", "heads.0.bias", "heads.1.weight", "extra.scale"])
  assert sd["heads.0.weight"].shape == (3, 4)

def test_state_dict_walks_namedtuples_and_tuples():
  Pair = namedtuple("Pair", ["a", "b"])
  t1, t2, t3 = Tensor([1.0]), Tensor([2.0]), Tensor([3.0])
  sd = get_state_dict({"p": Pair(t1, (t2, t3))})
  assert list(sd) == ["p.a", "p.b.0", "p.b.1"] and sd["p.b.1"] is t3

def test_get_parameters_lists_shared_tensors_once():
  shared = nn.Linear(2, 2)
  params = get_parameters([shared, shared, {"again": shared.weight}])
  assert len(params) == 2 and params[0] is shared.weight and params[1] is shared.bias

def test_state_dict_round_trip_copies_values():
  a, b = Block(), Block()
  load_state_dict(b, get_state_dict(a))
  for k, v in get_state_dict(a).items(): np.testing.assert_array_equal(get_state_dict(b)[k].numpy(), v.numpy(), err_msg=k)
  # b owns copies: changing a afterwards doesn't change b
  before = get_state_dict(b)["heads.0.bias"].numpy().copy()
  a.heads[0].bias.assign(Tensor([9.0, 9.0, 9.0])).realize()
  np.testing.assert_array_equal(b.heads[0].bias.numpy(), before)

# the bias arrives as float64 and is cast on the device: a device without float64 can't run that cast
@requires_dtype(dtypes.float64)
def test_load_state_dict_casts_to_the_model_dtype():
  layer = nn.Linear(2, 2)
  load_state_dict(layer, {"weight": Tensor(np.array([[1, 2], [3, 4]], np.int32)), "bias": Tensor(np.array([0.5, -0.5], np.float64))})
  assert layer.weight.dtype == dtypes.float32 and layer.bias.dtype == dtypes.float32
  np.testing.assert_array_equal(layer.weight.numpy(), [[1, 2], [3, 4]])
  np.testing.assert_array_equal(layer.bias.numpy(), [0.5, -0.5])

def test_load_state_dict_missing_and_unexpected_keys():
  layer = nn.Linear(2, 2)
  w = layer.weight.numpy().copy()
  with pytest.raises(KeyError, match="missing keys \\['bias'\\]"): load_state_dict(layer, {"weight": Tensor.zeros(2, 2)})
  with pytest.raises(KeyError, match="unexpected keys \\['other'\\]"):
    load_state_dict(layer, {"weight": Tensor.zeros(2, 2), "bias": Tensor.zeros(2), "other": Tensor.zeros(1)})
  # a failed strict load writes nothing
  np.testing.assert_array_equal(layer.weight.numpy(), w)
  load_state_dict(layer, {"weight": Tensor.zeros(2, 2), "other": Tensor.zeros(1)}, strict=False)
  np.testing.assert_array_equal(layer.weight.numpy(), np.zeros((2, 2)))

def test_load_state_dict_shape_mismatch_names_key_and_shapes():
  layer = nn.Linear(3, 2)
  b = layer.bias.numpy().copy()
  with pytest.raises(ValueError, match=r"'weight'.*\(2, 3\).*\(3, 2\)"):
    load_state_dict(layer, {"bias": Tensor.zeros(2), "weight": Tensor.zeros(3, 2)})
  # the bias came first in the dict but nothing is written when any shape is wrong
  np.testing.assert_array_equal(layer.bias.numpy(), b)

# *** safetensors ***

NUMPY_DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32, np.uint16, np.uint8, np.bool_]

def sample(npdt, shape=(2, 3)) -> np.ndarray:
  rng = np.random.default_rng(3)
  if npdt is np.bool_: return rng.integers(0, 2, shape).astype(np.bool_)
  if np.issubdtype(npdt, np.floating): return (rng.standard_normal(shape) * 100).astype(npdt)
  info = np.iinfo(npdt)
  # include the extremes so a truncation or sign error shows up
  vals = rng.integers(info.min, info.max, shape, dtype=npdt, endpoint=True)
  vals.flat[0], vals.flat[-1] = info.min, info.max
  return vals

@pytest.mark.parametrize("npdt", [pytest.param(d, marks=requires_dtype(from_np(d)), id=np.dtype(d).name) for d in NUMPY_DTYPES])
def test_safetensors_round_trip_every_numpy_dtype(tmp_path, npdt):
  arr = sample(npdt)
  fn = tmp_path / "t.safetensors"
  safe_save({"x": Tensor(arr), "scalar": Tensor(arr.flat[1:2].reshape(())), "empty": Tensor(arr[:0])}, fn)
  back = safe_load(fn)
  assert set(back) == {"x", "scalar", "empty"}
  for k, ref in (("x", arr), ("scalar", arr.flat[1:2].reshape(())), ("empty", arr[:0])):
    got = back[k].numpy()
    assert got.dtype == arr.dtype and got.shape == ref.shape, k
    np.testing.assert_array_equal(got, ref)

@requires_dtype(dtypes.bfloat16)   # never skips today: core emulates bfloat16 where the renderer lacks it
def test_safetensors_bfloat16_keeps_bits(tmp_path):
  bits = np.array([0x3f80, 0xc000, 0x7f80, 0x0001, 0x4049], np.uint16)  # 1, -2, inf, tiny subnormal, ~3.14
  fn = tmp_path / "bf.safetensors"
  safe_save({"b": Tensor(bits).bitcast(dtypes.bfloat16)}, fn)
  header, start = safe_load_metadata(fn)
  assert header["b"] == {"dtype": "BF16", "shape": [5], "data_offsets": [0, 10]}
  assert open(fn, "rb").read()[start:] == bits.astype("<u2").tobytes()
  back = safe_load(fn)["b"]
  assert back.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(back.bitcast(dtypes.uint16).numpy(), bits)
  np.testing.assert_array_equal(back.cast(dtypes.float32).numpy()[:3], [1.0, -2.0, np.inf])

def write_by_hand(fn, tensors: dict[str, np.ndarray], metadata=None, pad_to=8):
  """An independent writer: struct + json only, tensors stored in reverse order to test that offsets are honoured."""
  names = {np.dtype(np.float32): "F32", np.dtype(np.int16): "I16", np.dtype(np.uint8): "U8", np.dtype(np.float64): "F64"}
  header, data = {}, b""
  for k in reversed(list(tensors)):
    raw = tensors[k].astype(tensors[k].dtype.newbyteorder("<")).tobytes()
    header[k] = {"dtype": names[tensors[k].dtype], "shape": list(tensors[k].shape), "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
  if metadata: header["__metadata__"] = metadata
  hdr = json.dumps(header).encode()
  hdr += b" " * (-len(hdr) % pad_to)
  with open(fn, "wb") as f: f.write(struct.pack("<Q", len(hdr)) + hdr + data)

def test_safe_load_reads_an_independently_written_file(tmp_path):
  arrs = {"a": np.arange(12, dtype=np.float32).reshape(3, 4) / 7, "b": np.array([-3, 0, 32767], np.int16),
          "c": np.array([[255, 1]], np.uint8), "d": np.array(2.5, np.float64)}
  fn = tmp_path / "hand.safetensors"
  write_by_hand(fn, arrs, metadata={"format": "pt"}, pad_to=1)
  back = safe_load(fn)
  assert set(back) == set(arrs)
  for k, v in arrs.items():
    got = back[k].numpy()
    assert got.dtype == v.dtype and got.shape == v.shape
    np.testing.assert_array_equal(got, v)

def test_safe_save_output_parses_by_hand(tmp_path):
  a, b = np.array([[1.5, -2.0]], np.float32), np.array([7, -1], np.int64)
  fn = tmp_path / "out.safetensors"
  safe_save({"a": Tensor(a), "b": Tensor(b)}, fn, metadata={"step": "3"})
  raw = open(fn, "rb").read()
  (n,) = struct.unpack("<Q", raw[:8])
  assert (8 + n) % 8 == 0
  header = json.loads(raw[8:8 + n])
  assert header["__metadata__"] == {"step": "3"}
  assert header["a"] == {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]}
  assert header["b"] == {"dtype": "I64", "shape": [2], "data_offsets": [8, 24]}
  assert raw[8 + n:] == a.astype("<f4").tobytes() + b.astype("<i8").tobytes()

def test_safe_save_is_atomic(tmp_path):
  fn = tmp_path / "keep.safetensors"
  safe_save({"x": Tensor([1.0, 2.0])}, fn)
  original = open(fn, "rb").read()
  with pytest.raises(TypeError, match="safe_save: tensor names must be str, got 5"): safe_save({"x": Tensor([3.0]), 5: Tensor([4.0])}, fn)  # type: ignore[dict-item]
  assert open(fn, "rb").read() == original
  safe_save({"y": Tensor([5.0])}, fn)
  assert sorted(os.listdir(tmp_path)) == ["keep.safetensors"]  # no temporary file left behind
  assert list(safe_load(fn)) == ["y"]

def test_safe_load_rejects_corrupt_files(tmp_path):
  fn = tmp_path / "bad.safetensors"
  fn.write_bytes(b"\x01\x02")
  with pytest.raises(ValueError, match="8-byte"): safe_load(fn)
  fn.write_bytes(struct.pack("<Q", 1000) + b"{}")
  with pytest.raises(ValueError, match="runs past"): safe_load(fn)
  fn.write_bytes(struct.pack("<Q", 4) + b"{nop")
  with pytest.raises(ValueError, match="JSON"): safe_load(fn)
  hdr = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
  fn.write_bytes(struct.pack("<Q", len(hdr)) + hdr + b"\0" * 8)
  with pytest.raises(ValueError, match="data_offsets"): safe_load(fn)
  hdr = json.dumps({"x": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}).encode()
  fn.write_bytes(struct.pack("<Q", len(hdr)) + hdr + b"\0" * 8)
  with pytest.raises(ValueError, match="unknown dtype"): safe_load(fn)

def test_model_save_load_through_safetensors(tmp_path):
  a, b = Block(), Block()
  fn = tmp_path / "model.safetensors"
  safe_save(get_state_dict(a), fn)
  load_state_dict(b, safe_load(fn))
  for k, v in get_state_dict(a).items(): np.testing.assert_array_equal(get_state_dict(b)[k].numpy(), v.numpy(), err_msg=k)

def test_safe_save_failure_while_writing_keeps_the_old_file(tmp_path, monkeypatch):
  fn = tmp_path / "keep.safetensors"
  safe_save({"x": Tensor([1.0, 2.0])}, fn)
  original = fn.read_bytes()
  def broken_replace(src, dst): raise OSError("disk full")
  monkeypatch.setattr(os, "replace", broken_replace)
  with pytest.raises(OSError, match="disk full"): safe_save({"x": Tensor([3.0, 4.0, 5.0])}, fn)
  monkeypatch.undo()
  assert fn.read_bytes() == original and sorted(os.listdir(tmp_path)) == ["keep.safetensors"]
