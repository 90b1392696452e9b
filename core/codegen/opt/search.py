"""BEAM=n: search over optimization sequences by timing candidates on the device; the best sequence is cached on disk."""
from __future__ import annotations
import hashlib, json, math, os, time
from typing import TYPE_CHECKING, Any
from core.ir.dtype import PtrDType, dtypes
from core.ir.ops import UOp, Ops, AxisType
from core.helpers import cache_dir, getenv, DEBUG
from core.codegen.opt.kernel import Kernel, Opt, OptOps, KernelOptError, range_size
if TYPE_CHECKING: from core.device.renderer import Renderer

def _actions(k: Kernel) -> list[Opt]:
  """Every single-step Opt worth trying on k (invalid ones are filtered by Kernel.apply)."""
  rnd = k.renderer
  out: list[Opt] = []
  threads = rnd.threads
  out += [Opt(OptOps.TC, i) for i in range(len(rnd.tensor_cores))]
  for i, r in enumerate(k.axes):
    kind, n = r.arg[1], range_size(r)
    if n is None or n < 2: continue
    if kind in (AxisType.LOOP, AxisType.GLOBAL): out += [Opt(OptOps.UPCAST, i, a) for a in (2, 3, 4, 8, 16, 32) if a <= n and n % a == 0]
    if kind is AxisType.REDUCE: out += [Opt(OptOps.UNROLL, i, a) for a in (2, 4, 8, 16, 32) if a <= n and n % a == 0]
    if kind is AxisType.LOOP and threads: out += [Opt(OptOps.THREAD, i, a) for a in {threads, 2 * threads, 4 * threads, 8 * threads, n}
                                                 if a <= n and n % a == 0]
    if kind is AxisType.LOOP: out += [Opt(OptOps.SWAP, i, j) for j, o in enumerate(k.axes) if j > i and o.arg[1] is AxisType.LOOP]
    if kind is AxisType.LOOP: out += [Opt(OptOps.PADTO, i, a) for a in (4, 8, 16, 32) if n % a and a < n]
    if kind is AxisType.LOOP: out += [Opt(OptOps.TILE, i, a) for a in (4, 8, 16, 32) if a < n and n % a == 0]
    # packed panels live in each thread's stack: only for renderers whose threads run whole loops (CPUs)
    if kind is AxisType.LOOP and not rnd.has_local: out.append(Opt(OptOps.PACK, i))
    if kind in (AxisType.LOOP, AxisType.GLOBAL) and rnd.has_local:
      out += [Opt(OptOps.LOCAL, i, a) for a in (2, 4, 8, 16, 32) if a <= n and n % a == 0]
    if kind is AxisType.REDUCE and rnd.has_shared:
      out += [Opt(OptOps.GROUP, i, a) for a in (4, 16, 64, 256) if a <= n and n % a == 0]
  return out

class Timer:
  """Compiles and runs kernels of one AST's buffers on the renderer's device, with random inputs; checks outputs against the
  first (unoptimized) kernel's."""
  def __init__(self, ast: UOp, renderer: Renderer):
    import numpy as np
    from core.device.registry import Device
    from core.device.buffer import Buffer
    self.dev = Device[renderer.device]
    self.renderer = renderer
    params = sorted({u for u in ast.toposort() if u.op is Ops.PARAM}, key=lambda p: p.arg)
    self.vars = {v.arg: int(v.arg[2]) for v in ast.toposort() if v.op is Ops.DEFINE_VAR}
    rng = np.random.default_rng(0)
    self.bufs, self.init = [], []
    for p in params:
      assert isinstance(p.dtype, PtrDType)
      dt = p.dtype.base
      b = Buffer(renderer.device, max(1, p.dtype.size), dt).allocate()
      npdt = np.dtype(dt.fmt) if dt.fmt else np.uint8
      if dtypes.is_float(dt): arr = rng.standard_normal(b.size).astype(npdt)
      elif dt is dtypes.bool: arr = rng.integers(0, 2, b.size).astype(npdt)
      else: arr = rng.integers(0, 8, b.size).astype(npdt)
      raw = arr.tobytes()[:b.nbytes].ljust(b.nbytes, b"\0")
      self.init.append(raw)
      b.copyin(memoryview(raw))
      self.bufs.append(b)
    self.ref: bytes | None = None

  def __call__(self, k: Kernel, reps: int = 3) -> float:
    """Best of `reps` runs in seconds; inf when it fails to compile or run or gives other numbers than the reference."""
    import numpy as np
    from core.codegen.program import get_program, compile_program, program_binary
    try:
      p = compile_program(get_program(k.ast, self.renderer, optimize=False), self.dev.compiler)
      spec = p.arg
      prg = self.dev.runtime(spec.name, program_binary(p))
    except Exception as e:  # noqa: BLE001 - a candidate that does not build is skipped, whatever the reason
      if DEBUG >= 3: print(f"BEAM: {list(k.applied)} failed: {type(e).__name__}: {str(e)[:200]}")
      return math.inf
    vals = tuple(self.vars[v.arg] for v in spec.vars)
    out = self.bufs[0]
    out.copyin(memoryview(self.init[0]))
    call = lambda: prg(*[b._buf for b in self.bufs], global_size=spec.global_size, local_size=spec.local_size, vals=vals, wait=True)
    t = call()
    got = bytearray(out.nbytes)
    out.copyout(memoryview(got))
    if self.ref is None: self.ref = bytes(got)
    else:
      dt = out.dtype
      if dtypes.is_float(dt) and dt.fmt:
        a, b = np.frombuffer(got, np.dtype(dt.fmt)), np.frombuffer(self.ref, np.dtype(dt.fmt))
        if not np.allclose(a, b, rtol=1e-3, atol=1e-3, equal_nan=True): return math.inf
      elif bytes(got) != self.ref: return math.inf
    ts = [t or 0.0] + [call() or 0.0 for _ in range(reps - 1)]
    return min(ts)

def _cache_path(ast: UOp, renderer: Renderer, amt: int) -> Any:
  key = "|".join([str(ast), type(renderer).__name__, str(renderer.device), str(renderer.arch), str(amt),
                  str(renderer.threads), str(renderer.simd_width)])
  return cache_dir() / "beam" / hashlib.sha256(key.encode()).hexdigest()

def beam_search(k: Kernel, amt: int, max_candidates: int | None = None) -> Kernel:
  """The best Kernel found by a beam of width `amt` over single-Opt steps, timed on the device; cached on disk per AST,
  renderer and machine. BEAM_MAX_CANDIDATES bounds the work; BEAM_CACHE=0 ignores the cache."""
  path = _cache_path(k.ast, k.renderer, amt)
  if getenv("BEAM_CACHE", 1) and path.exists():
    try:
      for o in json.loads(path.read_text())["opts"]: k = k.apply(Opt.from_json(o))
      return k
    except (ValueError, KeyError, KernelOptError, OSError): pass   # a stale or corrupt entry: search again
  timer = Timer(k.ast, k.renderer)
  best_t = timer(k)
  if math.isinf(best_t): return k   # the unoptimized kernel itself does not run here: nothing to compare with
  beam, best = [(best_t, k)], k
  budget = max_candidates if max_candidates is not None else getenv("BEAM_MAX_CANDIDATES", 400)
  seen = {k.ast}
  st = time.perf_counter()
  while budget > 0:
    cands: list[Kernel] = []
    for _, kk in beam:
      for a in _actions(kk):
        try: c = kk.apply(a)
        except KernelOptError: continue
        if c.ast in seen: continue
        seen.add(c.ast)
        cands.append(c)
    cands = cands[:budget]
    budget -= len(cands)
    ranked = sorted(((timer(c), i, c) for i, c in enumerate(cands)), key=lambda x: (x[0], x[1]))
    timed = [(t, c) for t, _, c in ranked if not math.isinf(t)]
    if not timed or timed[0][0] >= beam[0][0] * 0.98: break
    beam = timed[:amt]
    best = beam[0][1]
  if DEBUG >= 2: print(f"BEAM {k.ast.arg}: {list(best.applied)} in {time.perf_counter() - st:.1f}s, {best_t*1e6:.1f}us -> {beam[0][0]*1e6:.1f}us")
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"opts": [o.to_json() for o in best.applied], "kernel": k.ast.arg}))
    os.replace(tmp, path)
  except OSError: pass
  return best
