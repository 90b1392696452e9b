"""Compile once, run anywhere: `python -m core.onnx compile/run` and core.onnx.load_compiled replay the saved binaries with new
inputs, compile nothing, give a fresh OnnxRunner's outputs, and refuse files of another device kind, core version or damaged ones."""
import json, os, struct, subprocess, sys, textwrap
import numpy as np
import pytest
from core.testing.helpers import ci_run
if not ci_run():   # the testing extra installs onnx: the core job must import it
  pytest.importorskip("onnx")
import onnx  # noqa: E402
from core.device.registry import Device  # noqa: E402
from core.engine.export import MAGIC, CompiledFileError, graph_from_bytes  # noqa: E402
from core.onnx import OnnxRunner, compile_model, load_compiled  # noqa: E402
from core.onnx.__main__ import main  # noqa: E402
from core.onnx.testing import MODELS, compiled_file, resnet  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def fresh(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
  return OnnxRunner(model)({"x": x})[model.graph.output[0].name].numpy()

@pytest.fixture
def no_compiler(monkeypatch):
  """Every way to compile a kernel raises: the device's compiler and codegen's entry point."""
  import core.codegen.program as program
  def boom(*a, **k): raise AssertionError("a compiler ran while replaying a compiled file")
  comp = Device[Device.DEFAULT].compiler
  for name in ("compile", "compile_cached"): monkeypatch.setattr(comp, name, boom)
  monkeypatch.setattr(program, "get_program", boom)
  monkeypatch.setattr(program, "compile_program", boom)
  yield

@pytest.fixture(scope="module")
def resnet_file(tmp_path_factory):
  return compiled_file(resnet, str(tmp_path_factory.mktemp("compiled")))

@pytest.mark.parametrize("queues", [None, True])
@pytest.mark.parametrize("name", list(MODELS))
def test_replay_matches_fresh_runner_without_compiling(name, queues, tmp_path, request):
  """Default replay (direct launches on CPU) and through the command queues (core's HCQ pipeline fed the saved programs)."""
  if queues and Device[Device.DEFAULT].hcq is None: pytest.skip(f"{Device.DEFAULT} has no command queues")
  model, shape = MODELS[name]()
  path = str(tmp_path / f"{name}.core")
  compile_model(model).save(path)
  rng = np.random.default_rng(11)
  # five inputs: on the CPU a kernel's first launches are timed on one thread and the later ones take the way chosen (runtime.SERIAL_US)
  xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(5)]
  wants = [fresh(model, x) for x in xs]
  request.getfixturevalue("no_compiler")
  m = load_compiled(path, queues=queues)
  assert type(m.replay).__name__ == ("HCQGraphReplay" if queues else "GraphReplay")
  out = model.graph.output[0].name
  for x, want in zip(xs, wants):   # new inputs: a call must not see an earlier one's values
    got = m({"x": x})[out]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

def test_no_compiler_fixture_really_blocks_compiling(no_compiler):
  model, shape = resnet()
  with pytest.raises(AssertionError, match="a compiler ran"): compile_model(model, shapes={"x": (1, 3, 8, 8)})

def test_roles_and_weights(resnet_file):
  model, shape, path = resnet_file
  g = graph_from_bytes(open(path, "rb").read())
  roles = [b.role for b in g.buffers]
  assert roles.count("input") == 1 and roles.count("output") == 1
  assert g.buffers[g.inputs[0]].size == int(np.prod(shape)) and g.buffers[g.outputs[0]].size == 2 * 10
  assert all((b.data is not None) == (b.role == "weight") for b in g.buffers)   # only weights carry bytes
  saved = {b.data for b in g.buffers if b.data is not None}
  # every conv weight is saved as the runner holds it (with the BatchNormalization after it folded in at load)
  runner = OnnxRunner(model)
  convs = [runner.consts.tensors[n.inputs[1]].numpy() for n in runner.nodes if n.op_type == "Conv"]
  assert len(convs) == 6 and all(w.tobytes() in saved for w in convs)
  assert g.kind["device"] == Device.DEFAULT and g.core_version and len(g.programs) > 0
  assert all(p.binary for p in g.programs)

def test_cli_compile_and_run(tmp_path, capsys):
  model, shape = resnet()
  onnx.save(model, str(tmp_path / "m.onnx"))
  x = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
  np.save(tmp_path / "x.npy", x)
  assert main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.core")]) == 0
  assert main(["run", str(tmp_path / "m.core"), "--input", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "out.npz")]) == 0
  out = np.load(tmp_path / "out.npz")[model.graph.output[0].name]
  np.testing.assert_allclose(out, fresh(model, x), rtol=1e-5, atol=1e-6)
  assert main(["run", str(tmp_path / "m.core"), "--random"]) == 0
  assert "shape (2, 10) float32" in capsys.readouterr().out

def test_cli_run_needs_inputs(resnet_file):
  with pytest.raises(SystemExit, match=r"no value for inputs \['x'\]"): main(["run", resnet_file[2]])

def test_wrong_input_shape_is_refused(resnet_file):
  m = load_compiled(resnet_file[2])
  with pytest.raises(ValueError, match=r"compiled for \(2, 3, 32, 32\) float32, got \(1, 3, 32, 32\)"): m({"x": np.zeros((1, 3, 32, 32), np.float32)})

def _rewrite_header(raw: bytes, edit) -> bytes:
  (n,) = struct.unpack_from("<Q", raw, len(MAGIC))
  start = len(MAGIC) + 8
  h = json.loads(raw[start:start + n])
  edit(h)
  head = json.dumps(h).encode()
  return MAGIC + struct.pack("<Q", len(head)) + head + raw[start + n:]

def test_other_device_kind_is_refused(resnet_file, tmp_path):
  raw = open(resnet_file[2], "rb").read()
  (tmp_path / "x.core").write_bytes(_rewrite_header(raw, lambda h: h["kind"].update(device="NV", renderer="PTXRenderer", dev="NV:PTX")))
  here = type(Device[Device.DEFAULT].renderer).__name__
  with pytest.raises(CompiledFileError, match=rf"compiled for NV \(renderer PTXRenderer.*device here is {Device.DEFAULT} \(renderer {here}"):
    load_compiled(tmp_path / "x.core")

def test_other_core_version_is_refused(resnet_file, tmp_path):
  import core
  raw = open(resnet_file[2], "rb").read()
  (tmp_path / "x.core").write_bytes(_rewrite_header(raw, lambda h: h.update(core_version="0.0.1")))
  with pytest.raises(CompiledFileError, match=rf"compiled with core 0\.0\.1, this is core {core.__version__}"): load_compiled(tmp_path / "x.core")

def test_other_renderer_is_refused_across_processes(resnet_file):
  """A file compiled with CPU's default renderer, loaded with DEV=CPU:C (same device, other compiler): refused, naming both."""
  if Device.DEFAULT != "CPU" or type(Device["CPU"].renderer).__name__ == "CPUCRenderer": pytest.skip("needs CPU with its LLVM renderer")
  r = subprocess.run([sys.executable, "-m", "core.onnx", "run", resnet_file[2], "--random"], env={**os.environ, "DEV": "CPU:C"},
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 2, r.stderr
  assert "CPULLVMRenderer" in r.stderr and "CPUCRenderer" in r.stderr and "Traceback" not in r.stderr

def test_truncated_files_are_refused(resnet_file):
  raw = open(resnet_file[2], "rb").read()
  for n in sorted({0, 3, len(MAGIC), len(MAGIC) + 5, len(MAGIC) + 8, len(MAGIC) + 40, len(raw) // 2, len(raw) - 1}):
    with pytest.raises(CompiledFileError, match="truncated|not a compiled|malformed"): graph_from_bytes(raw[:n])
  graph_from_bytes(raw)   # the whole file reads

@pytest.mark.parametrize("edit, msg", [
  (lambda h: h.pop("programs"), "header has no 'programs'"),
  (lambda h: h["programs"][0].update(binary=[10**9, 5]), r"truncated compiled file: programs\[0\].binary"),
  (lambda h: h["programs"][0].update(bufs=[0, 99999]), r"programs\[0\].bufs must be a list of integers >= 0 and < "),
  (lambda h: h["programs"][0].update(global_size="big"), r"programs\[0\].global_size is str, not list"),
  (lambda h: h["buffers"][0].update(dtype="float99"), r"buffers\[0\] has unknown dtype 'float99'"),
  (lambda h: h["buffers"][0].update(role="spare"), r"buffers\[0\] has role 'spare'"),
  (lambda h: h["buffers"][0].update(size=-1), r"buffers\[0\] holds"),
  (lambda h: h.update(format_version=99), "format version 99"),
  (lambda h: h["kind"].pop("device"), "kind has no 'device'"),
  (lambda h: h.update(meta={"inputs": [{"shape": [1]}]}), "input/output table is damaged"),
])
def test_malformed_header_is_refused(resnet_file, tmp_path, edit, msg):
  raw = open(resnet_file[2], "rb").read()
  (tmp_path / "bad.core").write_bytes(_rewrite_header(raw, edit))
  with pytest.raises(CompiledFileError, match=msg): load_compiled(tmp_path / "bad.core")

def test_not_json_and_not_ours(tmp_path):
  with pytest.raises(CompiledFileError, match="not a compiled core program"): graph_from_bytes(b"\x80\x04pickle" * 4)
  with pytest.raises(CompiledFileError, match="header is not JSON"): graph_from_bytes(MAGIC + struct.pack("<Q", 4) + b"\xff{{{")

_OTHER_DEV = textwrap.dedent("""
  import numpy as np, core.codegen.program as program
  from core.device.registry import Device
  from core.onnx import OnnxRunner, compile_model, load_compiled
  from core.onnx.testing import resnet
  model, shape = resnet()
  compile_model(model).save("m.core")
  x = np.random.default_rng(13).standard_normal(shape).astype(np.float32)
  want = OnnxRunner(model)({"x": x})[model.graph.output[0].name].numpy()
  def boom(*a, **k): raise AssertionError("compiler ran")
  Device[Device.DEFAULT].compiler.compile = Device[Device.DEFAULT].compiler.compile_cached = program.get_program = boom
  m = load_compiled("m.core")
  got = m({"x": x})[model.graph.output[0].name]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  print("replayed", Device.DEFAULT, type(m.replay).__name__)
""")

def _available(dev: str) -> bool:
  """The plugin of `dev` is installed (and for CL+QCOM an OpenCL driver is there); the default-interface probe can't tell."""
  import ctypes.util, importlib.util
  plugin = "plugin_" + dev.split("+")[-1].split(":")[0].lower()
  if importlib.util.find_spec(plugin) is None:
    assert not ci_run(), f"the core job installs every plugin, yet {plugin} is missing"
    return False
  return dev != "CL+QCOM" or ctypes.util.find_library("OpenCL") is not None

@pytest.mark.parametrize("dev", ["CPU:C", "DIRECT+CPU", "CL+QCOM", "MOCK+AMD", "MOCK+NV", "MOCK+QCOM"])
def test_compile_and_replay_on_other_devs(dev, tmp_path):
  """Each DEV compiles and replays in a process of its own (DEV is read once per process): direct launches where the runtime
  takes them (CPU, CL+QCOM), the HCQ pipeline fed the saved programs on the devices that run kernels only in their queues."""
  if not _available(dev): pytest.skip(f"{dev} needs its plugin" + (" and an OpenCL driver (pocl)" if dev == "CL+QCOM" else ""))
  r = subprocess.run([sys.executable, "-c", _OTHER_DEV], env={**os.environ, "DEV": dev}, cwd=tmp_path, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "replayed" in r.stdout

_IMAGES = textwrap.dedent("""
  import re, numpy as np
  from core.helpers import Context
  from core.onnx import OnnxRunner, compile_model, load_compiled
  from core.onnx.testing import mobilenet
  model, shape = mobilenet()
  g = compile_model(model)
  g.save("m.core")
  image_args = 0
  for p in g.programs:
    for i in map(int, re.findall(r"image2d_t data(\\d+)", p.source)):
      # IMAGE=1 reads as images only what the schedule does not write: the weights and the model's input
      assert g.buffers[p.bufs[i]].role in ("weight", "input"), (p.name, i, g.buffers[p.bufs[i]].role)
      image_args += g.buffers[p.bufs[i]].role == "weight"
  convs = [p for p in g.programs if len(p.bufs) > 3]   # a conv with its folded batch norm: weights, scale, bias, mean, var
  assert image_args >= len(convs) > 0, (image_args, len(convs))
  x = np.random.default_rng(14).standard_normal(shape).astype(np.float32)
  with Context(IMAGE=0): want = OnnxRunner(model)({"x": x})[model.graph.output[0].name].numpy()   # plain buffers
  got = load_compiled("m.core")({"x": x})[model.graph.output[0].name]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  print("images", image_args)
""")

@pytest.mark.parametrize("dev", ["CL+QCOM", "MOCK+QCOM"])
def test_compiled_vision_model_reads_weights_as_images(dev, tmp_path):
  """IMAGE=1 on QCOM: the compiled MobileNet's kernels take its weights (and its input, never a buffer they write) as read-only
  images, at least one weight image per conv kernel, and the replay
  (direct launches on CL, the command stream on MOCK) gives what plain buffers give."""
  if not _available(dev): pytest.skip(f"{dev} needs the qcom plugin" + (" and an OpenCL driver (pocl)" if dev == "CL+QCOM" else ""))
  r = subprocess.run([sys.executable, "-c", _IMAGES], env={**os.environ, "DEV": dev, "IMAGE": "1"}, cwd=tmp_path, capture_output=True, text=True,
                     timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "images" in r.stdout

def test_bench_rows_run_and_check_against_onnxruntime(capsys):
  """bench/onnx_models.py in a short run: its rows print, and every runner's output was checked against onnxruntime first
  (a smoke run: nothing about speed is asserted)."""
  if not ci_run(): pytest.importorskip("onnxruntime")
  import importlib.util
  spec = importlib.util.spec_from_file_location("bench_onnx_models", os.path.join(ROOT, "bench", "onnx_models.py"))
  assert spec is not None and spec.loader is not None
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  rows = mod.main(["--quick", "--models", "transformer"])
  assert [r["model"] for r in rows] == ["transformer"] and all(rows[0][k] > 0 for k in ("onnxruntime",) + mod.COLS)
  from core.onnx.testing import transformer
  assert rows[0]["nodes"] == len(transformer()[0].graph.node) and rows[0]["kernels"] > 0
  assert "transformer  2x8x32" in capsys.readouterr().out
