"""Small ONNX models of the shapes people deploy, built with onnx.helper from seeded random weights: a ResNet-style classifier, a
MobileNet-style net with depthwise convolutions and a transformer encoder. Shared by the ONNX tests and bench/onnx_models.py;
needs the optional dependency onnx."""
from __future__ import annotations
import os
from typing import Callable
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

class Builder:
  """Collects nodes and random initializers for one graph."""
  def __init__(self, seed: int):
    self.rng, self.n = np.random.default_rng(seed), 0
    self.nodes: list[onnx.NodeProto] = []
    self.inits: list[onnx.TensorProto] = []
  def name(self, base: str) -> str:
    self.n += 1
    return f"{base}{self.n}"
  def init(self, arr: np.ndarray, base: str = "w") -> str:
    nm = self.name(base)
    self.inits.append(numpy_helper.from_array(np.asarray(arr), nm))
    return nm
  def weight(self, *shape: int, scale: float | None = None) -> str:
    s = scale if scale is not None else 1 / np.sqrt(np.prod(shape[1:]) if len(shape) > 1 else shape[0])
    return self.init((self.rng.standard_normal(shape) * s).astype(np.float32))
  def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs) -> list[str]:
    outs = [self.name(op.lower()) for _ in range(n_out)]
    self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
    return outs
  def one(self, op: str, inputs: list[str], **attrs) -> str: return self.node(op, inputs, **attrs)[0]
  def model(self, x_shape: tuple, out: str, out_rank: int, x_name: str = "x") -> onnx.ModelProto:
    g = helper.make_graph(self.nodes, "m", [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [None] * out_rank)], self.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(m)
    return m

  # layers
  def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, act: str | None = "Relu") -> str:
    w = self.weight(cout, cin // group, k, k)
    y = self.one("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)
    bn = [self.init((1 + 0.1 * self.rng.standard_normal(cout)).astype(np.float32)), self.init((0.1 * self.rng.standard_normal(cout)).astype(np.float32)),
          self.init((0.1 * self.rng.standard_normal(cout)).astype(np.float32)), self.init(self.rng.uniform(0.5, 1.5, cout).astype(np.float32))]
    y = self.one("BatchNormalization", [y] + bn, epsilon=1e-5)
    if act == "Relu": y = self.one("Relu", [y])
    elif act == "Relu6": y = self.one("Clip", [y, self.init(np.array(0, np.float32)), self.init(np.array(6, np.float32))])
    return y
  def head(self, x: str, c: int, classes: int) -> str:
    y = self.one("GlobalAveragePool", [x])
    y = self.one("Flatten", [y], axis=1)
    y = self.one("Gemm", [y, self.weight(classes, c), self.init(np.zeros(classes, np.float32))], transB=1)
    return self.one("Softmax", [y], axis=-1)

def resnet() -> tuple[onnx.ModelProto, tuple]:
  b = Builder(0)
  y = b.conv_bn("x", 3, 16, 3)
  y = b.one("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
  for cin, cout, stride in ((16, 16, 1), (16, 32, 2)):
    r = b.conv_bn(y, cin, cout, 3, stride)
    r = b.conv_bn(r, cout, cout, 3, act=None)
    sc = y if cin == cout and stride == 1 else b.conv_bn(y, cin, cout, 1, stride, act=None)
    y = b.one("Relu", [b.one("Add", [r, sc])])
  return b.model((2, 3, 32, 32), b.head(y, 32, 10), 2), (2, 3, 32, 32)

def mobilenet() -> tuple[onnx.ModelProto, tuple]:
  b = Builder(1)
  y = b.conv_bn("x", 3, 16, 3, stride=2, act="Relu6")
  for cin, cout, stride, expand in ((16, 16, 1, 4), (16, 24, 2, 4), (24, 24, 1, 6)):
    hid = cin * expand
    r = b.conv_bn(y, cin, hid, 1, act="Relu6")
    r = b.conv_bn(r, hid, hid, 3, stride=stride, group=hid, act="Relu6")   # depthwise
    r = b.conv_bn(r, hid, cout, 1, act=None)
    y = b.one("Add", [y, r]) if cin == cout and stride == 1 else r
  return b.model((1, 3, 48, 48), b.head(y, 24, 7), 2), (1, 3, 48, 48)

def transformer(layers: int = 2, d: int = 32, heads: int = 4, ff: int = 64) -> tuple[onnx.ModelProto, tuple]:
  b = Builder(2)
  dh = d // heads
  x = "x"
  def shape_of(t: str, dims: list[int]) -> str:   # the exporter's pattern: runtime dims from Shape, the rest constant
    s = b.one("Shape", [t])
    parts = [b.one("Unsqueeze", [b.one("Gather", [s, b.init(np.array(i, np.int64))], axis=0), b.init(np.array([0], np.int64))]) for i in (0, 1)]
    return b.one("Concat", parts + [b.init(np.array(dims, np.int64))], axis=0)
  def ln(t: str) -> str:
    return b.one("LayerNormalization", [t, b.init((1 + 0.1 * b.rng.standard_normal(d)).astype(np.float32)),
                                        b.init((0.1 * b.rng.standard_normal(d)).astype(np.float32))], axis=-1, epsilon=1e-5)
  def linear(t: str, cin: int, cout: int) -> str:
    return b.one("Add", [b.one("MatMul", [t, b.weight(cin, cout, scale=1 / np.sqrt(cin))]), b.init((0.02 * b.rng.standard_normal(cout)).astype(np.float32))])
  def split_heads(t: str) -> str: return b.one("Transpose", [b.one("Reshape", [t, shape_of(t, [heads, dh])])], perm=[0, 2, 1, 3])
  mask = b.init(np.triu(np.full((8, 8), -1e9, np.float32), 1))
  for _ in range(layers):
    h = ln(x)
    q, k, v = (split_heads(linear(h, d, d)) for _ in range(3))
    att = b.one("MatMul", [q, b.one("Transpose", [k], perm=[0, 1, 3, 2])])
    att = b.one("Add", [b.one("Div", [att, b.init(np.array(np.sqrt(dh), np.float32))]), mask])
    o = b.one("MatMul", [b.one("Softmax", [att], axis=-1), v])
    o = b.one("Reshape", [b.one("Transpose", [o], perm=[0, 2, 1, 3]), shape_of(x, [d])])
    x = b.one("Add", [x, linear(o, d, d)])
    f = linear(ln(x), d, ff)
    f = b.one("Mul", [b.one("Mul", [f, b.one("Add", [b.one("Erf", [b.one("Div", [f, b.init(np.array(np.sqrt(2), np.float32))])]),
                                                       b.init(np.array(1, np.float32))])]), b.init(np.array(0.5, np.float32))])
    x = b.one("Add", [x, linear(f, ff, d)])
  return b.model((2, 8, d), ln(x), 3), (2, 8, d)

MODELS = {"resnet": resnet, "mobilenet": mobilenet, "transformer": transformer}

def compiled_file(make: Callable[[], tuple[onnx.ModelProto, tuple]], directory: str) -> tuple[onnx.ModelProto, tuple, str]:
  """(model, input shape, path) of model `make()` compiled on the default device and saved in `directory` as <make's name>.core."""
  from core.onnx import compile_model
  model, shape = make()
  path = os.path.join(directory, f"{make.__name__}.core")
  compile_model(model).save(path)
  return model, shape, path
