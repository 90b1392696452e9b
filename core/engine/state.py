"""What the engine knows about graph nodes, kept by the engine, not on the nodes: UOps stay immutable values.

A node's facts (its Buffer, the buffer holding its computed value, whether an ASSIGN ran) live as long as the node: a
table keyed by the node's identity whose entries a weak reference drops when the node dies. A lookup is one dict probe on
`id(node)` (the eager path asks for every node of every graph it runs), and a node that never gets a fact costs nothing."""
from __future__ import annotations
import weakref
from typing import Any
from core.ir.ops import UOp

class NodeFacts:
  """The engine's facts about one node. `buffer`: the device Buffer of a BUFFER node. `realized`: (uop over the buffer
  holding the node's value, that buffer's version, the assign epoch) when it was computed. `version`: bumped when something
  is assigned into this BUFFER node's memory. `assigned`: for an ASSIGN that ran, its target. `plain`: the walk epoch in
  which the node was found to read no buffer (core/engine/realize.py: _walk). `plan`: (plan key, its input nodes, its op key or
  None) of a node that core.tensor.plans built or replayed from those inputs: its graph is that plan's, so _walk keys it by
  the two; the op key (realize.plan_op_key's, where plans.pending made it) is _op_key's answer for the node."""
  __slots__ = ("buffer", "realized", "version", "assigned", "plain", "plan", "_ref")
  def __init__(self) -> None:
    self.buffer: Any = None
    self.realized: tuple[UOp, int, int] | None = None
    self.version = 0
    self.assigned: UOp | None = None
    self.plain = -1
    self.plan: tuple[Any, tuple[UOp, ...], tuple[tuple, list[UOp], list[UOp]] | None] | None = None
    self._ref: weakref.ref | None = None   # keeps the weak reference (and so its callback) alive as long as the entry

class _KeyRef(weakref.ref):
  __slots__ = ("key",)
  key: int

class NodeTable:
  """Node -> NodeFacts, an entry living exactly as long as its node (like a WeakKeyDictionary, without a weak reference
  made per lookup). CPython runs a weak reference's callback before the node's memory can be reused, so an id is never
  seen for a dead node."""
  def __init__(self) -> None:
    self._d: dict[int, NodeFacts] = {}
    self.get_id = self._d.get   # hot paths: table.get_id(id(u))
  def _drop(self, r: _KeyRef) -> None: self._d.pop(r.key, None)
  def get(self, u: UOp) -> NodeFacts | None: return self._d.get(id(u))
  def of(self, u: UOp) -> NodeFacts:
    """The facts of `u`, made empty on first ask (atomic: two threads asking at once get the one stored first)."""
    if (f := self._d.get(k := id(u))) is not None: return f
    new = NodeFacts()
    new._ref = r = _KeyRef(u, self._drop)
    r.key = k
    return self._d.setdefault(k, new)
  def __len__(self) -> int: return len(self._d)

facts = NodeTable()
"""The engine's one table of node facts."""
