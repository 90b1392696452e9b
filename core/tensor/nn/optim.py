"""Optimizers: SGD (momentum, nesterov, weight decay), LAMB, and Adam/AdamW as LAMB without the trust ratio."""
from __future__ import annotations
from core.ir.dtype import dtypes, least_upper_dtype
from core.tensor.tensor import Tensor
from core.tensor.nn.layers import filled

def _unique(ts: list[Tensor]) -> list[Tensor]:
  # by identity: Tensor.__eq__ is elementwise, so dict/set membership must not compare tensors
  return list({id(t): t for t in ts}.values())

def _readers(written: list[Tensor], skip: list[Tensor]) -> list[Tensor]:
  """The live unrealized tensors, other than `skip`, whose graphs read the buffer of a tensor in `written`."""
  from core.ir.ops import UOp, Ops
  from core.schedule.realize_points import contiguous_buffer
  bufs = {cb[0] for t in written if (cb := contiguous_buffer(t.uop)) is not None}
  skip_ids = {id(t) for t in skip + written}
  # each tensor's graph is read once: another thread may realize one of them (and so replace its uop) meanwhile
  cands = [(t, u) for t in Tensor._grad_tensors() if id(t) not in skip_ids and contiguous_buffer(u := t.uop) is None]
  if not bufs or not cands: return []
  reads: dict[UOp, bool] = {}
  for u in UOp(Ops.SINK, src=tuple(u for _, u in cands)).toposort():
    reads[u] = u in bufs or any(reads[s] for s in u.src)
  return [t for t, u in cands if reads[u]]

class Optimizer:
  """Holds the parameters to train, the buffers to keep realized (e.g. BatchNorm running stats) and `lr` as a Tensor.

  `lr` lives in a one-element buffer so a Jit-captured step reads its current value: change it with `opt.lr.assign(...)`."""
  def __init__(self, params: list[Tensor], lr: float):
    # a tensor handed to an optimizer without an explicit requires_grad is a parameter
    for p in params:
      if p.requires_grad is None: p.requires_grad = True
    self.params = _unique([p for p in params if p.requires_grad])
    if not self.params: raise ValueError("optimizer got no tensor that requires grad; pass the model's parameters (nn.state.get_parameters)")
    self.buffers = _unique([p for p in params if not p.requires_grad])
    self.device = self.params[0].device
    # at least float32 so a half-precision model still steps with an exact learning rate
    self.lr = Tensor([lr], dtype=least_upper_dtype(dtypes.default_float, dtypes.float32), device=self.device, requires_grad=False).realize()

  def zero_grad(self) -> None:
    """Forgets the gradients of the last backward pass."""
    for p in self.params: p.grad = None

  def step(self) -> None:
    """Applies one update with the current `.grad`s and realizes parameters, optimizer state and buffers. Live lazy tensors that
    read the parameters (the loss) are realized first, with the gradients: they keep the values of the weights before the step.
    Runs only in training mode (as in tinygrad): a step taken by mistake outside it would change the weights silently."""
    if not Tensor.training:
      raise RuntimeError(f"{type(self).__name__}.step() outside training mode: wrap the training step in `with Tensor.train():` "
                         "(or `with Context(TRAINING=1):`, or set Tensor.training = True)")
    # the gradients and buffer updates (BatchNorm running stats) read the parameters' old values; they are computed
    # before the first parameter is overwritten, so no kernel sees a half-updated model whatever order the schedule picks
    pre = [p.grad for p in self.params if p.grad is not None] + self.buffers
    # so are live lazy tensors that read the parameters (the loss): each keeps the value it had when it was built, and the
    # forward pass they share with the gradients runs once
    if pre: Tensor.realize(*pre, *_readers(self.params + self.buffers, pre))
    Tensor.realize(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Builds (without running) the update; returns every tensor that must be realized to apply it."""
    # like PyTorch, a parameter that got no gradient is left untouched
    live = [(i, p) for i, p in enumerate(self.params) if p.grad is not None]
    return self._step(live) + self.params + self.buffers

  def _lr(self) -> Tensor: return self.lr.reshape(())
  def _state_like(self) -> list[Tensor]:
    """One zero-filled float32 buffer per parameter (momentum, Adam moments)."""
    return [filled(*p.shape, value=0.0, device=p.device, requires_grad=False) for p in self.params]
  def _step(self, live: list[tuple[int, Tensor]]) -> list[Tensor]: raise NotImplementedError("an Optimizer subclass implements _step")

class SGD(Optimizer):
  """p -= lr * g with g = grad + weight_decay * p, through momentum b = momentum * b + g (nesterov: g + momentum * b)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False):
    if nesterov and momentum <= 0: raise ValueError("SGD: nesterov=True needs momentum > 0")
    super().__init__(params, lr)
    self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
    self.b = self._state_like() if momentum else []

  def _step(self, live: list[tuple[int, Tensor]]) -> list[Tensor]:
    for i, p in live:
      assert p.grad is not None  # step() passes only the params that have a grad
      g = p.grad.cast(dtypes.float32)
      if self.wd: g = g + self.wd * p.detach()
      if self.momentum:
        # reading the assign's result (not the buffer) orders this read after the write
        b = self.b[i].assign(self.momentum * self.b[i] + g)
        g = g + self.momentum * b if self.nesterov else b
      p.assign((p.detach() - g * self._lr()).cast(p.dtype))
    return self.b

class LAMB(Optimizer):
  """Adam moments with bias correction, plus decoupled weight decay; unless adam=True the update is scaled by the
  trust ratio ||p|| / ||update|| (https://arxiv.org/abs/1904.00962)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    # b1**t and b2**t live in buffers (not Python floats) so a captured step keeps counting
    self.b1_t, self.b2_t = (filled(1, value=1.0, device=self.device, requires_grad=False) for _ in range(2))
    self.m, self.v = self._state_like(), self._state_like()

  def _step(self, live: list[tuple[int, Tensor]]) -> list[Tensor]:
    # reading the assigns' results (not the buffers) orders every read after its write
    b1_t, b2_t = self.b1_t.assign(self.b1_t * self.b1), self.b2_t.assign(self.b2_t * self.b2)
    c1, c2 = (1.0 - b1_t).reshape(()), (1.0 - b2_t).reshape(())
    for i, p in live:
      assert p.grad is not None
      g = p.grad.cast(dtypes.float32)
      m = self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
      v = self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
      up = (m / c1) / ((v / c2).sqrt() + self.eps)
      if self.wd: up = up + self.wd * p.detach()
      if not self.adam:
        pn, un = (p.detach() * p.detach()).sum().sqrt(), (up * up).sum().sqrt()
        # the trust ratio falls back to 1 where either norm is 0 (fresh zero-initialized weights, zero gradient)
        up = up * ((pn > 0) & (un > 0)).where(pn / un, 1.0)
      p.assign((p.detach() - self._lr() * up).cast(p.dtype))
    return [self.b1_t, self.b2_t] + self.m + self.v

def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> LAMB:
  """Adam (https://arxiv.org/abs/1412.6980): LAMB with adam=True and no weight decay."""
  return LAMB(params, lr, b1, b2, eps, 0.0, adam=True)

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01) -> LAMB:
  """AdamW (https://arxiv.org/abs/1711.05101): Adam whose weight decay is added to the update, not to the gradient."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)
