"""The host <metal_stdlib> and the MOCK's host builds, on hand-written MSL: bfloat rounding and threadgroup barriers."""
from __future__ import annotations
import ctypes
import numpy as np
from metal_tools import need_cxx

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
POS = "uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]"

def _addr(a: np.ndarray) -> int: return a.ctypes.data

def test_float_to_bfloat_rounds_to_nearest_even() -> None:
  need_cxx()
  from plugin_metal.hostbuild import host_kernel
  src = HEAD + f"kernel void to_bf(device bfloat* out [[buffer(0)]], device float* x [[buffer(1)]], {POS}) {{ out[lid.x] = (bfloat)(x[lid.x]); }}\n"
  rng = np.random.default_rng(0)
  bits = np.concatenate([rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32),
                         np.array([0x3f808000, 0x3f818000, 0x3f80c000, 0x7f7fffff, 0x00008000, 0x80018000], np.uint32)])
  bits = bits[~np.isnan(bits.view(np.float32))]
  x = bits.view(np.float32).copy()
  out = np.zeros(len(x), np.uint16)
  host_kernel("to_bf", src).dispatch([_addr(out), _addr(x)], (1, 1, 1), (len(x), 1, 1))
  # reference: of the two bfloats around x (x truncated, and one step further from zero) the nearer one, ties to the even one
  lo = (bits >> 16).astype(np.uint32)
  hi = lo + 1
  def val(b: np.ndarray) -> np.ndarray:
    # one step past the largest finite bfloat is 2**128 (IEEE rounds to inf from beyond the midpoint below it)
    v = (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.where((b & 0x7fff) == 0x7f80, np.copysign(2.0 ** 128, v), v)
  dlo, dhi = np.abs(x.astype(np.float64) - val(lo)), np.abs(val(hi) - x.astype(np.float64))
  want = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi))).astype(np.uint16)
  np.testing.assert_array_equal(out, want)

def test_threadgroup_barrier_lets_every_thread_see_the_others_writes() -> None:
  need_cxx()
  from plugin_metal.hostbuild import host_kernel
  # each round: every thread stores, a barrier, each reads its mirror thread's value, a barrier before the next round's stores
  src = HEAD + f"""kernel void mirror(device int* out [[buffer(0)]], constant int& rounds [[buffer(1)]], {POS}) {{
  threadgroup int temp0[64];
  int v = (int)lid.x + 1000 * (int)gid.x;
  for (int r = 0; r < rounds; r++) {{
    temp0[lid.x] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    v = temp0[63 - lid.x] + 1;
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }}
  out[gid.x * 64 + lid.x] = v;
}}
"""
  out = np.zeros(3 * 64, np.int32)
  rounds = ctypes.c_int32(3)
  host_kernel("mirror", src).dispatch([_addr(out), ctypes.addressof(rounds)], (3, 1, 1), (64, 1, 1))
  want = []
  for g in range(3):
    v = np.arange(64) + 1000 * g
    for _ in range(3): v = v[::-1] + 1
    want.append(v)
  np.testing.assert_array_equal(out, np.concatenate(want))
