"""Graph rewrites done once at load, before any Tensor exists: an inference BatchNormalization whose input is a Conv (and only
that Conv reads the Conv's output) is folded into the Conv's weight and bias, as onnxruntime's own optimizer does, so the
conv's kernel adds one bias per channel instead of normalizing every output element with four per-channel values."""
from __future__ import annotations
from typing import Any
import numpy as np

def _attr(n: Any, name: str, default: Any) -> Any:
  from onnx import helper
  return next((helper.get_attribute_value(a) for a in n.attribute if a.name == name), default)

def fold_batchnorm(nodes: list[Any], arrays: dict[str, np.ndarray], outputs: set[str]) -> tuple[list[Any], dict[str, np.ndarray]]:
  """(nodes, arrays) with every foldable Conv -> BatchNormalization pair replaced by one Conv on new initializers (added to the
  returned arrays; `arrays` maps this graph's initializer names to their values). A pair folds when the BN is in inference mode
  with one output, its four parameters and the Conv's weight and bias are float initializers, and the Conv's output is read by the
  BN only (not by another node, a subgraph or the graph's outputs); anything else is left as it is."""
  from onnx import helper
  readers: dict[str, int] = {}
  for i in _reads(nodes, top=True): readers[i] = readers.get(i, 0) + 1
  for i in _reads(nodes, top=False): readers[i] = readers.get(i, 0) + 2   # a subgraph's read: never folded away
  producer = {o: n for n in nodes for o in n.output}
  new_arrays = dict(arrays)
  replaced: dict[int, Any] = {}   # id(BN node) -> the folded Conv, which takes the BN's place (its inputs are computed by then)
  dropped: set[int] = set()       # id(Conv node) folded into its BN
  for bn in nodes:
    if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx") or len(bn.output) != 1 or len(bn.input) != 5: continue
    if _attr(bn, "training_mode", 0) or _attr(bn, "spatial", 1) != 1: continue
    conv = producer.get(bn.input[0])
    if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or len(conv.output) != 1: continue
    if readers.get(conv.output[0], 0) != 1 or conv.output[0] in outputs: continue
    names = [nm for nm in list(bn.input[1:]) + list(conv.input[1:3]) if nm]
    if any(nm not in arrays or arrays[nm].dtype != np.float32 for nm in names): continue
    params = [arrays[nm] for nm in names]
    scale, bias, mean, var, w = params[:5]
    b = params[5] if len(params) > 5 else np.zeros(w.shape[0], np.float32)
    if not scale.shape == bias.shape == mean.shape == var.shape == b.shape == (w.shape[0],): continue
    # the per-channel factors in float64, so the folded weights carry one float32 rounding
    k = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + float(_attr(bn, "epsilon", 1e-5)))
    wn, bn_b = f"{conv.output[0]}__bnfold_w", f"{conv.output[0]}__bnfold_b"
    new_arrays[wn] = (w.astype(np.float64) * k.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
    new_arrays[bn_b] = ((b.astype(np.float64) - mean) * k + bias).astype(np.float32)
    folded = helper.make_node("Conv", [conv.input[0], wn, bn_b], list(bn.output), name=conv.name or bn.name)
    folded.attribute.extend(conv.attribute)
    replaced[id(bn)] = folded
    dropped.add(id(conv))
  if not replaced: return nodes, arrays
  out = [replaced.get(id(n), n) for n in nodes if id(n) not in dropped]
  # the folded Convs' weights and the BNs' parameters nothing reads any more are not uploaded
  gone = set(_reads(nodes, top=True)) - set(_reads(out, top=True)) - set(_reads(out, top=False)) - outputs
  return out, {k: v for k, v in new_arrays.items() if k not in gone}

def _reads(nodes: list[Any], top: bool) -> list[str]:
  """The value names `nodes` read (top) or their subgraphs read, at any depth (not top)."""
  if top: return [i for n in nodes for i in n.input if i]
  subs = [g for n in nodes for a in n.attribute for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)]
  return [i for g in subs for i in _reads(list(g.node), True) + _reads(list(g.node), False)]
