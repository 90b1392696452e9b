"""Helpers for the NV plugin tests: hand-linearized kernels (built with core.testing.kernels), a cubin's ELF header fields, and a
numpy evaluator of ALU graphs."""
from __future__ import annotations
import functools, struct
from fractions import Fraction
from typing import Any
import numpy as np
from core.ir.dtype import DType, dtypes
from core.ir.ops import UOp, Ops
from core.testing.kernels import lds_kernel, loop_kernel as core_loop_kernel

ARCH_NAMES = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]

def shared_kernel(threads: int = 128, blocks: int = 8) -> list[UOp]:
  """out[b*T + t] = in[b*T + (T-1-t)]: each block reverses its slice through shared memory (core's LDS kernel)."""
  return lds_kernel(local=threads, groups=blocks)

def loop_kernel(dt: DType = dtypes.float32) -> list[UOp]:
  """out[g] = sum_i in[g*8 + i] * n: core's loop kernel without a unary op (a register accumulator, a loop, a variable)."""
  return core_loop_kernel(dt, None)

def elf_header(cubin: bytes) -> dict[str, int]:
  """The ELF64 header fields the tests check (System V gABI layout): class, data, ABI version, e_machine, e_flags."""
  assert cubin[:4] == b"\x7fELF", cubin[:16]
  return {"class": cubin[4], "data": cubin[5], "osabi": cubin[7], "abiversion": cubin[8], "machine": struct.unpack_from("<H", cubin, 18)[0],
          "flags": struct.unpack_from("<I", cubin, 48)[0]}

def cubin_sm(cubin: bytes) -> int:
  """The SM number in a cubin's e_flags, as LLVM's ELFObjectFileBase::getNVPTXCPUName reads it: ABI version 7 (CUDA before
  12.8/13) keeps it in the low byte (EF_CUDA_SM = 0xff), ABI version 8 in bits 8..15 (EF_CUDA_SM_MASK 0xff00, offset 8)."""
  h = elf_header(cubin)
  return h["flags"] & 0xff if h["abiversion"] == 7 else (h["flags"] & 0xff00) >> 8

# *** evaluate a graph of ALU uops on numpy arrays (the decompositions are checked against numpy this way) ***

_NP = {dtypes.float64: np.float64, dtypes.float32: np.float32, dtypes.float16: np.float16, dtypes.int64: np.int64, dtypes.int32: np.int32,
       dtypes.uint32: np.uint32, dtypes.uint64: np.uint64, dtypes.int16: np.int16, dtypes.uint16: np.uint16, dtypes.bool: np.bool_}
_BIN = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal,
        Ops.CMPEQ: np.equal, Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor, Ops.SHL: np.left_shift,
        Ops.SHR: np.right_shift, Ops.NEG: np.negative, Ops.TRUNC: np.trunc, Ops.MAX: np.maximum, Ops.SQRT: np.sqrt}

def _fma(a: Any, b: Any, c_: Any, t: Any) -> Any:
  """A fused multiply-add rounded once, as the GPU's fma.rn does: exact rational arithmetic for float64, float64 for float32."""
  if t is not np.float64: return (np.float64(a) * b + c_).astype(t)
  a, b, c_ = np.broadcast_arrays(a, b, c_)
  out = [float(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r))) if np.isfinite(p) and np.isfinite(q) and np.isfinite(r)
         else p * q + r for p, q, r in zip(a.ravel(), b.ravel(), c_.ravel())]
  return np.array(out, np.float64).reshape(a.shape)

def evaluate(root: UOp, env: dict[UOp, np.ndarray]) -> np.ndarray:
  """The value of `root` with the leaves in `env` bound to arrays (scalar dtypes; the ops the NV decompositions emit)."""
  val: dict[UOp, Any] = {}
  for u in root.toposort():
    s, t = [val[x] for x in u.src], _NP.get(u.dtype.scalar())
    if u in env: v = env[u]
    elif u.op is Ops.CONST: v = t(u.arg)
    elif u.op is Ops.CAST: v = np.asarray(s[0]).astype(t)
    elif u.op is Ops.BITCAST: v = np.asarray(s[0]).view(t)
    elif u.op is Ops.MULACC: v = _fma(s[0], s[1], s[2], t)
    elif u.op is Ops.WHERE: v = np.where(s[0], s[1], s[2]).astype(t)
    else:
      with np.errstate(all="ignore"): v = _BIN[u.op](*s)
      if u.op not in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ): v = np.asarray(v).astype(t)
    val[u] = v
  return np.asarray(val[root])

@functools.cache
def have_ptxas() -> bool:
  from plugin_nv.compiler import find_ptxas
  return find_ptxas() is not None

def have_nvrtc() -> bool:
  from plugin_nv.compiler import find_nvrtc
  return find_nvrtc() is not None
