"""Model-file loaders: torch_load (zip and legacy .pth, written here without torch and, when installed, by torch itself),
gguf_load (against the gguf package's writer and dequantizer), fetch / Tensor.from_url (against a server on 127.0.0.1), and
a clear ValueError for every kind of malformed file."""
from __future__ import annotations
import gzip, http.server, io, pickle, struct, sys, threading, types, zipfile
from collections import OrderedDict
from typing import Any
import numpy as np
import pytest
from core.testing.helpers import ci_run
from core import Tensor, dtypes
from core.fetch import DownloadError
from core.tensor.nn.state import fetch, gguf_load, torch_load

# *** .pth files without torch: fake `torch` modules make pickle write the globals torch.save writes ***

STORAGES = {"FloatStorage": np.float32, "HalfStorage": np.float16, "BFloat16Storage": np.uint16, "DoubleStorage": np.float64,
            "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
            "BoolStorage": np.bool_}

class FakeStorage:
  def __init__(self, key: str, sname: str, arr: np.ndarray): self.key, self.sname, self.arr = key, sname, np.ascontiguousarray(arr).ravel()

class FakeTorch:
  """Tensors and parameters that pickle as torch's do, and writers for the zip and legacy file layouts."""
  def __init__(self, torch: types.ModuleType, utils: types.ModuleType): self.torch, self.utils, self.n = torch, utils, 0
  def storage(self, sname: str, arr: Any) -> FakeStorage:
    self.n += 1
    return FakeStorage(str(self.n - 1), sname, np.asarray(arr, dtype=STORAGES[sname]))
  def tensor(self, st: FakeStorage, offset: int = 0, size: tuple = (), stride: tuple = ()) -> Any:
    rebuild = self.utils._rebuild_tensor_v2
    class T:
      def __reduce_ex__(self, proto): return (rebuild, (st, offset, tuple(size), tuple(stride), False, OrderedDict()))
    return T()
  def param(self, t: Any) -> Any:
    rebuild = self.utils._rebuild_parameter
    class P:
      def __reduce_ex__(self, proto): return (rebuild, (t, True, OrderedDict()))
    return P()
  def _pickle(self, obj: Any, legacy: bool) -> tuple[bytes, dict[str, FakeStorage]]:
    seen: dict[str, FakeStorage] = {}
    torch = self.torch
    class Pickler(pickle.Pickler):
      def persistent_id(self, o):
        if not isinstance(o, FakeStorage): return None
        seen[o.key] = o
        return ("storage", getattr(torch, o.sname), o.key, "cpu", o.arr.size) + ((None,) if legacy else ())
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue(), seen
  def save_zip(self, obj: Any, path: Any, big_endian: bool = False) -> None:
    data, seen = self._pickle(obj, legacy=False)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
      z.writestr("archive/data.pkl", data)
      z.writestr("archive/byteorder", "big" if big_endian else "little")
      for k, st in seen.items(): z.writestr(f"archive/data/{k}", st.arr.astype(st.arr.dtype.newbyteorder(">" if big_endian else "<")).tobytes())
      z.writestr("archive/version", "3\n")
  def save_legacy(self, obj: Any, path: Any, magic: int = 0x1950a86a20f9469cfc6c) -> int:
    """Returns where the raw storages start."""
    data, seen = self._pickle(obj, legacy=True)
    with open(path, "wb") as f:
      for head in (magic, 1001, {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(head, f, protocol=2)
      f.write(data)
      pickle.dump(sorted(seen), f, protocol=2)
      start = f.tell()
      for k in sorted(seen): f.write(struct.pack("<q", seen[k].arr.size) + seen[k].arr.astype(seen[k].arr.dtype.newbyteorder("<")).tobytes())
    return start

@pytest.fixture
def fake_torch(monkeypatch) -> FakeTorch:
  torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")
  def never(*a): raise AssertionError("loading must not call into torch")
  for name in ("_rebuild_tensor_v2", "_rebuild_parameter"):
    f = types.FunctionType(never.__code__, {}, name)
    f.__module__, f.__qualname__ = "torch._utils", name
    setattr(utils, name, f)
  for name in [*STORAGES, "ComplexFloatStorage"]: setattr(torch, name, type(name, (), {"__module__": "torch"}))
  torch._utils = utils  # type: ignore[attr-defined]
  monkeypatch.setitem(sys.modules, "torch", torch)   # undone after the test: a real torch import is unaffected
  monkeypatch.setitem(sys.modules, "torch._utils", utils)
  return FakeTorch(torch, utils)

BF16_VALUES = np.array([1.5, -2.0, 0.15625, 2.0**100, -0.0], dtype=np.float32)   # exact in bfloat16

def _checkpoint(ft: FakeTorch) -> tuple[dict, dict[str, tuple[Any, np.ndarray]]]:
  """A checkpoint of every dtype, with views of one shared storage, and the (dtype, values) each tensor must load as."""
  base = np.arange(12, dtype=np.float32) * 0.5
  s0 = ft.storage("FloatStorage", base)
  rng = np.random.default_rng(1)
  plain = {"f16": ("HalfStorage", dtypes.float16, rng.standard_normal(5).astype(np.float16)),
           "f64": ("DoubleStorage", dtypes.float64, rng.standard_normal(4)),
           "i64": ("LongStorage", dtypes.int64, np.array([-(2**40), 3, 2**62], dtype=np.int64)),
           "i32": ("IntStorage", dtypes.int32, np.array([-7, 0, 2**31 - 1], dtype=np.int32)),
           "i16": ("ShortStorage", dtypes.int16, np.array([-300, 12], dtype=np.int16)),
           "i8": ("CharStorage", dtypes.int8, np.array([-128, 5, 127], dtype=np.int8)),
           "u8": ("ByteStorage", dtypes.uint8, np.array([0, 200, 255], dtype=np.uint8)),
           "mask": ("BoolStorage", dtypes.bool, np.array([True, False, True]))}
  model: dict[str, Any] = OrderedDict(w=ft.tensor(s0, 0, (3, 4), (4, 1)), w_t=ft.tensor(s0, 0, (4, 3), (1, 4)),
                                      w_slice=ft.tensor(s0, 5, (2, 2), (4, 2)), w_scalar=ft.tensor(s0, 7, (), ()),
                                      bias=ft.param(ft.tensor(s0, 8, (4,), (1,))),
                                      bf16=ft.tensor(ft.storage("BFloat16Storage", BF16_VALUES.view(np.uint32) >> 16), 0, (5,), (1,)))
  want = {"w": (dtypes.float32, base.reshape(3, 4)), "w_t": (dtypes.float32, base.reshape(3, 4).T), "w_slice": (dtypes.float32, base.reshape(3, 4)[1:, 1::2]),
          "w_scalar": (dtypes.float32, np.float32(3.5)), "bias": (dtypes.float32, base[8:]), "bf16": (dtypes.bfloat16, BF16_VALUES)}
  for k, (sname, dt, arr) in plain.items():
    model[k] = ft.tensor(ft.storage(sname, arr), 0, arr.shape, (1,))
    want[k] = (dt, arr)
  return {"model": model, "epoch": 3, "note": ["lr", 0.1]}, want

def _check(sd: dict, want: dict[str, tuple[Any, np.ndarray]]) -> None:
  assert sd["epoch"] == 3 and sd["note"] == ["lr", 0.1] and isinstance(sd["model"], OrderedDict) and list(sd["model"]) == list(want)
  for k, (dt, arr) in want.items():
    t = sd["model"][k]
    assert isinstance(t, Tensor) and t.dtype == dt and t.shape == arr.shape, (k, t.dtype, t.shape)
    np.testing.assert_array_equal(t.numpy(), arr.astype(np.float32) if dt == dtypes.bfloat16 else arr, err_msg=k)

@pytest.mark.parametrize("fmt", ["zip", "legacy", "zip_big_endian"])
def test_torch_load_every_dtype_view_and_format(fake_torch, tmp_path, fmt):
  ckpt, want = _checkpoint(fake_torch)
  fn = tmp_path / "model.pth"
  if fmt == "legacy": fake_torch.save_legacy(ckpt, fn)
  else: fake_torch.save_zip(ckpt, fn, big_endian=fmt == "zip_big_endian")
  _check(torch_load(fn), want)

def test_torch_load_from_bytes_and_from_a_tensor(fake_torch, tmp_path):
  ckpt, want = _checkpoint(fake_torch)
  fake_torch.save_zip(ckpt, tmp_path / "m.pth")
  raw = (tmp_path / "m.pth").read_bytes()
  _check(torch_load(raw), want)
  _check(torch_load(Tensor(raw)), want)

class Evil:
  def __reduce__(self): return (eval, ("1/0",))   # unpickled by pickle.load this would raise ZeroDivisionError

def test_torch_load_refuses_arbitrary_globals(fake_torch, tmp_path):
  fake_torch.save_zip({"x": Evil()}, tmp_path / "evil.pth")
  with pytest.raises(ValueError, match=r"evil\.pth: refusing to unpickle the global (__builtin__|builtins)\.eval"): torch_load(tmp_path / "evil.pth")
  fake_torch.save_legacy({"x": Evil()}, tmp_path / "evil_legacy.pth")
  with pytest.raises(ValueError, match=r"evil_legacy\.pth: refusing to unpickle the global (__builtin__|builtins)\.eval"): torch_load(tmp_path / "evil_legacy.pth")

def test_torch_load_refuses_an_unsupported_storage_type(fake_torch, tmp_path):
  st = fake_torch.storage("FloatStorage", np.zeros(4))
  st.sname = "ComplexFloatStorage"
  fake_torch.save_zip({"c": fake_torch.tensor(st, 0, (2,), (1,))}, tmp_path / "c.pth")
  with pytest.raises(ValueError, match=r"c\.pth: refusing to unpickle the global torch\.ComplexFloatStorage"): torch_load(tmp_path / "c.pth")

def test_torch_load_refuses_malformed_files(fake_torch, tmp_path):
  ckpt, _ = _checkpoint(fake_torch)
  fake_torch.save_zip(ckpt, tmp_path / "ok.pth")
  start = fake_torch.save_legacy(ckpt, tmp_path / "ok_legacy.pth")
  raw, legacy = (tmp_path / "ok.pth").read_bytes(), (tmp_path / "ok_legacy.pth").read_bytes()
  cases = {"truncated.pth": (raw[:len(raw) // 2], "broken zip"), "truncated_legacy.pth": (legacy[:-20], "truncated"),
           "legacy_no_storages.pth": (legacy[:start + 4], rf"element count at offset {start} is past the end"),
           "text.pth": (b"hello, not a checkpoint", "not a PyTorch checkpoint"), "empty.pth": (b"", "empty")}
  for name, (data, msg) in cases.items():
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError, match=rf"{name.replace('.', '[.]')}.*{msg}"): torch_load(tmp_path / name)
  fake_torch.save_legacy({"x": 1}, tmp_path / "magic.pth", magic=1234)
  with pytest.raises(ValueError, match=r"magic\.pth: not a PyTorch checkpoint: bad magic number 1234"): torch_load(tmp_path / "magic.pth")

def test_torch_load_refuses_bad_offsets_and_short_storages(fake_torch, tmp_path):
  st = fake_torch.storage("FloatStorage", np.arange(6))
  fake_torch.save_zip({"x": fake_torch.tensor(st, 4, (2, 2), (2, 1))}, tmp_path / "offset.pth")   # reads element 7 of 6
  with pytest.raises(ValueError, match=r"offset\.pth: .*reads element 7 of storage '0', which has 6 \(bad offsets\)"): torch_load(tmp_path / "offset.pth")
  fake_torch.save_zip({"x": fake_torch.tensor(st, 0, (2, 3), (3, -1))}, tmp_path / "stride.pth")
  with pytest.raises(ValueError, match=r"stride\.pth: tensor of shape \(2, 3\) has bad strides \(3, -1\)"): torch_load(tmp_path / "stride.pth")
  fake_torch.save_zip({"x": fake_torch.tensor(st, 0, (6,), (1,))}, tmp_path / "short.pth")
  with zipfile.ZipFile(tmp_path / "short.pth") as z: members = {n: z.read(n) for n in z.namelist()}
  members["archive/data/0"] = members["archive/data/0"][:10]
  with zipfile.ZipFile(tmp_path / "short.pth", "w") as z:
    for n, d in members.items(): z.writestr(n, d)
  with pytest.raises(ValueError, match=r"short\.pth: storage '0' \(FloatStorage\) needs 24 bytes but the file holds 10"): torch_load(tmp_path / "short.pth")
  del members["archive/data/0"]
  with zipfile.ZipFile(tmp_path / "missing.pth", "w") as z:
    for n, d in members.items(): z.writestr(n, d)
  with pytest.raises(ValueError, match=r"missing\.pth: storage '0' is referenced by data.pkl but archive/data/0 is missing"):
    torch_load(tmp_path / "missing.pth")

@pytest.mark.parametrize("zip_format", [True, False])
def test_torch_load_reads_what_torch_saves(tmp_path, zip_format):
  torch = pytest.importorskip("torch", reason="torch is not installed (the files torch writes are also built above without it)")
  g = torch.Generator().manual_seed(0)
  a = torch.randn(4, 6, generator=g)
  lin = torch.nn.Linear(3, 2)
  sd: dict[str, Any] = {"a": a, "a_t": a.t(), "a_slice": a[1:, ::2], "a_view": a.view(24)[5:11], "col": a[:, 3],
                        "f16": torch.randn(7, generator=g).half(), "bf16": torch.randn(3, 5, generator=g).bfloat16(),
                        "f64": torch.randn(2, 2, generator=g).double(), "i64": torch.tensor([-(2**40), 5]), "i32": torch.arange(-3, 3, dtype=torch.int32),
                        "i16": torch.tensor([-300, 7], dtype=torch.int16), "i8": torch.tensor([-128, 127], dtype=torch.int8),
                        "u8": torch.tensor([0, 255], dtype=torch.uint8), "mask": torch.tensor([True, False]), "zero_d": torch.tensor(2.5),
                        "param": torch.nn.Parameter(torch.ones(3))}
  ckpt = {"model": sd, "linear": lin.state_dict(), "step": 10}
  fn = tmp_path / "real.pt"
  torch.save(ckpt, fn, _use_new_zipfile_serialization=zip_format)
  got = torch_load(fn)
  assert got["step"] == 10 and list(got["model"]) == list(sd) and list(got["linear"]) == ["weight", "bias"]
  for group in ("model", "linear"):
    for k, v in ckpt[group].items():
      t = got[group][k]
      assert t.shape == tuple(v.shape) and str(v.dtype).removeprefix("torch.") in (t.dtype.name, {"bool": "bool"}.get(t.dtype.name)), (k, t.dtype)
      ref = v.detach().float().numpy() if v.dtype == torch.bfloat16 else v.detach().numpy()
      np.testing.assert_array_equal(t.numpy(), ref, err_msg=f"{group}.{k}")

# *** GGUF: files from the gguf package's writer, values from its dequantizer ***

def _gguf() -> Any:
  if ci_run(): import gguf   # the core job installs it: missing there is a failure
  else: gguf = pytest.importorskip("gguf", reason="pip install gguf (the testing extra) to check gguf_load against the reference")
  return gguf

# where the f16 scales sit in each k-quant block, for the types the gguf package can't quantize: random bytes elsewhere
K_SCALES = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
GGUF_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]

def _raw_blocks(gguf: Any, qname: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
  qt = gguf.GGMLQuantizationType[qname]
  x = rng.standard_normal(shape).astype(np.float32)
  if qname == "F32": return x
  if qname == "F16": return x.astype(np.float16)
  if qname not in K_SCALES: return gguf.quants.quantize(x, qt)
  block, nbytes = gguf.GGML_QUANT_SIZES[qt]
  raw = rng.integers(0, 256, (*shape[:-1], shape[-1] // block * nbytes), dtype=np.uint8)
  blocks = raw.reshape(-1, nbytes)
  for o in K_SCALES[qname]: blocks[:, o:o + 2] = (rng.random(len(blocks)) * 0.1).astype(np.float16).view(np.uint8).reshape(-1, 2)
  return raw

@pytest.fixture
def gguf_file(tmp_path) -> tuple[Any, dict[str, np.ndarray], dict[str, Any]]:
  gguf = _gguf()
  rng = np.random.default_rng(0)
  fn = tmp_path / "model.gguf"
  w = gguf.GGUFWriter(fn, "testarch")
  w.add_custom_alignment(64)
  kv: dict[str, Any] = {"t.u8": 200, "t.i8": -5, "t.u16": 60000, "t.i16": -30000, "t.u32": 4_000_000_000, "t.i32": -2_000_000_000,
                        "t.f32": 1.5, "t.bool": True, "t.str": "héllo", "t.u64": 2**63 + 1, "t.i64": -(2**62), "t.f64": 0.1,
                        "t.ints": [1, -2, 3], "t.floats": [0.5, 0.25], "t.strs": ["a", "bc", ""], "t.nested": [[1, 2], [3]]}
  for k, v in kv.items():
    kind = k.split(".")[1]
    if kind in ("ints", "floats", "strs", "nested"): w.add_array(k, v)
    else: getattr(w, {"u8": "add_uint8", "i8": "add_int8", "u16": "add_uint16", "i16": "add_int16", "u32": "add_uint32", "i32": "add_int32",
                      "f32": "add_float32", "bool": "add_bool", "str": "add_string", "u64": "add_uint64", "i64": "add_int64",
                      "f64": "add_float64"}[kind])(k, v)
  want: dict[str, np.ndarray] = {}
  for i, qname in enumerate(GGUF_TYPES):
    raw = _raw_blocks(gguf, qname, (2, 3, 256) if i % 2 else (4, 512), rng)
    w.add_tensor(qname, raw, raw_dtype=gguf.GGMLQuantizationType[qname])
    want[qname] = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qname]).astype(np.float32)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return fn, want, kv

def test_gguf_load_metadata_of_every_value_type(gguf_file):
  fn, _, kv = gguf_file
  got, _ = gguf_load(fn)
  assert got["general.architecture"] == "testarch" and got["general.alignment"] == 64
  for k, v in kv.items():
    assert got[k] == (pytest.approx(v) if k == "t.f32" else v), k   # f32 holds 1.5 exactly; f64 holds 0.1 exactly as python's

@pytest.mark.parametrize("qname", GGUF_TYPES)
def test_gguf_load_dequantizes_like_the_reference(gguf_file, qname):
  fn, want, _ = gguf_file
  _, tensors = gguf_load(fn)
  t = tensors[qname]
  assert t.shape == want[qname].shape   # dims are stored fastest first: the loader reverses them back
  assert t.dtype == {"F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16}.get(qname, dtypes.float32)
  np.testing.assert_array_equal(t.numpy().astype(np.float32), want[qname])

def test_gguf_load_v2_bytes_and_tensor_sources(gguf_file):
  fn, want, _ = gguf_file
  raw = bytearray(fn.read_bytes())
  raw[4:8] = struct.pack("<I", 2)   # v2 and v3 lay little-endian files out the same
  for src in (bytes(raw), Tensor(bytes(raw))):
    _, tensors = gguf_load(src)
    np.testing.assert_array_equal(tensors["Q4_K"].numpy(), want["Q4_K"])

def _gguf_bytes(kv: list[tuple[str, int, bytes]], infos: list[tuple[str, list[int], int, int]], data: bytes, version: int = 3,
                align: int = 32) -> bytes:
  """A GGUF file written by hand, to make the malformed ones: kv as (key, value type, packed value)."""
  def s(x: str) -> bytes: return struct.pack("<Q", len(x.encode())) + x.encode()
  out = b"GGUF" + struct.pack("<IQQ", version, len(infos), len(kv))
  out += b"".join(s(k) + struct.pack("<I", t) + v for k, t, v in kv)
  out += b"".join(s(n) + struct.pack("<I", len(d)) + struct.pack(f"<{len(d)}Q", *d) + struct.pack("<IQ", t, o) for n, d, t, o in infos)
  return out + b"\0" * (-len(out) % align) + data

def test_gguf_hand_written_file_loads():
  raw = _gguf_bytes([("k", 4, struct.pack("<I", 9))], [("x", [3, 2], 0, 0)], np.arange(6, dtype="<f4").tobytes())
  kv, tensors = gguf_load(raw)
  assert kv == {"k": 9} and tensors["x"].numpy().tolist() == [[0, 1, 2], [3, 4, 5]]

@pytest.mark.parametrize("case, msg", [
  ("bad_magic", r"bad magic b'GGML'"), ("version_1", r"version 1 is not supported"), ("big_endian", r"big-endian"),
  ("truncated_header", r"needs 8 bytes, but the file ends at"), ("unknown_value_type", r"unknown value type 13"),
  ("unknown_ggml_type", r"tensor 'x' has ggml type 99, which is unknown"), ("misaligned_offset", r"not a multiple of the alignment 32"),
  ("data_past_end", r"past the end of the"), ("bad_alignment", r"general.alignment is 3, not a power of two"),
  ("too_many_dims", r"tensor 'x' has 5 dimensions"), ("partial_block", r"has 48 elements per row, not a multiple of its block of 32")])
def test_gguf_load_refuses_malformed_files(tmp_path, case, msg):
  f32 = np.arange(6, dtype="<f4").tobytes()
  good = ([("k", 4, struct.pack("<I", 9))], [("x", [3, 2], 0, 0)], f32)
  raw = {"bad_magic": lambda: b"GGML" + _gguf_bytes(*good)[4:],
         "version_1": lambda: _gguf_bytes(*good, version=1),
         "big_endian": lambda: _gguf_bytes(*good, version=3 << 24),
         "truncated_header": lambda: _gguf_bytes(*good)[:20],
         "unknown_value_type": lambda: _gguf_bytes([("k", 13, b"\0" * 8)], [], b""),
         "unknown_ggml_type": lambda: _gguf_bytes(good[0], [("x", [3, 2], 99, 0)], f32),
         "misaligned_offset": lambda: _gguf_bytes(good[0], [("x", [3, 2], 0, 4)], f32 + b"\0" * 4),
         "data_past_end": lambda: _gguf_bytes(good[0], [("x", [3, 2], 0, 0)], f32[:-4]),
         "bad_alignment": lambda: _gguf_bytes([("general.alignment", 4, struct.pack("<I", 3))], [], b""),
         "too_many_dims": lambda: _gguf_bytes(good[0], [("x", [1, 1, 1, 1, 6], 0, 0)], f32),
         "partial_block": lambda: _gguf_bytes(good[0], [("x", [48], 8, 0)], b"\0" * 34 * 2)}[case]()
  (tmp_path / f"{case}.gguf").write_bytes(raw)
  with pytest.raises(ValueError, match=rf"{case}\.gguf: malformed GGUF file: .*{msg}"): gguf_load(tmp_path / f"{case}.gguf")

# *** fetch and Tensor.from_url against a server on 127.0.0.1 ***

class Server:
  """Serves `routes` {path: (status, body, headers)} and counts the requests each path got."""
  def __init__(self):
    self.routes: dict[str, tuple[int, bytes, dict[str, str]]] = {}
    self.hits: dict[str, int] = {}
    server = self
    class Handler(http.server.BaseHTTPRequestHandler):
      def do_GET(self):
        server.hits[self.path] = server.hits.get(self.path, 0) + 1
        status, body, headers = server.routes.get(self.path, (404, b"no such file", {}))
        self.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **headers}.items(): self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True
      def log_message(self, *a): pass
    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
    self.thread.start()
  def url(self, path: str) -> str: return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

@pytest.fixture
def server(tmp_path, monkeypatch):
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path / "cache"))
  s = Server()
  yield s
  s.httpd.shutdown()
  s.httpd.server_close()

def test_fetch_downloads_once_then_reads_the_cache(server, tmp_path):
  body = bytes(range(256)) * 4000
  server.routes["/w.bin"] = (200, body, {})
  p = fetch(server.url("/w.bin"))
  assert p.read_bytes() == body and p.parent == tmp_path / "cache" / "downloads" and server.hits["/w.bin"] == 1
  assert fetch(server.url("/w.bin")) == p and server.hits["/w.bin"] == 1   # a cache hit makes no request
  assert fetch(server.url("/w.bin"), allow_caching=False) == p and server.hits["/w.bin"] == 2
  assert fetch(server.url("/w.bin"), name="named.bin").name == "named.bin" and server.hits["/w.bin"] == 3
  assert [f.name for f in p.parent.iterdir() if f.name.startswith(".")] == []   # no temporary files left

def test_tensor_from_url_and_a_checkpoint_over_http(server, fake_torch, tmp_path):
  server.routes["/raw"] = (200, b"\x01\x02\xff", {})
  t = Tensor.from_url(server.url("/raw"))
  assert t.dtype == dtypes.uint8 and t.numpy().tolist() == [1, 2, 255]
  ckpt, want = _checkpoint(fake_torch)
  fake_torch.save_zip(ckpt, tmp_path / "m.pth")
  server.routes["/m.pth"] = (200, (tmp_path / "m.pth").read_bytes(), {})
  _check(torch_load(Tensor.from_url(server.url("/m.pth"), name="m.pth")), want)
  _check(torch_load(fetch(server.url("/m.pth"), name="m.pth")), want)
  assert server.hits["/m.pth"] == 1

def test_fetch_gunzip(server):
  body = b"weights " * 1000
  server.routes["/w.gz"] = (200, gzip.compress(body), {})
  assert fetch(server.url("/w.gz"), gunzip=True).read_bytes() == body
  assert Tensor.from_url(server.url("/w.gz"), gunzip=True).numpy().tobytes() == body
  server.routes["/plain"] = (200, b"not gzip", {})
  with pytest.raises(DownloadError, match=r"/plain: gunzip=True but the content is not valid gzip"): fetch(server.url("/plain"), gunzip=True)

def test_fetch_errors_leave_no_file(server, tmp_path):
  with pytest.raises(DownloadError, match=r"fetch http://127\.0\.0\.1:\d+/missing: the server answered HTTP 404"): fetch(server.url("/missing"))
  server.routes["/short"] = (200, b"0123456789", {"Content-Length": "100"})
  with pytest.raises(DownloadError, match=r"/short: the server sent 10 of 100 bytes"): fetch(server.url("/short"))
  downloads = tmp_path / "cache" / "downloads"
  assert not downloads.exists() or list(downloads.iterdir()) == []

def test_fetch_progress_bar(server, capsys):
  server.routes["/big"] = (200, b"x" * 3_000_000, {})
  fetch(server.url("/big"), name="big.bin", progress=True)
  err = capsys.readouterr().err
  assert "big.bin: 100% |" in err and "2.86 MB/2.86 MB" in err
  fetch(server.url("/big"), name="quiet.bin", progress=False)
  assert capsys.readouterr().err == ""
