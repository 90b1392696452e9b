"""Trains a small CNN on scikit-learn's 8x8 handwritten digits (shipped with sklearn, no download) and reports test accuracy;
with matplotlib installed it also writes the loss and accuracy curves to digits_curves.png."""
from __future__ import annotations
import os, sys, time
import numpy as np
from core import Tensor, Jit, GlobalCounters, Device
from core.tensor import nn
from core.tensor.nn.optim import Adam
from core.tensor.nn.state import get_parameters

SEED, BATCH, STEPS, LR = 1337, 64, 300, 3e-3

class DigitsCNN:
  """conv(1->8) relu pool -> conv(8->16) relu pool -> linear(64->10): about 2k parameters."""
  def __init__(self):
    self.c1, self.c2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
    self.bn1, self.bn2 = nn.BatchNorm2d(8), nn.BatchNorm2d(16)
    self.fc = nn.Linear(16 * 2 * 2, 10)
  def __call__(self, x: Tensor) -> Tensor:
    # contiguous() marks activations worth a buffer: without them the backward pass recomputes each conv inside
    # every kernel that needs its value (the scheduler fuses greedily), which is many times slower
    x = self.bn1(self.c1(x).contiguous()).relu().contiguous().max_pool2d(2)   # (N, 8, 4, 4)
    x = self.bn2(self.c2(x).contiguous()).relu().contiguous().max_pool2d(2)   # (N, 16, 2, 2)
    return self.fc(x.flatten(1)).contiguous()

def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  from sklearn.datasets import load_digits
  d = load_digits()
  x, y = (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8), d.target.astype(np.int32)
  order = np.random.default_rng(SEED).permutation(len(x))
  n_test = len(x) // 5
  test, train = order[:n_test], order[n_test:]
  return x[train], y[train], x[test], y[test]

def progress(step: int, total: int, loss: float, acc: float, t0: float) -> None:
  done = step * 30 // total
  sys.stdout.write(f"\r[{'#' * done}{'.' * (30 - done)}] {step:4d}/{total} loss {loss:6.3f} batch acc {acc * 100:5.1f}% "
                   f"{time.perf_counter() - t0:5.1f}s")
  sys.stdout.flush()

def device_name() -> str:
  """The default device with its renderer, as DEV would name it (CPU:LLVM)."""
  dev = Device[Device.DEFAULT]
  return f"{Device.DEFAULT}:{dev.renderer.suffix}" if getattr(dev.renderer, "suffix", "") else Device.DEFAULT

def save_curves(steps: list[int], losses: list[float], accs: list[float], test_acc: float, path: str) -> str | None:
  """Writes the training curves as a PNG when matplotlib is installed; returns the path, or None without matplotlib."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError: return None
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
  a1.plot(steps, losses)
  a1.set(xlabel="step", ylabel="training loss", title="loss")
  a2.plot(steps, [a * 100 for a in accs], label="training batch")
  a2.axhline(test_acc * 100, color="tab:green", linestyle="--", label=f"test: {test_acc * 100:.1f}%")
  a2.set(xlabel="step", ylabel="accuracy (%)", title="accuracy", ylim=(0, 100))
  a2.legend(loc="lower right")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path

def main() -> float:
  Tensor.manual_seed(SEED)
  x_train, y_train, x_test, y_test = load_data()
  print(f"training a small CNN on {len(x_train)} handwritten digits on {device_name()} ({STEPS} steps of {BATCH}); "
        f"compiling the kernels of the first steps...", flush=True)
  model = DigitsCNN()
  opt = Adam(get_parameters(model), lr=LR)

  @Jit
  def train_step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    with Tensor.train():
      opt.zero_grad()
      logits = model(x)
      loss = logits.sparse_categorical_crossentropy(y)
      loss.backward()
      # computed before the step so they belong to the weights the gradients belong to
      acc = (logits.argmax(axis=1) == y).mean()
      Tensor.realize(loss, acc)
      opt.step()
    return loss, acc

  @Jit
  def predict(x: Tensor) -> Tensor: return model(x).argmax(axis=1).realize()

  rng = np.random.default_rng(SEED)
  GlobalCounters.reset()
  t0 = time.perf_counter()
  steps: list[int] = []
  losses: list[float] = []
  accs: list[float] = []
  for step in range(1, STEPS + 1):
    idx = rng.integers(0, len(x_train), BATCH)
    loss, acc = train_step(Tensor(x_train[idx]), Tensor(y_train[idx]))
    if step == 1: print(f"first step done in {time.perf_counter() - t0:.1f}s (compiling); the rest replay the captured kernels", flush=True)
    if step % 10 == 0 or step == STEPS:
      steps.append(step)
      losses.append(float(loss.item()))
      accs.append(float(acc.item()))
      progress(step, STEPS, losses[-1], accs[-1], t0)
  print()
  train_time = time.perf_counter() - t0

  # evaluate in fixed-size batches so the Jit replays one shape; the ragged tail is padded and ignored
  preds = []
  for i in range(0, len(x_test), BATCH):
    xb = x_test[i:i + BATCH]
    padded = np.concatenate([xb, np.zeros((BATCH - len(xb), *xb.shape[1:]), np.float32)]) if len(xb) < BATCH else xb
    preds.append(predict(Tensor(padded)).numpy()[:len(xb)])
  test_acc = float((np.concatenate(preds) == y_test).mean())
  print(f"device {device_name()}  test accuracy {test_acc * 100:.2f}% ({len(y_test)} images)  train time {train_time:.1f}s "
        f"({STEPS} steps of {BATCH})  kernels run {GlobalCounters.kernel_count}")
  if (png := save_curves(steps, losses, accs, test_acc, os.environ.get("DEMO_PLOT", "digits_curves.png"))) is not None:
    print(f"loss and accuracy curves written to {png}")
  return test_acc

if __name__ == "__main__":
  accuracy = main()
  sys.exit(0 if accuracy >= 0.95 else 1)
