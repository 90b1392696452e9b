"""Tensors used from several Python threads at once: four threads doing same-shape ops, four doing mixed ops, one model trained
per thread (SGD and Adam), and a Jit per thread plus one Jit shared by all, each result checked against numpy or a
single-threaded run of the same work. Every device interface runs it (in a subprocess each, DEV set): the HCQ CPU, the direct
CPU and an HCQ MOCK device. Run this file as a script (`DEV=CPU python tests/stress/test_thread_safety.py 200`) to print the counts."""
from __future__ import annotations
import json, os, subprocess, sys, threading, traceback
from typing import Any, Callable
import numpy as np
import pytest

THREADS = 4

def _in_threads(fn: Callable[[int], int]) -> tuple[int, list[str]]:
  """Runs fn(thread index) on THREADS threads at once; (sum of the wrong results they counted, the exceptions they raised)."""
  wrong, errors = [0] * THREADS, []
  start = threading.Barrier(THREADS)
  def body(i: int) -> None:
    try:
      start.wait()
      wrong[i] = fn(i)
    except Exception:
      errors.append(traceback.format_exc(limit=-4))
  ts = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
  for t in ts: t.start()
  for t in ts: t.join()
  return sum(wrong), errors

def same_shape(n: int) -> Callable[[int], int]:
  from core import Tensor
  def run(tid: int) -> int:
    rng, bad = np.random.default_rng(tid), 0
    for _ in range(n):
      a, b = rng.standard_normal((16, 16), dtype=np.float32), rng.standard_normal((16, 16), dtype=np.float32)
      x, y = Tensor(a), Tensor(b)
      r1, r2 = (x * y + 1).numpy(), (x + y).sum(axis=1).numpy()
      bad += int(not np.allclose(r1, a * b + 1, atol=1e-5)) + int(not np.allclose(r2, (a + b).sum(axis=1), atol=1e-4))
    return bad
  return run

def mixed(n: int) -> Callable[[int], int]:
  from core import Tensor
  def run(tid: int) -> int:
    rng, bad = np.random.default_rng(100 + tid), 0
    for i in range(n):
      k = (tid * 7 + i) % 5
      m = 3 + (tid + i) % 6
      a = rng.standard_normal((m, 8), dtype=np.float32)
      if k == 0: got, want = (Tensor(a) @ Tensor(a.T)).numpy(), a @ a.T
      elif k == 1: got, want = Tensor(a).max(axis=0).numpy(), a.max(axis=0)
      elif k == 2: got, want = (Tensor(a).exp() * 0.5).relu().sum().numpy(), np.maximum(np.exp(a) * 0.5, 0).sum()
      elif k == 3:
        idx = rng.integers(0, m, 5)
        got, want = Tensor(a)[Tensor(idx.astype(np.int32))].numpy(), a[idx]
      else:
        b = rng.standard_normal((m, 8), dtype=np.float32)
        got, want = Tensor(a).cat(Tensor(b), dim=0).flip(1).numpy(), np.flip(np.concatenate([a, b]), 1)
      bad += int(not np.allclose(got, want, rtol=1e-4, atol=1e-4))
    return bad
  return run

def train(tid: int, steps: int) -> list[np.ndarray]:
  """A two-layer model trained on this thread's data: SGD with momentum on even threads, Adam on odd ones; the final weights."""
  from core import Tensor
  from core.tensor.nn import optim
  rng = np.random.default_rng(200 + tid)
  w1 = Tensor(rng.standard_normal((6, 12), dtype=np.float32) * 0.3, requires_grad=True)
  w2 = Tensor(rng.standard_normal((12, 1), dtype=np.float32) * 0.3, requires_grad=True)
  X = Tensor(rng.standard_normal((32, 6), dtype=np.float32))
  Y = Tensor(rng.standard_normal((32, 1), dtype=np.float32))
  opt = optim.SGD([w1, w2], lr=0.05, momentum=0.9) if tid % 2 == 0 else optim.Adam([w1, w2], lr=0.01)
  for _ in range(steps):
    opt.zero_grad()
    loss = ((X @ w1).relu() @ w2 - Y).square().mean()
    loss.backward()
    opt.step()
  return [w1.numpy(), w2.numpy()]

def models(steps: int) -> Callable[[int], int]:
  from core import Tensor
  # training mode is process-wide (core/engine/lock.py lists what is): set once before the threads start, not per thread
  Tensor.training = True
  # the reference: the same training of each thread's model, one after another on this thread
  ref = [train(tid, steps) for tid in range(THREADS)]
  def run(tid: int) -> int:
    got = train(tid, steps)
    return sum(int(not np.allclose(g, r, rtol=1e-4, atol=1e-5)) for g, r in zip(got, ref[tid]))
  return run

def jits(n: int) -> Callable[[int], int]:
  from core import Tensor, Jit
  def f(x: Tensor, y: Tensor) -> Tensor: return ((x @ y).relu().sum(axis=1) + 1).realize()
  shared, reading = Jit(f), threading.Lock()
  def run(tid: int) -> int:
    own, rng, bad = Jit(f), np.random.default_rng(300 + tid), 0
    for _ in range(n):
      a, b = rng.standard_normal((4, 8), dtype=np.float32), rng.standard_normal((8, 3), dtype=np.float32)
      want = np.maximum(a @ b, 0).sum(axis=1) + 1
      bad += int(not np.allclose(own(Tensor(a), Tensor(b)).numpy(), want, rtol=1e-4, atol=1e-4))
      # a Jit returns its own output buffers, which its next call rewrites (from any thread): a shared one is read before
      # another thread calls it again
      with reading: bad += int(not np.allclose(shared(Tensor(a), Tensor(b)).numpy(), want, rtol=1e-4, atol=1e-4))
    return bad
  return run

def main(n: int) -> dict[str, Any]:
  """{case: [wrong results, checks made, exceptions (their first lines)]} for each case, run on DEV's device."""
  out: dict[str, Any] = {}
  for name, make, checks in (("same_shape", same_shape, 2 * n), ("mixed", mixed, n), ("models", lambda k: models(max(k // 10, 3)), 2),
                             ("jit", lambda k: jits(max(k // 4, 4)), 2 * max(n // 4, 4))):
    wrong, errors = _in_threads(make(n))
    out[name] = [wrong, THREADS * checks, [e.strip().splitlines()[-1] for e in errors]]
    for e in errors: print(e, file=sys.stderr)
  return out

def _switch_often(fn: Callable[[int], Any]) -> list[Any]:
  """fn(thread index) on THREADS threads with the interpreter switching threads as often as it can (races show up)."""
  old, out = sys.getswitchinterval(), [None] * THREADS
  sys.setswitchinterval(1e-6)
  try:
    def body(i: int) -> None: out[i] = fn(i)
    ts = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for t in ts: t.start()
    for t in ts: t.join()
  finally: sys.setswitchinterval(old)
  return out

def test_buffer_numbers_are_unique_across_threads() -> None:
  # two threads that got one number would share one BUFFER node, and so one device buffer
  from core.ir.ops import UOp
  nums = [u.arg for lst in _switch_often(lambda i: [UOp.unique() for _ in range(20000)]) for u in lst]
  assert len(set(nums)) == len(nums) == THREADS * 20000

def test_hash_consing_gives_one_node_across_threads() -> None:
  # every thread builds the same nodes at once: each must get the one node the first builder stored
  from core.ir.dtype import dtypes
  from core.ir.ops import UOp, Ops
  base = 1 + 10 ** 9 + int(np.random.default_rng().integers(0, 10 ** 6)) * 10 ** 5   # nodes nobody else has built
  built = _switch_often(lambda i: [UOp(Ops.CONST, dtypes.int64, (), base + k) for k in range(20000)])
  assert all(built[t][k] is built[0][k] for t in range(1, THREADS) for k in range(20000))

DEVICES = ["CPU", "DIRECT+CPU", "MOCK+AMD"]

@pytest.mark.parametrize("dev", DEVICES)
def test_threads_get_correct_results(dev: str) -> None:
  env = {**os.environ, "DEV": dev}
  env.pop("DEBUG", None)
  r = subprocess.run([sys.executable, __file__, "40"], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-4000:]
  counts = json.loads(r.stdout.strip().splitlines()[-1])
  for case, (wrong, checks, errors) in counts.items():
    assert errors == [] and wrong == 0, f"{dev} {case}: {wrong} wrong of {checks}, exceptions {errors}\n{r.stderr[-4000:]}"

if __name__ == "__main__":
  print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)))
