"""The real-model rows of bench/suite.py (issue 23.6): ResNet-18 inference and an SGD training step, one GPT-2-style
transformer block forward and backward, and scaled_dot_product_attention alone. Weights are random numpy arrays shared by
every framework: ours builds the models from core's nn layers, torch from torch.nn.functional, and the reference runs the
torch form in float64 (numpy, where torch is missing, for the forward-only rows; the training rows are then unchecked)."""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Any
import numpy as np

F32 = np.float32

# *** ResNet-18 (torchvision's layout: a 7x7/2 stem, a 3x3/2 max pool, four stages of two basic blocks, mean pool, fc) ***

@dataclass(frozen=True)
class ConvSpec:
  name: str
  cin: int
  cout: int
  k: int
  stride: int
  @property
  def pad(self) -> int: return self.k // 2

@dataclass(frozen=True)
class BlockSpec:
  """A basic block: conv-bn-relu, conv-bn, plus the input (through a 1x1 conv and bn when the shape changes), relu."""
  conv1: ConvSpec
  conv2: ConvSpec
  down: ConvSpec | None

def resnet_layout(s: dict[str, Any]) -> tuple[ConvSpec, list[BlockSpec]]:
  w, blocks, cin = s["width"], [], s["width"]
  for i, n in enumerate(s.get("blocks", (2, 2, 2, 2))):
    cout = w << i
    for j in range(n):
      stride = 2 if i > 0 and j == 0 else 1
      down = ConvSpec(f"l{i}.{j}.down", cin, cout, 1, stride) if stride != 1 or cin != cout else None
      blocks.append(BlockSpec(ConvSpec(f"l{i}.{j}.c1", cin, cout, 3, stride), ConvSpec(f"l{i}.{j}.c2", cout, cout, 3, 1), down))
      cin = cout
  return ConvSpec("stem", 3, w, 7, 2), blocks

def _convs(s: dict[str, Any]) -> list[ConvSpec]:
  stem, blocks = resnet_layout(s)
  return [stem, *[c for b in blocks for c in (b.conv1, b.conv2, b.down) if c is not None]]

def resnet_data(s: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
  """Kaiming-normal conv weights, batchnorm parameters and running statistics near (1, 0), an fc layer, an input batch and labels."""
  p: dict[str, np.ndarray] = {}
  for c in _convs(s):
    p[c.name + ".w"] = (rng.standard_normal((c.cout, c.cin, c.k, c.k), dtype=F32) * F32(math.sqrt(2 / (c.cin * c.k * c.k))))
    p[c.name + ".g"] = (1 + 0.1 * rng.standard_normal(c.cout)).astype(F32)
    p[c.name + ".b"] = (0.1 * rng.standard_normal(c.cout)).astype(F32)
    p[c.name + ".rm"] = (0.1 * rng.standard_normal(c.cout)).astype(F32)
    p[c.name + ".rv"] = rng.uniform(0.5, 1.5, c.cout).astype(F32)
  feats = s["width"] << (len(s.get("blocks", (2, 2, 2, 2))) - 1)
  p["fc.w"] = (rng.standard_normal((s["classes"], feats), dtype=F32) / F32(math.sqrt(feats)))
  p["fc.b"] = np.zeros(s["classes"], F32)
  return {"size": s, "params": p, "x": rng.standard_normal((s["batch"], 3, s["hw"], s["hw"]), dtype=F32),
          "y": rng.integers(0, s["classes"], s["batch"]).astype(np.int32), "lr": 0.01, "steps": 3}

TRAINED = (".w", ".g", ".b")   # the parameters an SGD step changes (running statistics are buffers)

def trained_names(d: dict[str, Any]) -> list[str]: return [k for k in d["params"] if k.endswith(TRAINED)]

class OursResNet:
  """ResNet-18 from core's nn layers, holding the given weights."""
  def __init__(self, d: dict[str, Any], Tensor: Any):
    from core.tensor import nn
    s, p = d["size"], d["params"]
    self.stem, self.blocks = resnet_layout(s)
    self.conv: dict[str, Any] = {}
    self.bn: dict[str, Any] = {}
    for c in _convs(s):
      conv, bn = nn.Conv2d(c.cin, c.cout, c.k, c.stride, c.pad, bias=False), nn.BatchNorm2d(c.cout)
      conv.weight, bn.weight, bn.bias = (Tensor(p[c.name + k].copy()) for k in (".w", ".g", ".b"))
      bn.running_mean, bn.running_var = (Tensor(p[c.name + k].copy(), requires_grad=False) for k in (".rm", ".rv"))
      self.conv[c.name], self.bn[c.name] = conv, bn
    self.fc = nn.Linear(p["fc.w"].shape[1], p["fc.w"].shape[0])
    self.fc.weight, self.fc.bias = Tensor(p["fc.w"].copy()), Tensor(p["fc.b"].copy())
  def params(self) -> dict[str, Any]:
    """The trained parameters by the data's names."""
    out = {f"{n}{k}": getattr(layer, a) for n in self.conv for k, layer, a in ((".w", self.conv[n], "weight"), (".g", self.bn[n], "weight"),
                                                                                 (".b", self.bn[n], "bias"))}
    return {**out, "fc.w": self.fc.weight, "fc.b": self.fc.bias}
  def _cbn(self, c: ConvSpec, x: Any) -> Any: return self.bn[c.name](self.conv[c.name](x))
  def __call__(self, x: Any) -> Any:
    x = self._cbn(self.stem, x).relu().max_pool2d(kernel_size=3, stride=2, padding=1)
    for b in self.blocks:
      short = x if b.down is None else self._cbn(b.down, x)
      x = (self._cbn(b.conv2, self._cbn(b.conv1, x).relu()) + short).relu()
    return self.fc(x.mean((2, 3)))

def torch_resnet(torch: Any, d: dict[str, Any], p: dict[str, Any], x: Any, training: bool) -> Any:
  """ResNet-18 in torch.nn.functional over the parameter tensors `p` (any dtype)."""
  F = torch.nn.functional
  stem, blocks = resnet_layout(d["size"])
  def cbn(c: ConvSpec, x: Any) -> Any:
    x = F.conv2d(x, p[c.name + ".w"], stride=c.stride, padding=c.pad)
    return F.batch_norm(x, p[c.name + ".rm"], p[c.name + ".rv"], p[c.name + ".g"], p[c.name + ".b"], training, 0.1, 1e-5)
  x = F.max_pool2d(F.relu(cbn(stem, x)), 3, 2, 1)
  for b in blocks:
    short = x if b.down is None else cbn(b.down, x)
    x = F.relu(cbn(b.conv2, F.relu(cbn(b.conv1, x))) + short)
  return F.linear(x.mean((2, 3)), p["fc.w"], p["fc.b"])

def torch_params(torch: Any, d: dict[str, Any], dtype: Any) -> dict[str, Any]:
  """Copies of the data's parameters as torch tensors; the trained ones require gradients."""
  return {k: torch.tensor(v, dtype=dtype, requires_grad=k in trained_names(d)) if k.endswith(TRAINED) else torch.tensor(v, dtype=dtype)
          for k, v in d["params"].items()}

def torch_resnet_steps(torch: Any, d: dict[str, Any], dtype: Any) -> dict[str, Any]:
  """d['steps'] SGD steps on the same batch; returns the trained parameters' changes as numpy arrays."""
  p = torch_params(torch, d, dtype)
  opt = torch.optim.SGD([p[k] for k in trained_names(d)], lr=d["lr"])
  x, y = torch.tensor(d["x"], dtype=dtype), torch.from_numpy(d["y"].astype(np.int64))
  for _ in range(d["steps"]):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(torch_resnet(torch, d, p, x, True), y).backward()
    opt.step()
  return {k: p[k].detach().numpy() - d["params"][k] for k in trained_names(d)}

def numpy_resnet(d: dict[str, Any]) -> np.ndarray:
  """The inference forward in float64 numpy (the reference where torch is missing)."""
  from suite_libs import conv_reference
  p = {k: v.astype(np.float64) for k, v in d["params"].items()}
  stem, blocks = resnet_layout(d["size"])
  def cbn(c: ConvSpec, x: np.ndarray) -> np.ndarray:
    x = conv_reference(x, p[c.name + ".w"], c.stride, c.pad)
    sh = (1, -1, 1, 1)
    return (x - p[c.name + ".rm"].reshape(sh)) / np.sqrt(p[c.name + ".rv"].reshape(sh) + 1e-5) * p[c.name + ".g"].reshape(sh) + p[c.name + ".b"].reshape(sh)
  x = np.maximum(cbn(stem, d["x"].astype(np.float64)), 0)
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  x = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max((-2, -1))
  for b in blocks:
    short = x if b.down is None else cbn(b.down, x)
    x = np.maximum(cbn(b.conv2, np.maximum(cbn(b.conv1, x), 0)) + short, 0)
  return x.mean((2, 3)) @ p["fc.w"].T + p["fc.b"]

def _torch() -> Any:
  try:
    import torch
    return torch
  except ImportError: return None

def resnet_reference(d: dict[str, Any]) -> np.ndarray:
  if (torch := _torch()) is None: return numpy_resnet(d)
  with torch.no_grad():
    return torch_resnet(torch, d, torch_params(torch, d, torch.float64), torch.tensor(d["x"], dtype=torch.float64), False).numpy()

def resnet_train_reference(d: dict[str, Any]) -> list[np.ndarray] | None:
  if (torch := _torch()) is None: return None
  got = torch_resnet_steps(torch, d, torch.float64)
  return [got[k] for k in trained_names(d)]

# *** one GPT-2 block: x + attn(ln1(x)), then h + mlp(ln2(h)); causal attention, tanh-approximated gelu ***

BLOCK_PARAMS = ("ln1.w", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b", "ln2.w", "ln2.b", "fc.w", "fc.b", "fc2.w", "fc2.b")

def block_data(s: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
  """Weights in torch's (out, in) layout with GPT-2's 0.02 scale, layernorm parameters near (1, 0), an input and the
  output gradient the backward starts from (random, so every gradient is exercised)."""
  w = s["width"]
  shapes = {"qkv": (3 * w, w), "proj": (w, w), "fc": (4 * w, w), "fc2": (w, 4 * w)}
  p: dict[str, np.ndarray] = {}
  for n in ("ln1", "ln2"): p[n + ".w"], p[n + ".b"] = (1 + 0.1 * rng.standard_normal(w)).astype(F32), (0.1 * rng.standard_normal(w)).astype(F32)
  for n, sh in shapes.items(): p[n + ".w"], p[n + ".b"] = (0.02 * rng.standard_normal(sh)).astype(F32), (0.02 * rng.standard_normal(sh[0])).astype(F32)
  return {"size": s, "params": {k: p[k] for k in BLOCK_PARAMS}, "x": rng.standard_normal((s["batch"], s["seq"], w), dtype=F32),
          "g": rng.standard_normal((s["batch"], s["seq"], w), dtype=F32)}

class OursBlock:
  """The block from core's nn layers (LayerNorm, Linear) and Tensor.scaled_dot_product_attention."""
  def __init__(self, d: dict[str, Any], Tensor: Any):
    from core.tensor import nn
    s, p = d["size"], d["params"]
    w, self.heads = s["width"], s["heads"]
    self.ln1, self.ln2 = nn.LayerNorm(w), nn.LayerNorm(w)
    self.qkv, self.proj, self.fc, self.fc2 = nn.Linear(w, 3 * w), nn.Linear(w, w), nn.Linear(w, 4 * w), nn.Linear(4 * w, w)
    for n in BLOCK_PARAMS:
      layer, attr = getattr(self, n.split(".")[0]), {"w": "weight", "b": "bias"}[n.split(".")[1]]
      setattr(layer, attr, Tensor(p[n].copy(), requires_grad=True))
  def params(self) -> list[Any]: return [getattr(getattr(self, n.split(".")[0]), {"w": "weight", "b": "bias"}[n.split(".")[1]]) for n in BLOCK_PARAMS]
  def __call__(self, x: Any) -> Any:
    b, t, w = x.shape
    q, k, v = (z.reshape(b, t, self.heads, w // self.heads).transpose(1, 2) for z in self.qkv(self.ln1(x)).chunk(3, dim=-1))
    h = x + self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, w))
    return h + self.fc2(self.fc(self.ln2(h)).gelu())

def torch_block(torch: Any, d: dict[str, Any], p: dict[str, Any], x: Any) -> Any:
  F, heads = torch.nn.functional, d["size"]["heads"]
  b, t, w = x.shape
  q, k, v = (z.reshape(b, t, heads, w // heads).transpose(1, 2) for z in F.linear(F.layer_norm(x, (w,), p["ln1.w"], p["ln1.b"]),
                                                                                  p["qkv.w"], p["qkv.b"]).chunk(3, dim=-1))
  h = x + F.linear(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, w), p["proj.w"], p["proj.b"])
  return h + F.linear(F.gelu(F.linear(F.layer_norm(h, (w,), p["ln2.w"], p["ln2.b"]), p["fc.w"], p["fc.b"]), approximate="tanh"), p["fc2.w"], p["fc2.b"])

def torch_block_grads(torch: Any, d: dict[str, Any], dtype: Any) -> list[np.ndarray]:
  """The output, then the gradients of sum(out * g) for every parameter and the input."""
  p = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in d["params"].items()}
  x = torch.tensor(d["x"], dtype=dtype, requires_grad=True)
  out = torch_block(torch, d, p, x)
  (out * torch.tensor(d["g"], dtype=dtype)).sum().backward()
  return [out.detach().numpy(), *[p[k].grad.numpy() for k in BLOCK_PARAMS], x.grad.numpy()]

def block_reference(d: dict[str, Any]) -> list[np.ndarray] | None:
  if (torch := _torch()) is None: return None
  return torch_block_grads(torch, d, torch.float64)

# *** scaled_dot_product_attention alone ***

def sdpa_data(s: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
  shape = (s["batch"], s["heads"], s["seq"], s["width"] // s["heads"])
  return {"q": rng.standard_normal(shape, dtype=F32), "k": rng.standard_normal(shape, dtype=F32), "v": rng.standard_normal(shape, dtype=F32)}

def sdpa_reference(d: dict[str, Any]) -> np.ndarray:
  """Causal attention in float64 numpy."""
  q, k, v = (d[n].astype(np.float64) for n in "qkv")
  s = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
  s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True) @ v
