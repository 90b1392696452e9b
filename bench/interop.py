"""What handing a tensor to numpy or DLPack costs, against torch doing the same (when installed) and numpy's own copy.
Run: DEV=CPU python bench/interop.py   (64 MiB of float32; the min of 20 runs, in milliseconds)."""
from __future__ import annotations
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # core from a checkout
import numpy as np

def best_ms(fn, rounds: int = 20) -> float:
  t = float("inf")
  for _ in range(rounds):
    st = time.perf_counter()
    fn()
    t = min(t, time.perf_counter() - st)
  return t * 1e3

def main() -> None:
  from core import Tensor
  n = 16 * 1024 * 1024
  t = (Tensor.ones(n) * 2).realize()
  rows = [("core .numpy() (64 MiB)", best_ms(lambda: t.numpy())), ("core np.from_dlpack", best_ms(lambda: np.from_dlpack(t))),
          ("numpy copy of 64 MiB", best_ms(lambda: t.numpy().copy()))]
  try:
    import torch
    tt = torch.ones(n) * 2
    rows += [("torch .numpy()", best_ms(lambda: tt.numpy())), ("torch.from_dlpack(core)", best_ms(lambda: torch.from_dlpack(t)))]
  except ImportError: rows.append(("torch", float("nan")))
  print(f"device {t.device}")
  for name, ms in rows: print(f"{name:28s} {ms:10.4f} ms")
  if (tr := dict(rows).get("torch .numpy()")) and tr == tr: print(f"ratio core/torch .numpy(): {rows[0][1] / tr:.2f}x")

if __name__ == "__main__": main()
