"""The argument checks' plain-int fast paths (check_int, check_ints, check_shape: a conv builds a dozen shapes per call) give
the same values and errors as the general checks, and pad skips its crop only when no amount is negative."""
from __future__ import annotations
import numpy as np
import pytest
import core.tensor.validate as V
from core import Tensor

def test_plain_ints_take_no_abc_check(monkeypatch: pytest.MonkeyPatch) -> None:
  # the general path's per-value check: plain ints must not reach it (its numbers.Integral test is an ABC instance check)
  def no_check(*a: object, **k: object) -> int: raise AssertionError("per-value check on a plain int")
  monkeypatch.setattr(V, "check_int", no_check)
  assert V.check_ints("conv2d", "stride", 2, lo=1, n=2) == (2, 2)
  assert V.check_ints("conv2d", "stride", [1, 3], lo=1, n=2) == (1, 3)
  assert V.check_shape("reshape", "shape", [2, 0, 7]) == (2, 0, 7)

@pytest.mark.parametrize("v, want", [(3, (3, 3)), ((1, 2), (1, 2)), (np.int64(2), (2, 2)), ((np.int32(1), 4), (1, 4))])
def test_check_ints_values(v: object, want: tuple[int, ...]) -> None:
  got = V.check_ints("conv2d", "stride", v, lo=1, n=2)
  assert got == want and all(type(x) is int for x in got)

@pytest.mark.parametrize("v, err, text", [
  (0, ValueError, "'stride[0]' must be >= 1, got 0"), ((1, 0), ValueError, "'stride[1]' must be >= 1, got 0"),
  (True, TypeError, "must be an int or a sequence of ints"), ((1, True), TypeError, "'stride[1]' must be an int, got bool"),
  ((1, 2.0), TypeError, "'stride[1]' must be an int, got float"), ((1, 2, 3), ValueError, "must have 1 or 2 values, got 3"),
])
def test_check_ints_errors(v: object, err: type, text: str) -> None:
  with pytest.raises(err, match=text.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")):
    V.check_ints("conv2d", "stride", v, lo=1, n=2)

def test_check_int_values_and_errors() -> None:
  assert V.check_int("m", "a", 5, lo=1, hi=5) == 5 and type(V.check_int("m", "a", np.int16(3))) is int
  with pytest.raises(ValueError, match=r"must be in \[1, 4\], got 5"): V.check_int("m", "a", 5, lo=1, hi=4)
  with pytest.raises(TypeError, match="must be an int, got bool"): V.check_int("m", "a", False)

@pytest.mark.parametrize("shape, allow, want", [((2, 3), (), (2, 3)), ([np.int64(4), 1], (), (4, 1)), ((-1, 6), (-1, None), (-1, 6)),
                                                ((None, 2), (-1, None), (None, 2))])
def test_check_shape_values(shape: tuple, allow: tuple, want: tuple) -> None:
  assert V.check_shape("reshape", "shape", shape, allow) == want

@pytest.mark.parametrize("shape, err, text", [((2, -1), ValueError, "sizes >= 0, but dim 1 is -1"), ((True, 2), TypeError, "dim 0 is bool"),
                                              ((2, 1.0), TypeError, "dim 1 is float"), (5, TypeError, "must be a sequence of ints")])
def test_check_shape_errors(shape: object, err: type, text: str) -> None:
  with pytest.raises(err, match=text): V.check_shape("reshape", "shape", shape)

@pytest.mark.parametrize("pads", [((1, 2), (0, 3)), ((-1, 2), (1, -2)), ((0, 0), (0, 0)), ((-2, -1), (0, 0))])
def test_pad_with_and_without_crops(pads: tuple) -> None:
  x = np.arange(5 * 6, dtype=np.float32).reshape(5, 6)
  want = np.pad(x, [(max(b, 0), max(a, 0)) for b, a in pads])
  want = want[max(-pads[0][0], 0):want.shape[0] - max(-pads[0][1], 0), max(-pads[1][0], 0):want.shape[1] - max(-pads[1][1], 0)]
  np.testing.assert_array_equal(Tensor(x).pad(pads).numpy(), want)

@pytest.mark.parametrize("shape", [(6, 5), (30,), (2, 3, 5), (-1, 10), (None, 3, 2), (5, 0 + 6)])
def test_reshape_values(shape: tuple) -> None:
  x = np.arange(30, dtype=np.float32).reshape(5, 6)
  want = x.reshape([x.shape[i] if d is None else d for i, d in enumerate(shape)])
  np.testing.assert_array_equal(Tensor(x).reshape(shape).numpy(), want)

def test_reshape_size_mismatch_names_both_counts() -> None:
  with pytest.raises(ValueError, match=r"reshape \(5, 6\) -> \(4, 7\): sizes differ \(30 vs 28 elements\)"): Tensor.zeros(5, 6).reshape(4, 7)
