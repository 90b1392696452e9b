"""The LLVM renderer writes a scalar load's 32-bit index plus a constant as `add nsw` (renderer._llvm_index_offset), and the
load's address as the buffer at the index, then the constant in i64 (renderer._llvm_offset_index): a tile's lanes read one by
one in a reduce loop are then one address plus displacements to LLVM's loop passes; an ungated vector load's address outside
reduce loops too (renderer.vector_offsets), a gated one's or one's in a reduce loop keeps the i32 sum, and a vector store's outside
reduce loops, plain or masked, but not one under a branch. Every load's and store's index plus a constant is nsw (renderer.index_adds);
other int32 adds (the data's) keep wrapping. Results match numpy."""
import re
import numpy as np
from core.ir.dtype import AddrSpace, dtypes
from core.ir.ops import UOp, Ops, AxisType
from cpu_kernels import Linear, c, rng, buf, run, device, offset_row_sums

def _plus_one() -> list:
  # out[i] = x[i] + 1 in int32: a data add, which must wrap
  out, x = buf(0, dtypes.int32, 4), buf(1, dtypes.int32, 4)
  lin = Linear()
  lin.add(out, x)
  i = lin.add(rng(4, 0))
  lin.add(out.index(i).store(x.index(i).load() + c(1)).end(i))
  return lin.uops

def _vector_offset_sums() -> list:
  # out[4r:4r+4] = x[4r+1:4r+5] + (x[4r+2:4r+6] where r < 7, else 0): vector loads at constant offsets, the second gated
  out, x, v4 = buf(0, dtypes.float32, 32), buf(1, dtypes.float32, 40), dtypes.float32.vec(4)
  lin = Linear()
  lin.add(out, x)
  r = lin.add(rng(8, 0))
  i = r * c(4)
  plain = x.index(i + c(1)).load(dtype=v4)
  gated = x.index(i + c(2), valid=r < c(7)).load(UOp.const(v4, 0.0), dtype=v4)
  lin.add(out.index(i).store(plain + gated).end(r))
  return lin.uops

def test_an_ungated_vector_load_steps_from_its_index():
  src = device("LLVM").renderer.render("vector_sums", _vector_offset_sums())
  at = dict(re.findall(r"(%\w+) = getelementptr float, ptr %data1, i32 (%\w+)\n", src))
  steps = re.findall(r"(%\w+) = getelementptr float, ptr (%\w+), i64 (\d+)\n  %\w+ = load <4 x float>, ptr \1", src)
  assert [(p in at, int(o)) for _, p, o in steps] == [(True, 1)]
  # the gated load keeps the buffer at the i32 sum, an add nsw (renderer.index_adds: without it, a plain add)
  adds = dict(re.findall(r"(%\w+) = add nsw i32 %\w+, (\d+)\n", src))
  assert [adds[i] for i in re.findall(r"getelementptr inbounds float, ptr %data1, i32 (%\w+)\n", src) if i in adds] == ["2"]

def _vector_offset_stores() -> list:
  # out[4r+1:4r+5] = x[4r:4r+4] (a plain vector store), out[4r+33:4r+37] = 2x[4r:4r+4] in its lanes k < 3 (masked), and
  # out[4r+65:4r+69] = -x[4r:4r+4] where r < 5 (under a branch): each at its row's index plus a constant
  out, x = buf(0, dtypes.float32, 100), buf(1, dtypes.float32, 32)
  lin = Linear()
  lin.add(out, x)
  lanes = UOp(Ops.VECTORIZE, dtypes.bool.vec(4), tuple(c(k) < c(3) for k in range(4)))
  for axis, (off, valid, f) in enumerate([(1, None, lambda v: v), (33, lambda r: lanes, lambda v: v + v), (65, lambda r: r < c(5), lambda v: -v)]):
    r = lin.add(rng(8, axis))
    i = r * c(4)
    v = x.index(i).load(dtype=dtypes.float32.vec(4))
    lin.add(out.index(i + c(off), valid=valid(r) if valid else None).store(f(v)).end(r))
  return lin.uops

def test_a_vector_store_steps_from_its_index_unless_under_a_branch():
  src = device("LLVM").renderer.render("vector_stores", _vector_offset_stores())
  at = set(re.findall(r"(%\w+) = getelementptr float, ptr %data0, i32 %\w+\n", src))
  steps = {p: int(o) for p, b, o in re.findall(r"(%\w+) = getelementptr float, ptr (%\w+), i64 (\d+)\n", src) if b in at}
  plain = re.findall(r"store <4 x float> %\w+, ptr (%\w+)", src)
  masked = re.findall(r"call void @llvm\.masked\.store\.v4f32\.p0\(<4 x float> %\w+, ptr (%\w+)", src)
  assert sorted(steps.values()) == [1, 33] and [steps.get(p) for p in masked] == [33]
  assert sorted(steps.get(p, -1) for p in plain) == [-1, 1]   # the branch-gated store: below
  # the branch-gated store keeps the buffer at the i32 sum (nsw)
  adds = dict(re.findall(r"(%\w+) = add nsw i32 %\w+, (\d+)\n", src))
  assert [adds[i] for i in re.findall(r"getelementptr inbounds float, ptr %data0, i32 (%\w+)\n", src) if i in adds] == ["65"]

def test_vector_offset_stores_match_numpy():
  x = np.arange(32, dtype=np.float32) * 0.5 - 3
  res = run("LLVM", _vector_offset_stores(), [np.zeros(100, np.float32), x])[0]
  want = np.zeros(100, np.float32)
  for r in range(8):
    want[4 * r + 1:4 * r + 5] = x[4 * r:4 * r + 4]
    want[4 * r + 33:4 * r + 36] = 2 * x[4 * r:4 * r + 3]
    if r < 5: want[4 * r + 65:4 * r + 69] = -x[4 * r:4 * r + 4]
  np.testing.assert_array_equal(res, want)

def _vector_row_sums() -> list:
  # out[4i:4i+4] = x[8i+1:8i+5] + x[8i+5:8i+9]: a vector load at a constant offset inside a reduce loop (j), into a register
  out, x, v4 = buf(0, dtypes.float32, 16), buf(1, dtypes.float32, 40), dtypes.float32.vec(4)
  acc = UOp(Ops.DEFINE_REG, v4.ptr(1, AddrSpace.REG), (), 0)
  lin = Linear()
  lin.add(out, x, acc)
  i = lin.add(rng(4, 0))
  lin.add(acc.index(c(0)).store(UOp.const(v4, 0.0)))
  j = lin.add(UOp(Ops.RANGE, dtypes.int32, (c(2),), (1, AxisType.REDUCE)))
  total = acc.index(c(0)).load() + x.index(i * c(8) + j * c(4) + c(1)).load(dtype=v4)
  lin.add(out.index(i * c(4)).store(acc.after(lin.add(acc.index(c(0)).store(total).end(j))).index(c(0)).load()).end(i))
  return lin.uops

def test_a_vector_load_in_a_reduce_loop_keeps_the_i32_sum():
  src = device("LLVM").renderer.render("vector_rows", _vector_row_sums())
  # (nsw: every load's and store's index plus a constant, renderer.index_adds)
  adds = dict(re.findall(r"(%\w+) = add nsw i32 %\w+, (\d+)\n", src))
  assert [adds[i] for i in re.findall(r"getelementptr inbounds float, ptr %data1, i32 (%\w+)\n", src) if i in adds] == ["1"]
  assert not re.search(r"getelementptr (inbounds )?float, ptr %\w+, i64 \d+", src)
  x = np.arange(40, dtype=np.float32) * 0.25 - 2
  res = run("LLVM", _vector_row_sums(), [np.zeros(16, np.float32), x])[0]
  np.testing.assert_array_equal(res, np.concatenate([x[8 * i + 1:8 * i + 5] + x[8 * i + 5:8 * i + 9] for i in range(4)]))

def test_vector_offset_sums_match_numpy():
  x = np.arange(40, dtype=np.float32) * 0.5 - 3
  res = run("LLVM", _vector_offset_sums(), [np.zeros(32, np.float32), x])[0]
  want = np.concatenate([x[4 * r + 1:4 * r + 5] + (x[4 * r + 2:4 * r + 6] if r < 7 else 0) for r in range(8)])
  np.testing.assert_array_equal(res, want)

def test_a_scalar_loads_offset_index_is_nsw(monkeypatch):
  # where the loads' addresses are the i32 sums (offset_geps off), the sums are nsw; stepped from the index in i64 (below), the
  # sums are read by nothing and not written (renderer.unused_values)
  rnd = device("LLVM").renderer
  assert not re.search(r"= add nsw i32 %\w+, \d+\n", rnd.render("lane_sums", offset_row_sums()))
  monkeypatch.setattr(rnd, "offset_geps", False)
  src = rnd.render("lane_sums", offset_row_sums())
  assert sorted(int(o) for o in re.findall(r"= add nsw i32 %\w+, (\d+)\n", src)) == [1, 2]

def test_a_scalar_loads_offset_is_an_i64_step_from_its_index():
  # both loads address data1 at the same i32 index (i*8 + j), then 1 and 2 floats on in i64: no address of their own
  src = device("LLVM").renderer.render("lane_sums", offset_row_sums())
  at = dict(re.findall(r"(%\w+) = getelementptr float, ptr %data1, i32 (%\w+)\n", src))
  steps = [(at[p], int(o)) for p, o in re.findall(r"getelementptr float, ptr (%\w+), i64 (\d+)", src) if p in at]
  assert sorted(o for _, o in steps) == [1, 2] and len({i for i, _ in steps}) == 1

def test_offset_addresses_are_not_inbounds():
  # the index alone, before its constant, may lie outside the buffer (a padded window's taps): an inbounds GEP there is poison
  for src in (device("LLVM").renderer.render("lane_sums", offset_row_sums()),
              device("LLVM").renderer.render("vector_sums", _vector_offset_sums())):
    steps = re.findall(r"(%\w+) = getelementptr (inbounds )?float, ptr %data1, i32 %\w+\n  %\w+ = getelementptr (inbounds )?float, "
                       r"ptr \1, i64 \d+", src)
    assert steps and all(a == b == "" for _, a, b in steps), steps

def test_a_data_add_still_wraps():
  src = device("LLVM").renderer.render("plus_one", _plus_one())
  assert "nsw" not in src
  x = np.array([2**31 - 1, -1, 0, 5], np.int32)
  np.testing.assert_array_equal(run("LLVM", _plus_one(), [np.zeros(4, np.int32), x])[0], np.array([-2**31, 0, 1, 6], np.int32))

def test_lane_sums_match_numpy():
  x = np.arange(40, dtype=np.float32) * 0.5 - 3
  res = run("LLVM", offset_row_sums(), [np.zeros(4, np.float32), x])[0]
  np.testing.assert_allclose(res, [x[i * 8 + 1:i * 8 + 9].sum() + x[i * 8 + 2:i * 8 + 10].sum() for i in range(4)], rtol=1e-6)

def test_the_address_rules_are_called_by_node():
  # they test their index's shape themselves: rewrite calls them directly, with no matcher captures, for every INDEX and int32
  # ADD rendered (as patterns over the sources they were ~1/6 of a ResNet-18 kernel's render)
  pm = device("LLVM").renderer.string_rewrite
  for op in (Ops.INDEX, Ops.ADD):
    assert [fn.__name__ for _, fn, _, _, _, direct in pm._candidates(op) if direct is None] == []
