"""The frameworks bench/suite.py compares: how each one runs every row of the suite (ours, numpy, torch, tinygrad)."""
from __future__ import annotations
import os, re, subprocess, sys, tempfile, threading, time
from dataclasses import dataclass
from typing import Any, Callable
import numpy as np
import suite_models as models

class NotApplicable(Exception):
  """The framework has no such operation (numpy has no conv2d or autograd): the table shows n/a, not an error."""

@dataclass
class Case:
  """One row on one framework, ready to time. `run` is one timed call and waits for the device; `result` reads what the
  last call produced (numpy arrays) for the check against numpy; the figure is per operation, `count` per call."""
  run: Callable[[], Any]
  result: Callable[[], Any] | None = None
  count: int = 1
  calls_before_check: int = 1   # a Jit must run eagerly, capture and replay once before its replay path is checked
  fresh: bool = False           # every call compiles a new kernel (the compile row): no warm-up call before timing
  max_calls: int | None = None  # calls that stay fresh (the compile row has one new kernel per prepared input)

# *** quiet threads before a cell ***

# Libraries keep their idle threads polling after a call so the next one starts at once: measured here after 5 calls, the
# process's other threads burned 100 ms of CPU in the 0.1 s after a numpy matmul (OpenBLAS's workers), 10 ms after a torch op
# (libgomp's); ours poll CPU_SPIN_US (0.3 ms). On a machine with few cores a cell started in that time shares a core with
# them (ours then falls back to its launching thread: CPU_BACKOFF_US), so every cell starts once the others are quiet.
SETTLE_STEP_S = 0.02    # a window in which the other threads must stay (nearly) off the CPU
SETTLE_BUSY = 0.1       # ... at most this share of one core, all together
SETTLE_MAX_S = 1.0      # a thread that never stops (a peer's spinning barrier on a loaded host) delays a cell at most this long
SETTLE_BLIND_S = 0.15   # without /proc: a plain wait, longer than OpenBLAS's polling

def _other_threads_cpu_ns() -> int | None:
  """On-CPU nanoseconds of the process's threads but the calling one (Linux: /proc/self/task/*/schedstat); None elsewhere."""
  me = threading.get_native_id()
  try: tids = [t for t in os.listdir("/proc/self/task") if int(t) != me]
  except OSError: return None
  total = 0
  for t in tids:
    try:
      with open(f"/proc/self/task/{t}/schedstat") as f: total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError): pass   # a thread that ended meanwhile
  return total

def settle(park: Callable[[], None] = lambda: None, max_s: float = SETTLE_MAX_S) -> bool:
  """Parks our pool (`park`) and waits until the process's other threads stay off the CPU for SETTLE_STEP_S (every library's
  polling workers have gone to sleep), at most `max_s`: False when that ran out. Where threads' CPU time can't be read (no
  /proc), a plain wait of SETTLE_BLIND_S."""
  park()
  last = _other_threads_cpu_ns()
  if last is None:
    time.sleep(SETTLE_BLIND_S)
    return True
  end = time.perf_counter() + max_s
  while time.perf_counter() < end:
    time.sleep(SETTLE_STEP_S)
    now = _other_threads_cpu_ns() or 0
    if now - last <= SETTLE_BUSY * SETTLE_STEP_S * 1e9: return True
    last = now
  return False

# *** numpy reference of the MLP step, shared by every framework's check ***

def mlp_forward_backward(p: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, list[np.ndarray]]:
  """Loss and gradients of relu(relu(x@w1+b1)@w2+b2)@w3+b3 under mean softmax cross-entropy, in float64."""
  w1, b1, w2, b2, w3, b3 = [q.astype(np.float64) for q in p]
  x = x.astype(np.float64)
  h1 = x @ w1 + b1; a1 = np.maximum(h1, 0)
  h2 = a1 @ w2 + b2; a2 = np.maximum(h2, 0)
  z = a2 @ w3 + b3
  z = z - z.max(axis=1, keepdims=True)
  sm = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
  n = x.shape[0]
  loss = float(-np.log(sm[np.arange(n), y]).mean())
  dz = sm.copy(); dz[np.arange(n), y] -= 1; dz /= n
  dw3, db3 = a2.T @ dz, dz.sum(0)
  da2 = dz @ w3.T * (h2 > 0)
  dw2, db2 = a1.T @ da2, da2.sum(0)
  da1 = da2 @ w2.T * (h1 > 0)
  dw1, db1 = x.T @ da1, da1.sum(0)
  return loss, [dw1, db1, dw2, db2, dw3, db3]

def mlp_reference(d: dict[str, Any]) -> list[np.ndarray]:
  """The parameter updates (after - before) of d['steps'] SGD steps on the same batch."""
  p = [q.astype(np.float64) for q in d["params"]]
  for _ in range(d["steps"]):
    _, g = mlp_forward_backward(p, d["x"], d["y"])
    p = [q - d["lr"] * gq for q, gq in zip(p, g)]
  return [q - q0 for q, q0 in zip(p, d["params"])]

def jit_reference(x: np.ndarray, kernels: int) -> np.ndarray:
  for _ in range(kernels): x = x * np.float32(0.5) + np.float32(1.0)
  return x

def fused_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: float) -> np.ndarray: return np.maximum(a * b + c, 0) * np.float32(s) - 1

def conv_reference(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 1, groups: int = 1) -> np.ndarray:
  """conv2d, NCHW/OIHW (w: cout, cin/groups, k, k), square stride and zero padding, in float64."""
  k = w.shape[-1]
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]   # N C OH OW k k
  n, c, oh, ow = win.shape[:4]
  win = win.reshape(n, groups, c // groups, oh, ow, k, k)
  wg = w.astype(np.float64).reshape(groups, w.shape[0] // groups, *w.shape[1:])
  return np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True).reshape(n, w.shape[0], oh, ow)

def host_bf16_dot() -> bool:
  """The CPU has a bfloat16 dot-product instruction (x86 AVX512_BF16: vdpbf16ps), which the bf16 matmul row is about."""
  try:
    with open("/proc/cpuinfo") as f: return "avx512_bf16" in next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
  except OSError: return False

def conv_args(d: dict[str, Any]) -> dict[str, int]:
  """The conv rows' keyword arguments, as conv2d in ours, tinygrad and torch spell them."""
  return {"stride": d.get("stride", 1), "padding": d.get("padding", 1), "groups": d.get("groups", 1)}

# *** tensor-style frameworks: ours and tinygrad share the Tensor API, so one adapter runs both ***

class TensorLib:
  """Runs the rows on a framework with the tinygrad-style lazy Tensor API (Tensor, Jit, SGD, realize)."""
  def __init__(self, name: str, Tensor: Any, Jit: Any, SGD: Any, sync: Callable[[], None], counters: Any, info: str,
               train: Callable[[], Any]):
    self.name, self.Tensor, self.Jit, self.SGD, self.sync, self.counters, self.info = name, Tensor, Jit, SGD, sync, counters, info
    self.train = train   # a context manager factory that turns training mode on (the optimizer needs it in tinygrad)
    self.park: Callable[[], None] = lambda: None   # puts the framework's idle threads to sleep before a peer is timed
    self.renderer: Any = None                      # ours: the device's renderer (its SIMD facts)
    (self.Tensor([1.0, 2.0]) + 1).realize()   # open the device and load the stack now, so no row's first call pays for it
    self.sync()

  def t(self, a: np.ndarray) -> Any: return self.Tensor(a).realize()

  def _single(self, build: Callable[[], Any], count: int = 1) -> Case:
    out: list[Any] = [None]
    def run() -> None:
      for _ in range(count):
        out[0] = build().realize()
        self.sync()   # each op waits for its result: the latency of an eager op, not the rate of queueing them
    return Case(run, lambda: out[0].numpy(), count=count)

  def matmul(self, d: dict[str, Any]) -> Case:
    a, b = self.t(d["a"]), self.t(d["b"])
    return self._single(lambda: a @ b)
  cpu_host = False   # ours on the CPU device: the bf16 row needs the host's bf16 dot product, in the code rendered for it
  def matmul_bf16(self, d: dict[str, Any]) -> Case:
    if self.cpu_host and not (host_bf16_dot() and "avx512_bf16" in getattr(self.renderer, "flags", ())): raise NotApplicable("no avx512_bf16")
    a, b = self.t(d["a"]).cast("bfloat16").realize(), self.t(d["b"]).cast("bfloat16").realize()
    return self._single(lambda: a.matmul(b, dtype="float32"))
  def conv2d(self, d: dict[str, Any]) -> Case:
    x, w = self.t(d["x"]), self.t(d["w"])
    return self._single(lambda: x.conv2d(w, **conv_args(d)))
  def permute(self, d: dict[str, Any]) -> Case:
    x = self.t(d["x"])
    return self._single(lambda: x.permute(*d["order"]).contiguous())
  def mul_add(self, d: dict[str, Any]) -> Case:
    a, b = self.t(d["a"]), self.t(d["b"])
    return self._single(lambda: a * b + 1)
  def sum(self, d: dict[str, Any]) -> Case:
    a = self.t(d["a"])
    return self._single(lambda: a.sum())
  def softmax(self, d: dict[str, Any]) -> Case:
    x = self.t(d["x"])
    return self._single(lambda: x.softmax(-1))
  def layernorm(self, d: dict[str, Any]) -> Case:
    x, w, b = self.t(d["x"]), self.t(d["w"]), self.t(d["b"])
    return self._single(lambda: x.layernorm(-1) * w + b)
  def tiny_op(self, d: dict[str, Any]) -> Case:
    a = self.t(d["a"])
    return self._single(lambda: a + 1, count=d["ops"])

  def mlp(self, d: dict[str, Any]) -> Case:
    T = self.Tensor
    params = [T(q.copy()).realize() for q in d["params"]]   # the optimizer makes them parameters (tinygrad has no requires_grad)
    opt = self.SGD(params, lr=d["lr"])
    x, y = self.t(d["x"]), self.t(d["y"])
    w1, b1, w2, b2, w3, b3 = params
    @self.Jit
    def step(x: Any, y: Any) -> Any:
      with self.train():
        opt.zero_grad()
        logits = ((x @ w1 + b1).relu() @ w2 + b2).relu() @ w3 + b3
        loss = logits.sparse_categorical_crossentropy(y).backward()
        opt.step()
      return loss.realize()
    def run() -> None:
      step(x, y)
      self.sync()
    return Case(run, lambda: [p.numpy() - q for p, q in zip(params, d["params"])], calls_before_check=d["steps"])

  # the real-model rows: built from core's nn layers, so ours alone among the Tensor-API frameworks
  def _ours_only(self, what: str) -> None:
    if self.name != "ours": raise NotApplicable(f"{what} is built from core's nn layers")
  def _jit_case(self, f: Any, args: tuple[Any, ...], result: Callable[[Any], Any]) -> Case:
    """Repeated calls of a Jit-captured model (checked after its capture and first replay, on the replay's result)."""
    out: list[Any] = [None]
    def run() -> None:
      out[0] = f(*args)
      self.sync()
    return Case(run, lambda: result(out[0]), calls_before_check=3)
  def resnet18(self, d: dict[str, Any]) -> Case:
    self._ours_only("ResNet-18")
    model = models.OursResNet(d, self.Tensor)
    return self._jit_case(self.Jit(lambda x: model(x).realize()), (self.t(d["x"]),), lambda o: o.numpy())
  def resnet18_train(self, d: dict[str, Any]) -> Case:
    self._ours_only("ResNet-18")
    model = models.OursResNet(d, self.Tensor)
    params = model.params()
    opt = self.SGD(list(params.values()), lr=d["lr"])
    @self.Jit
    def step(x: Any, y: Any) -> Any:
      with self.train():
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y).backward()
        opt.step()
      return loss.realize()
    def run() -> None:
      step(x, y)
      self.sync()
    x, y = self.t(d["x"]), self.t(d["y"])
    names = models.trained_names(d)
    return Case(run, lambda: [params[k].numpy() - d["params"][k] for k in names], calls_before_check=d["steps"])
  def gpt2_block(self, d: dict[str, Any]) -> Case:
    self._ours_only("the transformer block")
    model = models.OursBlock(d, self.Tensor)
    x, g = self.Tensor(d["x"].copy(), requires_grad=True).realize(), self.t(d["g"])
    @self.Jit
    def f(x: Any) -> list[Any]:
      out = model(x)
      grads = (out * g).sum().gradient(*model.params(), x)
      out.realize(*grads)
      return [out, *grads]
    return self._jit_case(f, (x,), lambda o: [t.numpy() for t in o])
  def sdpa(self, d: dict[str, Any]) -> Case:
    q, k, v = self.t(d["q"]), self.t(d["k"]), self.t(d["v"])
    return self._single(lambda: q.scaled_dot_product_attention(k, v, is_causal=True))

  def jit_replay(self, d: dict[str, Any]) -> Case:
    k = d["kernels"]
    @self.Jit
    def f(x: Any) -> Any:
      for _ in range(k): x = (x * 0.5 + 1.0).contiguous()   # contiguous: one kernel per step, never fused together
      return x.realize()
    xs = [self.t(a) for a in d["inputs"]]   # a new input each call: the check sees a replay that read this call's data
    calls = [0]
    out: list[Any] = [None]
    def run() -> None:
      i = calls[0]
      calls[0] += 1
      if i == 0: self.counters.reset()
      for _ in range(1 if i < 3 else d["replays"]): out[0] = f(xs[min(i, len(xs) - 1)])
      self.sync()
      # the eager first call runs every kernel once: that count (not the step count k) is the per-kernel divisor
      if i == 0: case.count = max(self.counters.kernel_count, 1) * d["replays"]
    case = Case(run, lambda: out[0].numpy(), count=k * d["replays"], calls_before_check=3)
    return case

  def first_compile(self, d: dict[str, Any]) -> Case:
    """Each call: a new small fused kernel (a shape not seen before) from realize() to its result. Ours compiles with a
    fresh, empty CORE_CACHE_DIR so the disk cache is cold."""
    # each call differs in shape and in a constant, so neither a disk cache nor an in-memory one can serve it
    inputs = [(self.t(a), self.t(b), self.t(c), s) for a, b, c, s in d["inputs"]]
    calls = [0]
    out: list[Any] = [None]
    cache = tempfile.mkdtemp(prefix="bench-cold-cache-")
    def run() -> None:
      a, b, c, s = inputs[calls[0] % len(inputs)]
      calls[0] += 1
      old = os.environ.get("CORE_CACHE_DIR")
      os.environ["CORE_CACHE_DIR"] = cache
      try:
        out[0] = ((a * b + c).relu() * s - 1).realize()
        self.sync()
      finally:
        if old is None: os.environ.pop("CORE_CACHE_DIR", None)
        else: os.environ["CORE_CACHE_DIR"] = old
    return Case(run, lambda: out[0].numpy(), fresh=True, max_calls=len(inputs))   # checked after the first call, on inputs[0]

def load_ours() -> TensorLib:
  from core import Tensor, Jit, Device, GlobalCounters
  from core.tensor.nn.optim import SGD
  dev = Device.DEFAULT
  d = Device[dev]
  r = d.renderer
  extra = [f"{k} {getattr(r, k)}" for k in ("threads", "simd_width") if hasattr(r, k)]
  info = f"DEV={os.getenv('DEV') or '(unset)'} -> device {dev}, target {getattr(d, 'target', '?')}, renderer {type(r).__name__}" + \
         (f" ({', '.join(extra)})" if extra else "") + f", compiler {type(d.compiler).__name__}"
  lib = TensorLib("ours", Tensor, Jit, SGD, lambda: d.synchronize(), GlobalCounters, info, Tensor.train)
  lib.renderer, lib.cpu_host = r, dev.split(":")[0] == "CPU"
  if lib.cpu_host:
    # our pool's threads poll for work a while after each launch (CPU_SPIN_US): not while a peer's threads need the cores
    from plugin_cpu.native import park_pool
    lib.park = park_pool
  return lib

def load_tinygrad() -> TensorLib:
  # tinygrad reads DEV too: hide ours while it loads and picks its default device, then put it back
  saved = os.environ.pop("DEV", None)
  # tinygrad's CPU device compiles with clang (or $CC, read once and cached): BENCH_TINYGRAD_CC names a clang for it alone,
  # set only while it loads and compiles its first kernel, so our C compiler (which also reads $CC) never sees it
  # (PARALLEL=0 keeps its compiles in this process, where that cached value lives, instead of in worker processes)
  saved_cc, saved_par, cc = os.environ.get("CC"), os.environ.get("PARALLEL"), os.getenv("BENCH_TINYGRAD_CC")
  if cc: os.environ["CC"], os.environ["PARALLEL"] = cc, "0"
  try:
    from tinygrad import Tensor, TinyJit, Device
    from tinygrad.nn.optim import SGD
    from tinygrad.helpers import GlobalCounters, getenv, Context
    getenv("CC", "clang")   # read (and cached) now, while BENCH_TINYGRAD_CC is in CC
    dev = Device.DEFAULT
    d = Device[dev]
    from importlib.metadata import version
    info = f"tinygrad {version('tinygrad')} on {dev}, renderer {type(d.renderer).__name__}, compiler {type(d.compiler).__name__}"
    lib = TensorLib("tinygrad", Tensor, TinyJit, SGD, d.synchronize, GlobalCounters, info, lambda: Context(TRAINING=1))
  finally:
    for k, v in (("DEV", saved), ("CC", saved_cc), ("PARALLEL", saved_par)):
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v
  return lib

# *** numpy ***

class NumpyLib:
  name = "numpy"
  def __init__(self) -> None:
    cfg = ""
    try:
      import threadpoolctl  # type: ignore  # optional: names the BLAS numpy's matmul runs on
      cfg = ", " + ", ".join(f"{p['internal_api']} {p['num_threads']} threads" for p in threadpoolctl.threadpool_info())
    except Exception: pass
    self.info = f"numpy {np.__version__}{cfg}"
  def _single(self, fn: Callable[[], Any], count: int = 1) -> Case:
    out: list[Any] = [None]
    def run() -> None:
      for _ in range(count): out[0] = fn()
    return Case(run, lambda: np.asarray(out[0]), count=count)
  def matmul(self, d: dict[str, Any]) -> Case: return self._single(lambda: d["a"] @ d["b"])
  def matmul_bf16(self, d: dict[str, Any]) -> Case: raise NotApplicable("numpy has no bfloat16")
  def conv2d(self, d: dict[str, Any]) -> Case: raise NotApplicable("numpy has no conv2d")
  def permute(self, d: dict[str, Any]) -> Case:
    o = np.empty(d["x"].transpose(d["order"]).shape, d["x"].dtype)
    def f() -> Any:
      np.copyto(o, d["x"].transpose(d["order"]))   # into a preallocated array: the copy alone, no allocation
      return o
    return self._single(f)
  def mul_add(self, d: dict[str, Any]) -> Case:
    o = np.empty_like(d["a"])
    def f() -> Any:
      np.multiply(d["a"], d["b"], out=o)   # out=: numpy's best is two passes without temporaries
      return np.add(o, 1, out=o)
    return self._single(f)
  def sum(self, d: dict[str, Any]) -> Case: return self._single(lambda: d["a"].sum())
  def softmax(self, d: dict[str, Any]) -> Case:
    x, o = d["x"], np.empty_like(d["x"])
    def f() -> Any:   # numpy's best: in place into one preallocated array
      np.subtract(x, x.max(-1, keepdims=True), out=o)
      np.exp(o, out=o)
      return np.divide(o, o.sum(-1, keepdims=True), out=o)
    return self._single(f)
  def layernorm(self, d: dict[str, Any]) -> Case:
    x, w, b, o = d["x"], d["w"], d["b"], np.empty_like(d["x"])
    def f() -> Any:
      np.subtract(x, x.mean(-1, keepdims=True), out=o)
      np.multiply(o, 1 / np.sqrt(np.square(o).mean(-1, keepdims=True) + np.float32(1e-5)), out=o)
      np.multiply(o, w, out=o)
      return np.add(o, b, out=o)
    return self._single(f)
  def tiny_op(self, d: dict[str, Any]) -> Case: return self._single(lambda: d["a"] + 1, count=d["ops"])
  def mlp(self, d: dict[str, Any]) -> Case: raise NotApplicable("numpy has no autograd")
  def resnet18(self, d: dict[str, Any]) -> Case: raise NotApplicable("numpy has no conv2d")
  resnet18_train = gpt2_block = mlp
  def sdpa(self, d: dict[str, Any]) -> Case: raise NotApplicable("numpy has no attention (the reference is numpy's)")
  def jit_replay(self, d: dict[str, Any]) -> Case: raise NotApplicable("numpy has no jit")
  def first_compile(self, d: dict[str, Any]) -> Case: raise NotApplicable("numpy compiles nothing")

# *** torch ***

def onednn_isa() -> str | None:
  """The instruction set torch's oneDNN runs (its verbose "isa:" line, printed when it makes its first primitive), in a new process
  with this one's environment: the verbose switch is read once, when oneDNN first runs. None where that fails."""
  code = "import torch; torch.zeros(1, 8, 8, 8).to_mkldnn()"   # a layout reorder: a oneDNN primitive even at this size
  try: r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ONEDNN_VERBOSE": "1"}, capture_output=True, text=True, timeout=300)
  except (OSError, subprocess.SubprocessError): return None
  return m.group(1).strip() if (m := re.search(r"onednn_verbose,.*,isa:(.*)", r.stdout)) else None

class TorchLib:
  name = "torch"
  def __init__(self) -> None:
    import torch
    self.torch = torch
    # the vector code its own kernels (ATen) and its convolutions (oneDNN) run: ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA cap them
    self.capability, self.onednn_isa = torch.backends.cpu.get_cpu_capability(), onednn_isa()
    self.info = f"torch {torch.__version__}, {torch.get_num_threads()} threads, ATen {self.capability}, oneDNN isa {self.onednn_isa or '?'}"
  def t(self, a: np.ndarray) -> Any: return self.torch.from_numpy(a.copy())
  def _single(self, fn: Callable[[], Any], count: int = 1) -> Case:
    out: list[Any] = [None]
    def run() -> None:
      with self.torch.no_grad():
        for _ in range(count): out[0] = fn()
    return Case(run, lambda: out[0].numpy(), count=count)
  def matmul(self, d: dict[str, Any]) -> Case:
    a, b = self.t(d["a"]), self.t(d["b"])
    return self._single(lambda: a @ b)
  def matmul_bf16(self, d: dict[str, Any]) -> Case:
    # torch's bfloat16 matmul returns bfloat16 (accumulated in float32 inside): widened for the check, which allows its rounding
    a, b = self.t(d["a"]).bfloat16(), self.t(d["b"]).bfloat16()
    out: list[Any] = [None]
    def run() -> None:
      with self.torch.no_grad(): out[0] = a @ b
    return Case(run, lambda: out[0].float().numpy())
  def conv2d(self, d: dict[str, Any]) -> Case:
    x, w = self.t(d["x"]), self.t(d["w"])
    return self._single(lambda: self.torch.nn.functional.conv2d(x, w, **conv_args(d)))
  def permute(self, d: dict[str, Any]) -> Case:
    x = self.t(d["x"])
    return self._single(lambda: x.permute(*d["order"]).contiguous())
  def mul_add(self, d: dict[str, Any]) -> Case:
    a, b = self.t(d["a"]), self.t(d["b"])
    one, o = self.torch.ones(()), self.torch.empty_like(a)
    return self._single(lambda: self.torch.addcmul(one, a, b, out=o))   # torch's fused a*b+1: one pass, no temporary
  def sum(self, d: dict[str, Any]) -> Case:
    a = self.t(d["a"])
    return self._single(lambda: a.sum())
  def softmax(self, d: dict[str, Any]) -> Case:
    x = self.t(d["x"])
    return self._single(lambda: self.torch.softmax(x, -1))
  def layernorm(self, d: dict[str, Any]) -> Case:
    x, w, b = self.t(d["x"]), self.t(d["w"]), self.t(d["b"])
    return self._single(lambda: self.torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5))
  def tiny_op(self, d: dict[str, Any]) -> Case:
    a = self.t(d["a"])
    return self._single(lambda: a + 1, count=d["ops"])
  def mlp(self, d: dict[str, Any]) -> Case:
    torch, F = self.torch, self.torch.nn.functional
    params = [torch.tensor(q, requires_grad=True) for q in d["params"]]
    opt = torch.optim.SGD(params, lr=d["lr"])
    x, y = self.t(d["x"]), torch.from_numpy(d["y"].astype(np.int64))
    w1, b1, w2, b2, w3, b3 = params
    def run() -> None:
      opt.zero_grad()
      loss = F.cross_entropy(F.relu(F.relu(x @ w1 + b1) @ w2 + b2) @ w3 + b3, y)
      loss.backward()
      opt.step()
    return Case(run, lambda: [p.detach().numpy() - q for p, q in zip(params, d["params"])], calls_before_check=d["steps"])
  def resnet18(self, d: dict[str, Any]) -> Case:
    torch = self.torch
    p, x = models.torch_params(torch, d, torch.float32), self.t(d["x"])
    return self._single(lambda: models.torch_resnet(torch, d, p, x, False))
  def resnet18_train(self, d: dict[str, Any]) -> Case:
    torch = self.torch
    p, names = models.torch_params(torch, d, torch.float32), models.trained_names(d)
    opt = torch.optim.SGD([p[k] for k in names], lr=d["lr"])
    x, y = self.t(d["x"]), torch.from_numpy(d["y"].astype(np.int64))
    def run() -> None:
      opt.zero_grad()
      torch.nn.functional.cross_entropy(models.torch_resnet(torch, d, p, x, True), y).backward()
      opt.step()
    return Case(run, lambda: [p[k].detach().numpy() - d["params"][k] for k in names], calls_before_check=d["steps"])
  def gpt2_block(self, d: dict[str, Any]) -> Case:
    torch = self.torch
    p = {k: torch.tensor(v, requires_grad=True) for k, v in d["params"].items()}
    x, g = torch.tensor(d["x"], requires_grad=True), self.t(d["g"])
    out: list[Any] = [None]
    def run() -> None:
      for t in (*p.values(), x): t.grad = None
      out[0] = models.torch_block(torch, d, p, x)
      (out[0] * g).sum().backward()
    return Case(run, lambda: [out[0].detach().numpy(), *[p[k].grad.numpy() for k in models.BLOCK_PARAMS], x.grad.numpy()])
  def sdpa(self, d: dict[str, Any]) -> Case:
    q, k, v = self.t(d["q"]), self.t(d["k"]), self.t(d["v"])
    return self._single(lambda: self.torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
  def jit_replay(self, d: dict[str, Any]) -> Case: raise NotApplicable("torch: no comparable replay (the issue measures none)")
  def first_compile(self, d: dict[str, Any]) -> Case: raise NotApplicable("torch eager compiles nothing")

LOADERS: dict[str, Callable[[], Any]] = {"ours": load_ours, "numpy": NumpyLib, "torch": TorchLib, "tinygrad": load_tinygrad}
