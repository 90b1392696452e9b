"""The op registry: ONNX op_type -> a function of the node's inputs (positional) and attributes (keyword-only).
A function's keyword-only parameters are the attributes it supports; `static` names the inputs it reads on the host
(shapes, axes, pads) and takes as numpy arrays instead of Tensors."""
from __future__ import annotations
import inspect
from dataclasses import dataclass
from typing import Any, Callable

class OnnxError(NotImplementedError):
  """An op or attribute the runner does not support, or a model it can't run; the message names the node."""

class Seq(list):
  """An ONNX sequence value (a list of Tensors): what sequence ops take and return."""

class _Empty:
  def __repr__(self) -> str: return "EMPTY"
EMPTY = _Empty()   # an op returns this for an empty optional (the op's parameter then receives None)

@dataclass(frozen=True)
class Graph:
  """A GRAPH attribute (If's branches, Loop's and Scan's body) as the op receives it: called with the body's inputs
  (Tensors, host arrays, Seqs or None), it runs the body in the node's scope and returns the body's outputs."""
  run: Callable[..., list[Any]]
  inputs: tuple[str, ...]
  outputs: tuple[str, ...]
  def __call__(self, *args: Any) -> list[Any]: return self.run(*args)

@dataclass(frozen=True)
class OpDef:
  fn: Callable[..., Any]
  attrs: frozenset[str]   # the attribute names fn takes
  context: frozenset[str] # the runner-filled parameters fn takes (_opset, _nout, _device)
  static: frozenset[int]  # input positions passed as numpy arrays
  variadic: bool          # fn takes *inputs

OPS: dict[str, OpDef] = {}

# attribute names that are Python keywords are taken with a trailing underscore
ATTR_ALIASES = {"from": "from_", "lambda": "lambda_"}

def op(*names: str, static: tuple[int, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
  """Registers fn under each ONNX op_type in names."""
  def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
    params = inspect.signature(fn).parameters.values()
    kws = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    attrs, context = frozenset(k for k in kws if not k.startswith("_")), frozenset(k for k in kws if k.startswith("_"))
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    for n in names: OPS[n] = OpDef(fn, attrs, context, frozenset(static), variadic)
    return fn
  return deco
