"""Causal scaled_dot_product_attention splits its query rows into blocks whose products stop at the diagonal (in a Jit, or
eager when the products are large; no gradient needed): values and gradients against numpy in float64, and the schedule's
kernels and their reduce ranges."""
import numpy as np
import pytest
from core import Tensor, Jit
from core.engine.capture import keeping_literals
from core.ir.ops import Ops
from core.schedule.kernelize import create_schedule
from core.tensor.nnops import _causal_row_cuts

def np_causal(q, k, v, scale=None):
  q, k, v = (x.astype(np.float64) for x in (q, k, v))
  sc = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
  s = np.where(np.tril(np.ones((q.shape[-2], k.shape[-2]), bool)), q @ k.swapaxes(-1, -2) * sc, -np.inf)
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True), sc

def np_causal_grads(q, k, v, g):
  """The output and the gradients of sum(out * g) with respect to q, k and v."""
  p, sc = np_causal(q, k, v)
  v, g = v.astype(np.float64), g.astype(np.float64)
  dp = g @ v.swapaxes(-1, -2)
  ds = p * (dp - (dp * p).sum(-1, keepdims=True))
  return p @ v, ds @ k.astype(np.float64) * sc, ds.swapaxes(-1, -2) @ q.astype(np.float64) * sc, p.swapaxes(-1, -2) @ g

def data(*shapes, seed=0):
  rng = np.random.default_rng(seed)
  return [rng.standard_normal(s).astype(np.float32) for s in shapes]

def kernels(t: Tensor) -> list:
  return [it for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def reduce_sizes(item) -> list[int]:
  return sorted(u.src[0].arg for u in item.ast.toposort() if u.op is Ops.RANGE and u.arg[-1].name == "REDUCE")

@pytest.mark.parametrize("L,S", [(256, 256), (300, 300), (256, 320), (320, 200), (130, 130), (255, 257)])
def test_causal_matches_numpy(L, S):
  q, k, v = data((2, 3, L, 16), (2, 3, S, 16), (2, 3, S, 8))
  with keeping_literals():   # as in a Jit's calls: split
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True).numpy()
  np.testing.assert_allclose(out, np_causal(q, k, v)[0] @ v, rtol=1e-4, atol=1e-5)

def test_causal_scale_and_batch_dims():
  q, k, v = data((5, 192, 8), (5, 192, 8), (5, 192, 4), seed=1)
  with keeping_literals():
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True, scale=0.3).numpy()
  np.testing.assert_allclose(out, np_causal(q, k, v, 0.3)[0] @ v, rtol=1e-4, atol=1e-5)

def test_jit_replays_the_split():
  q, k, v = data((1, 2, 256, 16), (1, 2, 256, 16), (1, 2, 256, 16), seed=3)
  f = Jit(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True).realize())
  for i in range(4):   # the eager first call, the capture, replays
    qi = q + i
    np.testing.assert_allclose(f(*(Tensor(x).realize() for x in (qi, k, v))).numpy(), np_causal(qi, k, v)[0] @ v, rtol=1e-4, atol=1e-5)

def test_where_the_rows_split():
  # eager, the split's extra tensor ops cost more to build than a small product saves: only from 2**30 multiply-adds
  assert _causal_row_cuts(1024, 1024, 2 ** 30, False) == [0, 256, 512, 768, 1024]
  assert _causal_row_cuts(1024, 1024, 2 ** 30 - 1, False) == [0, 1024]
  assert _causal_row_cuts(1024, 1024, 2 ** 31, True) == [0, 1024]   # a gradient is needed
  assert _causal_row_cuts(300, 300, 2 ** 30, False) == [0, 80, 160, 240, 300]
  assert _causal_row_cuts(256, 100, 2 ** 30, False) == [0, 256]   # the keys end before a second block would start
  q, k, v = (Tensor(x) for x in data((1, 2, 256, 16), (1, 2, 256, 16), (1, 2, 256, 16)))
  assert len(kernels(q.scaled_dot_product_attention(k, v, is_causal=True))) == 3

def test_blocks_skip_the_keys_above_the_diagonal():
  q, k, v = (Tensor(x).realize() for x in data((1, 12, 256, 64), (1, 12, 256, 64), (1, 12, 256, 64)))
  with keeping_literals(): ks = kernels(q.scaled_dot_product_attention(k, v, is_causal=True))
  # 4 row blocks of 64 (q k^T, softmax, p v each), then their concatenation; was 3 kernels over all 256 keys
  assert len(ks) == 13
  # the products with v reduce over the keys up to each block's last row only: 64, 128, 192, 256
  pv = [max(reduce_sizes(it)) for it in ks if len(reduce_sizes(it)) == 1 and any(b is v.uop.base for b in it.bufs)]
  assert sorted(pv) == [64, 128, 192, 256]

@pytest.mark.parametrize("L,S", [(40, 40), (256, 48)])
def test_short_rows_or_keys_stay_whole(L, S):
  q, k, v = (Tensor(x) for x in data((1, 2, L, 16), (1, 2, S, 16), (1, 2, S, 16)))
  with keeping_literals(): assert len(kernels(q.scaled_dot_product_attention(k, v, is_causal=True))) == 3

@pytest.mark.parametrize("requires_grad", [True, None])
def test_causal_gradients(requires_grad):
  # a tensor that needs a gradient keeps the whole (3 kernel) forward: the split's backward is four times the kernels; the split
  # one (requires_grad None: a gradient may still be asked for) differentiates as well
  q, k, v, g = data((1, 2, 256, 16), (1, 2, 256, 16), (1, 2, 256, 16), (1, 2, 256, 16), seed=2)
  Q, K, V = (Tensor(x, requires_grad=requires_grad) for x in (q, k, v))
  with keeping_literals():
    out = Q.scaled_dot_product_attention(K, V, is_causal=True)
    assert len(kernels(out)) == (3 if requires_grad else 13)
    grads = (out * Tensor(g)).sum().gradient(Q, K, V)
    got = [t.numpy() for t in (out, *grads)]
  for a, want in zip(got, np_causal_grads(q, k, v, g)): np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-5)

def test_hot_eager_calls_over_realized_inputs_split():
  # realized inputs replay the graph per signature (plans.replayed), cheap enough to split eagerly from REPLAYED_SPLIT_WORK
  # multiply-adds (1x12x256x64: 2**26.6, where a graph built from other nodes waits for 2**30), once the signature is hot:
  # SPLIT_HOT_CALLS calls before (the split compiles 13 kernels, not 3)
  from core.tensor.nnops import REPLAYED_SPLIT_WORK, SPLIT_HOT_CALLS
  assert _causal_row_cuts(256, 256, REPLAYED_SPLIT_WORK, False, hot=True) == [0, 64, 128, 192, 256]
  assert _causal_row_cuts(256, 256, REPLAYED_SPLIT_WORK, False, hot=False) == [0, 256]
  assert _causal_row_cuts(256, 256, REPLAYED_SPLIT_WORK - 1, False, hot=True) == [0, 256]
  assert _causal_row_cuts(256, 256, 2 ** 31, True, hot=True) == [0, 256]   # a gradient is needed
  q, k, v = data((1, 12, 256, 64), (1, 12, 256, 64), (1, 12, 256, 64), seed=3)
  Q, K, V = (Tensor(x).realize() for x in (q, k, v))
  counts = [len(kernels(Q.scaled_dot_product_attention(K, V, is_causal=True, scale=0.11))) for _ in range(SPLIT_HOT_CALLS + 2)]
  assert counts == [3] * SPLIT_HOT_CALLS + [13, 13]
  # an input built from another node is never replayed, nor split below 2**30
  assert [len(kernels((Q * 1).scaled_dot_product_attention(K, V, is_causal=True, scale=0.12))) for _ in range(SPLIT_HOT_CALLS + 1)] \
    == [3] * (SPLIT_HOT_CALLS + 1)
  small = [Tensor(x).realize() for x in data((1, 4, 256, 64), (1, 4, 256, 64), (1, 4, 256, 64))]   # 2**25
  assert {len(kernels(small[0].scaled_dot_product_attention(*small[1:], is_causal=True))) for _ in range(SPLIT_HOT_CALLS + 1)} == {3}

def test_eager_replays_compute_each_calls_inputs():
  # each call replays the first call's graph (whole, then split once hot) over its own buffers; the later ones are eager op
  # cache hits
  from core.tensor.nnops import SPLIT_HOT_CALLS
  for seed in range(SPLIT_HOT_CALLS + 3):
    q, k, v = data((1, 12, 256, 64), (1, 12, 256, 64), (1, 12, 256, 64), seed=10 + seed)
    out = Tensor(q).realize().scaled_dot_product_attention(Tensor(k).realize(), Tensor(v).realize(), is_causal=True).numpy()
    np.testing.assert_allclose(out, np_causal(q, k, v)[0] @ v, rtol=1e-4, atol=1e-5)
  q, k, v = data((1, 12, 256, 64), (1, 12, 256, 64), (1, 12, 256, 64), seed=40)
  Q, K, V = (Tensor(x).realize() for x in (q, k, v))
  out = Q.scaled_dot_product_attention(K, V, is_causal=True, scale=0.2).numpy()   # another scale: another plan
  np.testing.assert_allclose(out, np_causal(q, k, v, 0.2)[0] @ v, rtol=1e-4, atol=1e-5)

@pytest.fixture
def small_hot_split(monkeypatch):
  """A hot split from the second eager call of a signature and 2**16 multiply-adds: (1, 2, 128, 16) splits in two blocks."""
  import core.tensor.nnops as N
  from core.tensor import plans
  monkeypatch.setattr(N, "SPLIT_HOT_CALLS", 1)
  monkeypatch.setattr(N, "REPLAYED_SPLIT_WORK", 2 ** 16)
  plans._plans.clear()
  N._calls.clear()
  assert _causal_row_cuts(128, 128, 2 ** 16, False, hot=True) == [0, 64, 128]

def test_a_hot_eager_call_builds_no_node(small_hot_split, monkeypatch):
  # a steady call over realized inputs is pending (plans.PendingPlan): its realize is one eager op cache hit keyed by the plan,
  # no node of its graph made (ops.rebuild, the UOp constructor) nor torn down
  import core.ir.ops as O
  from core.tensor.plans import PendingPlan
  arrays = [data(*[(1, 2, 128, 16)] * 3, seed=s) for s in range(4)]
  for q, k, v in arrays[:3]:   # recorded whole, then split (recorded and compiled), then a split replay
    out = Tensor(q).realize().scaled_dot_product_attention(Tensor(k).realize(), Tensor(v).realize(), is_causal=True)
    np.testing.assert_allclose(out.numpy(), np_causal(q, k, v)[0] @ v, rtol=1e-4, atol=1e-5)
  Q, K, V = (Tensor(x).realize() for x in arrays[3])
  made, meta_call, rebuild = [], O.UOpMeta.__call__, O.rebuild
  with monkeypatch.context() as m:
    m.setattr(O.UOpMeta, "__call__", lambda cls, *a, **kw: made.append(a) or meta_call(cls, *a, **kw))
    m.setattr(O, "rebuild", lambda *a: made.append(a) or rebuild(*a))
    out = Q.scaled_dot_product_attention(K, V, is_causal=True).realize()
  assert {a[0] for a in made} <= {Ops.UNIQUE, Ops.BUFFER, Ops.RESHAPE} and len(made) <= 3 and out.requires_grad is None   # its result's
  q, k, v = arrays[3]
  np.testing.assert_allclose(out.numpy(), np_causal(q, k, v)[0] @ v, rtol=1e-4, atol=1e-5)
  pend = Q.scaled_dot_product_attention(K, V, is_causal=True)
  assert type(pend.__dict__.get("_pending")) is PendingPlan
  # asked for its node, it is the graph the split builds: a gradient reaches the inputs through it
  Qg = Tensor(q, requires_grad=True)
  grads = ((pend * 1).sum() + (Qg * 0).sum()).gradient(Q, K, V)
  g = np.ones_like(q)
  for a, want in zip(grads, np_causal_grads(q, k, v, g)[1:]): np.testing.assert_allclose(a.numpy(), want, rtol=1e-4, atol=1e-5)

def test_pending_replays_are_keyed_by_signature(small_hot_split):
  # shapes, dtypes and scales of one op: each hot signature replays its own plan, with the values of its own inputs
  from core.engine import realize as R
  cases = [((1, 2, 128, 16), (1, 2, 128, 16), (1, 2, 128, 16), np.float32, None), ((1, 2, 128, 16), (1, 2, 128, 16), (1, 2, 128, 8), np.float32, None),
           ((1, 2, 128, 16), (1, 2, 192, 16), (1, 2, 192, 16), np.float32, None), ((1, 2, 128, 16), (1, 2, 128, 16), (1, 2, 128, 16), np.float32, 0.3),
           ((1, 2, 128, 16), (1, 2, 128, 16), (1, 2, 128, 16), np.float16, None)]
  for rnd in range(3):
    for i, (qs, ks, vs, dt, scale) in enumerate(cases):
      q, k, v = (x.astype(dt) for x in data(qs, ks, vs, seed=10 * rnd + i))
      out = Tensor(q).realize().scaled_dot_product_attention(Tensor(k).realize(), Tensor(v).realize(), is_causal=True, scale=scale)
      assert out.dtype == Tensor(q).dtype and out.shape == qs[:-1] + vs[-1:]
      want = np_causal(q, k, v, scale)[0] @ v.astype(np.float64)
      np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=3e-3 if dt is np.float16 else 1e-4, atol=3e-3 if dt is np.float16 else 1e-5)
  # after the caches are dropped, a pending result is built over its own inputs' nodes
  q, k, v = data(*cases[0][:3], seed=99)
  pend = Tensor(q).realize().scaled_dot_product_attention(Tensor(k).realize(), Tensor(v).realize(), is_causal=True)
  from core.tensor import plans
  plans._plans.clear()
  R.eager_ops.clear()
  np.testing.assert_allclose(pend.numpy(), np_causal(q, k, v)[0] @ v, rtol=1e-4, atol=1e-5)

def test_pending_replays_keep_no_buffer_alive(small_hot_split, monkeypatch):
  # the plans and the eager op cache hold no input buffer of a call, and no output buffer but in the eager buffer pool (for the
  # next call's result): they go once the tensors do
  import gc, weakref
  from core.engine import realize as R
  monkeypatch.setattr(R, "HOST_POOL_BYTES", 0)   # no Tensor(ndarray) pool of small inputs
  ins, outs = [], []
  for s in range(4):
    ts = [Tensor(x).realize() for x in data(*[(1, 2, 128, 16)] * 3, seed=s)]
    out = ts[0].scaled_dot_product_attention(ts[1], ts[2], is_causal=True).realize()
    ins += [weakref.ref(R.realized_buffer(t.uop)[0]) for t in ts]
    outs.append(weakref.ref(R.realized_buffer(out.uop)[0]))
    del ts, out
  gc.collect()
  pooled = [b for entries in R._shared.values() for b, *_ in entries]
  assert [r() for r in ins] == [None] * len(ins) and all(r() is None or any(r() is b for b in pooled) for r in outs)
