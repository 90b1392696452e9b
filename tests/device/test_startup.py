"""Start-up stays lazy (issue 23 item 7): what `import core` and plugin discovery load, checked by the modules a fresh process
has imported (bench/startup.py has the timings). The entry-point reader must agree with importlib.metadata."""
from __future__ import annotations
import ast, copy, dataclasses, enum, json, os, pathlib, pickle, subprocess, sys, types, zipfile
import importlib_metadata, pytest
from typing import Any, Callable
from core.device.entry_points import distributions_with_group, parse_entry_points, metadata_head

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

def imported_after(code: str, **env_vars: str | None) -> set[str]:
  """The modules imported in a new interpreter after `code` runs (with `env_vars` set, those of None unset), and their top-level
  packages."""
  probe = code + "\nimport sys\nprint('MODS', repr(sorted(sys.modules)))\n"   # repr, not json: whether json loads is checked too
  env = {k: v for k, v in {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_vars}.items() if v is not None}
  out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
  assert out.returncode == 0, out.stderr
  mods = ast.literal_eval(next(ln for ln in out.stdout.splitlines() if ln.startswith("MODS"))[5:])
  return set(mods) | {m.split(".")[0] for m in mods}

def test_import_core_and_tensor_load_nothing_heavy():
  mods = imported_after("import core\nfrom core import Tensor, dtypes")
  # LLVM, numpy, the plugin machinery and the metadata readers load when a device is first used, not at import
  assert not mods & {"llvmlite", "numpy", "pluggy", "importlib_metadata", "email", "plugin_cpu"}, mods & {"llvmlite", "numpy", "pluggy"}
  assert "core.tensor.tensor" in mods   # the probe itself is real: Tensor did load

def test_plugin_discovery_reads_no_metadata_library():
  mods = imported_after("from core.device.plugins import get_plugins\nprint(get_plugins().device_names())")
  assert "importlib_metadata" not in mods and "email.parser" not in mods and "importlib.metadata" not in mods
  assert "core.device.entry_points" in mods

FIRST_RESULT = "from core import Tensor\nassert (Tensor([1., 2., 3.]) + 1).numpy().tolist() == [2., 3., 4.]"

def test_a_warm_compile_cache_never_loads_llvm(tmp_path):
  # the first process compiles the kernel and the HCQ submit program (LLVM loaded: the probe sees it); the second finds both
  # in the cache, names them by the host facts cached beside them and loads the objects itself, so LLVM never loads
  cold = imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU:LLVM")
  assert "llvmlite.binding" in cold
  warm = imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU:LLVM")
  assert "llvmlite" not in warm and "core.device.elfload" in warm

# what only an error, a cache miss or a renderer with tensor cores needs: difflib (did-you-mean hints), signal (a faulted kernel's
# message), tempfile and shutil with bz2 and lzma (writing a cache entry, finding or running a C compiler), secrets with random
# (naming a file store's temporary file), the tensor-core tables, json (the CPU plugin's native library is checked without it)
NOT_ON_A_WARM_START = {"difflib", "signal", "tempfile", "shutil", "bz2", "lzma", "secrets", "random", "core.device.tensor_core", "json"}

def test_a_warm_start_imports_no_error_path_or_cache_writer_modules(tmp_path):
  cold = imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU")
  assert "tempfile" in cold   # the probe is real: the cold start wrote cache entries
  warm = imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU")
  assert not warm & NOT_ON_A_WARM_START, warm & NOT_ON_A_WARM_START
  # no DEV: the CPU plugin says it is available by its prebuilt native library, without looking for a compiler (shutil.which);
  # the example plugin's probe (a PATH search) is not run once a device of higher priority answered, and its hook module
  # imports shutil only in that probe
  import plugin_cpu
  prebuilt = any(pathlib.Path(plugin_cpu.__file__).parent.glob("_native*.so"))
  for disabled in ("example", ""):
    default = imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), CORE_DISABLED_PLUGINS=disabled, DEV=None)
    assert "plugin_example" in default or disabled, "the probe is real: choosing the default device imports every plugin"
    assert not default & (NOT_ON_A_WARM_START if prebuilt else NOT_ON_A_WARM_START - {"shutil", "bz2", "lzma"}), default & NOT_ON_A_WARM_START
    # nor is a lower-priority plugin's probe module imported to describe its device (WEBGPU's wgpu and Vulkan driver search)
    assert "plugin_webgpu.gpu" not in default

def test_a_warm_start_loads_no_openssl(tmp_path):
  # the cache keys, cached binaries' checksums and symbolic's hashes use CPython's own SHA-256 and BLAKE2b (core.helpers): hashlib
  # would load OpenSSL. A Python built without its own SHA-256 takes hashlib's, so the check needs one
  from core import helpers
  if helpers._sha256_builtin is None: pytest.skip("this Python has no built-in SHA-256: core takes hashlib's, which loads OpenSSL")
  imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU")   # fills the cache
  warm = imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU")
  assert "core.engine.realize" in warm and not warm & {"hashlib", "_hashlib"}, warm & {"hashlib", "_hashlib"}

def test_hashes_are_hashlibs():
  import hashlib
  from core.helpers import sha256, blake2b, SHA256_OPENSSL_BYTES
  for data in (b"", b"abc", bytes(range(256)) * 300, b"x" * SHA256_OPENSSL_BYTES, memoryview(b"kernel" * 100)):
    assert sha256(data).digest() == hashlib.sha256(data).digest() and sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert blake2b(data, digest_size=16).digest() == hashlib.blake2b(data, digest_size=16).digest()
  assert sha256(b"abc").hexdigest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"   # FIPS 180-2's example

# what neither `import core` nor a first result on a warm cache needs: LLVM, the ONNX importer, the graph viewer, the test helpers,
# the kernel search (its json and on-disk tables), the dataset fetcher (http), the metadata readers
HEAVY = {"llvmlite", "core.onnx", "core.viz", "core.testing", "core.codegen.opt.search", "core.fetch", "http", "email", "importlib_metadata"}

def test_neither_import_nor_a_warm_first_result_loads_heavy_modules(tmp_path):
  assert not (mods := imported_after("import core")) & (HEAVY | {"numpy", "core.tensor"}), mods & (HEAVY | {"numpy", "core.tensor"})
  imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path))   # fills the cache
  warm = imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path))
  assert "core.engine.realize" in warm and not warm & HEAVY, warm & HEAVY

def test_host_llvm_facts_are_cached_and_a_damaged_file_is_asked_again(tmp_path, monkeypatch):
  from core.device import llvm_host
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path))
  llvm_host.host_llvm.cache_clear()
  try:
    asked = llvm_host._ask_llvm()
    assert llvm_host.host_llvm() == asked and asked.cpu and asked.triple and asked.version.count(".") == 2
    (path,) = (tmp_path / "llvm_host").iterdir()
    assert path.read_text().split("\n") == [asked.version, asked.triple, asked.cpu, asked.features]
    # what the file says is what later processes use (it is read, not recomputed)
    other = "\n".join([asked.version, asked.triple, "some-other-cpu", asked.features])
    path.write_text(other)
    llvm_host.host_llvm.cache_clear()
    assert llvm_host.host_llvm().cpu == "some-other-cpu"
    # damaged: a line missing, an empty fact, the JSON an older core wrote
    for bad in ["\n".join([asked.version, asked.triple, asked.cpu]), other.replace("some-other-cpu", ""), json.dumps({"cpu": "x"})]:
      path.write_text(bad)
      llvm_host.host_llvm.cache_clear()
      assert llvm_host.host_llvm() == asked and path.read_text().split("\n")[2] == asked.cpu
    # no /proc/cpuinfo to name the CPU by: LLVM is asked, the folder (which another machine may share) is not read
    path.write_text(other)
    monkeypatch.setattr(llvm_host, "_cpuinfo", lambda: "")
    llvm_host.host_llvm.cache_clear()
    assert llvm_host.host_llvm() == asked
  finally: llvm_host.host_llvm.cache_clear()

def _dist(root, folder: str, name: str, version: str, eps: str, meta: str = "METADATA") -> None:
  d = root / folder
  d.mkdir()
  (d / meta).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: x\n\nName: not-this-one\n")
  (d / "entry_points.txt").write_text(eps)

def test_entry_point_reader_agrees_with_importlib_metadata(tmp_path):
  _dist(tmp_path, "plugin_a-1.2.dist-info", "plugin-a", "1.2", "[console_scripts]\nx = y:z\n\n[core.plugins]\nA = plugin_a\n# a comment\nB=plugin_a:hooks\n")
  _dist(tmp_path, "plugin_b-0.1.egg-info", "plugin-b", "0.1", "[core.plugins]\nC = plugin_b\n", meta="PKG-INFO")
  _dist(tmp_path, "plugin_c-0.1.dist-info", "plugin-c", "0.1", "[ core.plugins ]\nD = plugin_c\n")   # another group to both readers
  _dist(tmp_path, "other-3.0.dist-info", "other", "3.0", "[console_scripts]\ncore.plugins = nope\n")
  (tmp_path / "nothing-1.0.dist-info").mkdir()   # no entry_points.txt at all
  ours = {(d.name, d.version): sorted((e.name, e.value) for e in d.entry_points) for d in distributions_with_group("core.plugins", [str(tmp_path)]) or []}
  theirs = {}
  for d in importlib_metadata.distributions(path=[str(tmp_path)]):
    if (eps := sorted((e.name, e.value) for e in d.entry_points if e.group == "core.plugins")): theirs[(d.metadata["Name"], d.version)] = eps
  assert ours == theirs == {("plugin-a", "1.2"): [("A", "plugin_a"), ("B", "plugin_a:hooks")], ("plugin-b", "0.1"): [("C", "plugin_b")]}

def test_entry_point_reader_defers_zip_paths(tmp_path):
  z = tmp_path / "bundle.zip"
  with zipfile.ZipFile(z, "w") as f: f.writestr("p-1.0.dist-info/entry_points.txt", "[core.plugins]\nP = p\n")
  assert distributions_with_group("core.plugins", [str(tmp_path / "missing"), str(z)]) is None   # importlib.metadata reads zips
  assert distributions_with_group("core.plugins", [str(tmp_path / "missing")]) == []

def test_entry_points_are_read_from_the_cache_until_a_folder_changes(tmp_path, monkeypatch):
  from core import helpers
  from core.device import entry_points
  site, scans = tmp_path / "site", []
  site.mkdir()
  monkeypatch.setenv("CORE_CACHE_DIR", str(tmp_path / "cache"))
  scan = entry_points._scan
  monkeypatch.setattr(entry_points, "_scan", lambda *a: scans.append(a) or scan(*a))
  def found() -> list[tuple]: return [(d.name, d.version, [tuple(e) for e in d.entry_points]) for d in distributions_with_group("core.plugins", [str(site)]) or []]
  _dist(site, "plugin_a-1.0.dist-info", "plugin-a", "1.0", "[core.plugins]\nA = plugin_a\nB = plugin_a:hooks\n")
  (site / "plugin_n-0.1.egg-info").mkdir()   # no PKG-INFO: name and version None
  (site / "plugin_n-0.1.egg-info" / "entry_points.txt").write_text("[core.plugins]\nN = plugin_n\n")
  a = ("plugin-a", "1.0", [("A", "plugin_a", "core.plugins"), ("B", "plugin_a:hooks", "core.plugins")])
  n = (None, None, [("N", "plugin_n", "core.plugins")])
  assert found() == found() == [a, n] and len(scans) == 2   # a folder changed in the last SETTLE_NS is scanned each time
  monkeypatch.setattr(helpers, "SETTLE_NS", 0)   # from here every stamp counts as settled
  assert found() == [a, n] and len(scans) == 3   # scanned once more and written
  assert found() == found() == [a, n] and len(scans) == 3   # then read back as it was
  # an install adds a dist-info folder (the folder's times change): seen at once
  _dist(site, "plugin_b-2.0.dist-info", "plugin-b", "2.0", "[core.plugins]\nC = plugin_b\n")
  b = ("plugin-b", "2.0", [("C", "plugin_b", "core.plugins")])
  assert found() == found() == [a, b, n] and len(scans) == 4
  # a removal too
  for f in ("METADATA", "entry_points.txt"): (site / "plugin_a-1.0.dist-info" / f).unlink()
  (site / "plugin_a-1.0.dist-info").rmdir()
  assert found() == found() == [b, n] and len(scans) == 5
  # an entry_points.txt written in place (no folder's times change), one added to a dist-info folder without any, one removed
  eps = site / "plugin_b-2.0.dist-info" / "entry_points.txt"
  eps.write_text("[core.plugins]\nC = plugin_b\nD = plugin_b\n")
  b = ("plugin-b", "2.0", [("C", "plugin_b", "core.plugins"), ("D", "plugin_b", "core.plugins")])
  assert found() == found() == [b, n] and len(scans) == 6
  _dist(site, "plain-1.0.dist-info", "plain", "1.0", "[console_scripts]\nx = y:z\n")
  (site / "plain-1.0.dist-info" / "entry_points.txt").unlink()
  assert found() == found() == [b, n] and len(scans) == 7
  (site / "plain-1.0.dist-info" / "entry_points.txt").write_text("[core.plugins]\nP = plain\n")
  p = ("plain", "1.0", [("P", "plain", "core.plugins")])
  assert found() == found() == [p, b, n] and len(scans) == 8
  (site / "plain-1.0.dist-info" / "entry_points.txt").unlink()
  assert found() == found() == [b, n] and len(scans) == 9
  # a damaged or cleared cache is scanned again
  (cache,) = (tmp_path / "cache" / "entry_points").iterdir()
  cache.write_text(cache.read_text() + "\nX\tbroken")
  assert found() == found() == [b, n] and len(scans) == 10
  cache.unlink()
  assert found() == found() == [b, n] and len(scans) == 11
  # the same folder named relatively has its own entry (its distributions' paths are relative); a zip on the path still defers
  monkeypatch.chdir(site)
  assert [(d.name, d.path) for d in distributions_with_group("core.plugins", ["."]) or []] == \
    [("plugin-b", "./plugin_b-2.0.dist-info"), (None, "./plugin_n-0.1.egg-info")] and len(scans) == 12
  assert distributions_with_group("core.plugins", [str(site), str(tmp_path / "cache" / "entry_points" / cache.name)]) is None

def test_parsers():
  assert [(e.group, e.name, e.value) for e in parse_entry_points("; c\n[g]\na = m:f\n[h]\nb=n\n")] == [("g", "a", "m:f"), ("h", "b", "n")]
  assert metadata_head("Name: x\nVersion: 2\n\nVersion: 3\n") == {"Name": "x", "Version": "2"}

def test_rule_ctx_detection_agrees_with_inspect():
  # PatternMatcher reads whether a rule takes ctx from its code object (cheaper than inspect.signature): the same answer
  import functools, inspect
  from core.ir.pattern import _wants_ctx
  def plain(ctx, x): return x
  def kw_only(x, *, ctx=None): return x
  def var_kw(x, **kw): return x
  def uses_ctx_inside(x):
    ctx = x
    return ctx
  class Rules:
    def method(self, ctx, x): return x
    def __call__(self, x, ctx): return x
  fns = [plain, kw_only, var_kw, uses_ctx_inside, lambda x: x, lambda ctx, x: x, Rules().method, Rules(), functools.partial(plain, 1),
         functools.partial(var_kw)]
  got = [_wants_ctx(f) for f in fns]
  assert got == ["ctx" in inspect.signature(f).parameters for f in fns]
  assert got == [True, True, False, False, False, True, True, True, False, False]

def test_an_untimed_submission_loads_neither_the_timestamps_stage_nor_the_queue_spec(tmp_path):
  # the HCQ pipeline imports its timestamps stage only for timed submissions (DEBUG>=2, PROFILE) and the queue spec only under SPEC
  # (which the tests' conftest sets: a plain start has it off)
  plain = imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU", SPEC="0")
  assert "core.hcq.pipeline" in plain and not plain & {"core.hcq.timestamps", "core.ir.spec"}, plain & {"core.hcq.timestamps", "core.ir.spec"}
  assert "core.hcq.timestamps" in imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU", SPEC="0", DEBUG="2")
  assert "core.ir.spec" in imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU", SPEC="1")

def test_an_llvm_start_imports_no_c_codegen(tmp_path):
  # the CPU plugin's C renderer (and core's C code generator under it) loads only where DEV asks for it
  c_codegen = {"plugin_cpu.c_renderer", "core.codegen.c_style", "core.codegen.access_guard"}
  llvm = imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU:LLVM")
  assert "plugin_cpu.renderer" in llvm and not llvm & c_codegen, llvm & c_codegen
  assert c_codegen <= imported_after(FIRST_RESULT, CORE_CACHE_DIR=str(tmp_path), DEV="CPU:C")

def test_timed_submission_times_its_kernel():
  # the timestamps stage, imported on demand, still runs and reads back a time for each launch
  from core import Tensor
  from core.device.registry import Device
  from core.helpers import Context
  from core.device.counters import GlobalCounters
  if not Device.DEFAULT.startswith("CPU"): pytest.skip(f"the timestamps stage of the CPU device; DEV is {Device.DEFAULT}")
  GlobalCounters.reset()
  with Context(DEBUG=2): assert (Tensor([1., 2., 3.]) * 3).numpy().tolist() == [3., 6., 9.]
  # the launch's two timestamps were read back: its time is counted (without DEBUG>=2 no timestamps are taken and it stays 0)
  assert GlobalCounters.kernel_count >= 1 and GlobalCounters.time_sum_s > 0, (GlobalCounters.kernel_count, GlobalCounters.time_sum_s)

def _plugin_module(name: str) -> types.ModuleType:
  # every kind of attribute a module plugin can hold: marked functions (one hook misspelled), a marked staticmethod and
  # classmethod object, an unmarked function, imports, a class, plain values
  from core.device.hookspecs import hookimpl
  mod = types.ModuleType(name)
  exec("import os, pathlib\nfrom typing import Any\nX = 3\nclass K: pass\ndef helper(): return 1\n", mod.__dict__)
  mod.core_plugin_info = hookimpl(lambda: {"name": name, "version": "1", "api": (2, 0)})
  mod.core_devices = hookimpl(lambda: [])
  mod.core_pm_lower = staticmethod(hookimpl(lambda device: None))
  mod.core_pm_bufferize = classmethod(hookimpl(lambda cls, device: None))
  return mod

def test_module_plugins_register_the_hooks_pluggy_finds_without_its_attribute_walk(monkeypatch):
  # core's hook manager reads a module plugin's hooks from its dict; pluggy's own walk (inspect.getattr_static on each name of
  # dir(plugin), its imports included) found the same hooks at several times the cost, before the first Tensor of every start
  import inspect, pluggy, plugin_cpu
  from core.device import hookspecs
  from core.device.plugins import PluginManager
  def hooks(pm: pluggy.PluginManager) -> list:
    return sorted((h, i.plugin_name, i.function.__name__) for h in dir(pm.hook) if not h.startswith("_") for i in getattr(pm.hook, h).get_hookimpls())
  mods = [plugin_cpu, _plugin_module("plugin_fake")]
  ref = pluggy.PluginManager(hookspecs.PROJECT)
  ref.add_hookspecs(hookspecs)
  for m in mods: ref.register(m, name=m.__name__)
  ours = PluginManager(distributions=lambda: []).pm
  calls: list[str] = []
  static = inspect.getattr_static
  monkeypatch.setattr(inspect, "getattr_static", lambda obj, name, *a: calls.append(name) or static(obj, name, *a))
  for m in mods: ours.register(m, name=m.__name__)
  assert hooks(ours) == hooks(ref) and len(hooks(ours)) == len(hookspecs.HOOK_NAMES) + 4
  # pluggy's lookup is asked only about the hooks it registers (to bind each), never about the modules' other names
  assert calls and set(calls) == set(hookspecs.HOOK_NAMES), sorted(set(calls) - set(hookspecs.HOOK_NAMES))

# Regular expressions and dataclass signatures cost start-up time: compiling one pattern is ~0.4M instructions, and dataclass()
# gives a class without a docstring one built by inspect.signature (~0.5M). The probe runs the first result with re's compile
# step watched and lists the dataclasses core and the CPU plugin made.
PROBE_START = """
import sys, sysconfig, dataclasses, numpy   # Python's and numpy's own patterns compile at their import: not ours
import re
STDLIB = sysconfig.get_paths()["stdlib"]
ours = []
compile_ = re._compile
def watched(pattern, flags):
  f = sys._getframe(1)
  # the first caller outside Python's library (re, fnmatch, pathlib, importlib) is the code that asked for the pattern; a
  # library module's own top-level code (urllib.parse's patterns, compiled when core's `import pathlib` first loads it) is not
  while f is not None and (f.f_code.co_filename.startswith(STDLIB) or f.f_code.co_filename.startswith("<frozen")):
    if f.f_code.co_name == "<module>" and f.f_code.co_filename.startswith(STDLIB): return compile_(pattern, flags)
    f = f.f_back
  if f is not None and ("/core/" in f.f_code.co_filename or "/plugin_cpu/" in f.f_code.co_filename):
    ours.append((str(pattern), f.f_code.co_filename, f.f_lineno))
  return compile_(pattern, flags)
re._compile = watched
from core import Tensor
assert (Tensor([1., 2., 3.]) + 1).numpy().tolist() == [2., 3., 4.]
undocumented = sorted(f"{c.__module__}.{c.__qualname__}" for m in list(sys.modules.values()) if m.__name__.startswith(("core", "plugin_cpu"))
                      for c in list(vars(m).values()) if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == m.__name__
                      and (c.__doc__ or "").startswith(c.__name__ + "("))
print("PROBE", repr((ours, undocumented)))
"""

def _probe_start(tmp_path) -> tuple[list, list]:
  env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "CORE_CACHE_DIR": str(tmp_path)}
  out = subprocess.run([sys.executable, "-c", PROBE_START], capture_output=True, text=True, env=env, timeout=120)
  assert out.returncode == 0, out.stderr
  return ast.literal_eval(next(ln for ln in out.stdout.splitlines() if ln.startswith("PROBE"))[6:])

def test_a_warm_start_compiles_no_regular_expression_and_no_dataclass_signature(tmp_path):
  _probe_start(tmp_path)   # fills the cache
  patterns, undocumented = _probe_start(tmp_path)
  assert patterns == [], f"core or the CPU plugin compiled regular expressions on a warm start: {patterns}"
  assert undocumented == [], f"dataclasses without a docstring (dataclass() runs inspect.signature for them): {undocumented}"

def test_name_checks_agree_with_the_patterns_they_replace():
  import re
  from core.device.compiler import cache_folder
  from core.device.plugins import _norm, _short
  from core.device.target import _is_arch, _is_name
  samples = ["", "cpu", "CPU", "_x1", "1x", "a-b", "a.b", "sm_90", "gfx1100", "znver4", "x86-64-v3", "é", "a b", "a\tb", "cpu\n", "..", ".x",
             "plugin-cpu", "plugin_cpu", "Plugin__CPU", "my.plugin--x", "a-_.b", "-a-", "cpu_native_gcc 12/x:y", "c++"]
  for s in samples:
    assert _is_name(s) == bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s)), s
    assert _is_arch(s) == bool(re.fullmatch(r"[A-Za-z0-9_.\-]+", s)), s
    assert _norm(s) == re.sub(r"[-_.]+", "-", s).lower(), s
    assert _short(s) == re.sub(r"^plugin[-_]", "", re.sub(r"[-_.]+", "-", s).lower()), s
    assert cache_folder(s) == (re.sub(r"[^A-Za-z0-9_.+-]", "_", s).lstrip(".") or "_"), s

# Building an enum by the class statement sends each member through EnumType's _EnumDict and a __set_name__ step (~43k
# instructions a member, 3.7M for Ops' 84); core.helpers.int_enum builds the same IntEnum by enum._simple_enum.
PROBE_ENUMS = """
import enum
names = []
set_item = enum._EnumDict.__setitem__
def watched(self, key, value):
  names.append(key)
  set_item(self, key, value)
enum._EnumDict.__setitem__ = watched
import core.ir.ops
print("NAMES", repr(sorted(set(names))))
"""

@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 has no enum._simple_enum: int_enum takes the class statement's route")
def test_core_enums_are_built_without_the_enum_class_statement():
  env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
  out = subprocess.run([sys.executable, "-c", PROBE_ENUMS], capture_output=True, text=True, env=env, timeout=120)
  assert out.returncode == 0, out.stderr
  names = set(ast.literal_eval(next(ln for ln in out.stdout.splitlines() if ln.startswith("NAMES"))[6:]))
  from core.ir.dtype import AddrSpace
  from core.ir.ops import AxisType, Ops
  members = {m.name for e in (Ops, AxisType, AddrSpace) for m in e}
  assert len(members) > 90 and not names & members, sorted(names & members)

def _enum_facts(e: type) -> list:
  return [(m.name, m.value, repr(m), format(m), f"{m:>4}", int(m), hash(m), m == int(m), m.__class__.__name__) for m in e] + \
         [e.__doc__, e.__module__, e.__qualname__, issubclass(e, enum.IntEnum), e(7).name, e["W"].value, list(e.__members__), len(e)]

@pytest.mark.parametrize("simple", [True, False], ids=["simple_enum", "class_statement_route"])
def test_int_enum_makes_the_enum_the_class_statement_makes(simple, monkeypatch):
  from core.helpers import IntEnumBody, int_enum
  class E(enum.IntEnum):
    """Doc."""
    X = enum.auto(); Y = enum.auto(); Z = 7; W = enum.auto()  # noqa: E702
    def __repr__(self) -> str: return f"E.{self.name}"
  if not simple: monkeypatch.setattr(sys, "version_info", (3, 10, 0))   # the route a Python without enum._simple_enum takes
  elif sys.version_info < (3, 11): pytest.skip("3.10 has no enum._simple_enum")
  expected = _enum_facts(E)
  @int_enum
  class E(IntEnumBody):  # type: ignore[no-redef]
    """Doc."""
    X = enum.auto(); Y = enum.auto(); Z = 7; W = enum.auto()  # noqa: E702
    def __repr__(self) -> str: return f"E.{self.name}"
  assert _enum_facts(E) == expected
  assert [(m.name, m.value) for m in E] == [("X", 1), ("Y", 2), ("Z", 7), ("W", 8)] and E(7) is E.Z and E["W"] is E.W

# dataclass() writes each method of a class as source text and execs it at every import: ~3.9M instructions (Python's parser
# and compiler) a frozen class. core.helpers.frozen_record and mutable_record make the same classes from functions compiled
# once into the bytecode cache, and generate a record's __init__ on its first instance. The probe lists the modules whose
# dataclass methods were generated during a warm first result.
PROBE_DATACLASS_SOURCE = """
import dataclasses, sys
import numpy
made = set()
create_fn = dataclasses._create_fn
def watched(name, args, body, *, globals=None, **kw):
  made.add(((globals or {}).get("__name__", "?"), name))
  return create_fn(name, args, body, globals=globals, **kw)
dataclasses._create_fn = watched
from core import Tensor
assert (Tensor([1., 2., 3.]) + 1).numpy().tolist() == [2., 3., 4.]
print("MADE", repr(sorted(m for m in made if m[0].split(".")[0] in ("core", "plugin_cpu"))))
"""

def test_a_warm_start_generates_dataclass_source_only_for_opt_and_a_frozen_subclass(tmp_path):
  env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "CORE_CACHE_DIR": str(tmp_path)}
  for _ in range(2):   # the first run fills the compile cache
    out = subprocess.run([sys.executable, "-c", PROBE_DATACLASS_SOURCE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
  made = ast.literal_eval(next(ln for ln in out.stdout.splitlines() if ln.startswith("MADE"))[5:])
  # left: the optimizer's Opt, a dataclass; CPUProgramData, a record under the frozen ProgramData: dataclass() writes its two
  # frozen methods (a frozen dataclass may derive only from frozen ones)
  opt = [("core.codegen.opt.kernel", m) for m in ("__delattr__", "__eq__", "__hash__", "__init__", "__repr__", "__setattr__")]
  assert set(made) <= {*opt, ("plugin_cpu.queue", "__delattr__"), ("plugin_cpu.queue", "__setattr__")}, made

def _record_classes(deco: Any) -> tuple[type, type]:
  @deco
  class Base:
    """Doc."""
    a: int
    b: str = "x"
    c: dict = dataclasses.field(default_factory=dict, compare=False)
    d: Callable[[], bool] = lambda: True
    e: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)
  @deco
  class Sub(Base):
    """Sub."""
    f: tuple = ()
    def __post_init__(self) -> None:
      if self.a < 0: raise ValueError("negative")
  return Base, Sub

def _record_facts(base: Any, sub: Any, frozen: bool) -> list:
  x, y, z = base(1), base(1, "x", {"k": 1}), sub(2, f=(1, 2))
  out = [repr(x).split(", d=")[0], repr(z).split(", d=")[0], x == y, x != y, x == sub(1), z == sub(2, f=(1, 2)), x.c, y.c, x.c is not base(1).c,
         [f.name for f in dataclasses.fields(sub)], dataclasses.is_dataclass(x), sub.__match_args__, base.__doc__, base.__init__.__qualname__,
         dataclasses.replace(z, a=5).a, dataclasses.replace(z, a=5).f, dataclasses.asdict(base(3, e=1))["a"], dataclasses.astuple(base(3))[:3]]
  bad: list[Callable[[], Any]] = [lambda: base(), lambda: base(1, 2, 3, 4, 5, 6), lambda: base(1, zz=2), lambda: sub(-1)]
  if frozen: bad += [lambda: setattr(x, "a", 2), lambda: setattr(x, "zz", 2), lambda: delattr(x, "a")]
  for fn in bad:
    try: out.append(("no error", fn()))
    except Exception as e: out.append((type(e).__name__, str(e)))
  if frozen: out += [hash(x) == hash(y), hash(x) == hash((1, "x", x.d)), hash(sub(2)) == hash(sub(2)), copy.deepcopy(z) == z]
  else:
    x.a = 7
    out += [x.a, base.__hash__ is None]
  return out

@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "mutable"])
def test_records_behave_as_the_dataclasses_they_replace(frozen):
  from core.helpers import frozen_record, mutable_record
  old = _record_facts(*_record_classes(dataclasses.dataclass(frozen=frozen)), frozen)
  assert _record_facts(*_record_classes(frozen_record if frozen else mutable_record), frozen) == old

def test_core_records_pickle_and_copy():
  from core.device.allocator import BufferSpec
  from core.device.target import Target
  from core.codegen.program import ProgramSpec
  for r in (BufferSpec(host=True), Target(device="CPU", renderer="LLVM"), ProgramSpec("k", (2, 1, 1), estimates={"ops": 3})):
    assert pickle.loads(pickle.dumps(r)) == r and copy.copy(r) == r and hash(copy.deepcopy(r)) == hash(r)

def test_a_frozen_dataclass_and_a_record_derive_from_a_frozen_record():
  from core.helpers import frozen_record, mutable_record
  from core.hcq.queue_ir import ProgramData
  @dataclasses.dataclass(frozen=True)
  class Plugin(ProgramData):   # what every plugin's ProgramData is
    arch: str = ""
  @frozen_record
  class Rec(ProgramData):
    """Rec."""
    arch: str = ""
  for cls in (Plugin, Rec):
    p = cls("k", 16, 8, (0, 8), "x")
    assert p == cls("k", 16, 8, (0, 8), "x") and hash(p) == hash(("k", 16, 8, (0, 8), "x")) and repr(p).endswith("arg_offsets=(0, 8), arch='x')")
    with pytest.raises(dataclasses.FrozenInstanceError): p.arch = "y"   # type: ignore[misc]
  with pytest.raises(TypeError, match="non-frozen dataclass from a frozen one"):
    @mutable_record
    class Mutable(ProgramData):
      arch: str = ""

def test_records_reject_what_they_do_not_support():
  from core.helpers import frozen_record
  with pytest.raises(TypeError, match="defaults go last"):
    @frozen_record
    class A:
      a: int = 1
      b: int = dataclasses.field()
  with pytest.raises(TypeError, match="defines __eq__"):
    @frozen_record
    class B:
      a: int
      def __eq__(self, other: object) -> bool: return True
