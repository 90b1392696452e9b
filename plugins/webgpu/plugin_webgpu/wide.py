"""int64 and uint64 in WGSL, which has no 64-bit integers: a value is a `vec2<u32>` (x the low word, y the high word, the
little-endian layout of the buffer's 8 bytes), and each operation is a helper function in 32-bit arithmetic."""
from __future__ import annotations
from core.ir.dtype import DType, dtypes
from core.ir.ops import Ops

WIDE = frozenset({dtypes.int64, dtypes.uint64})
WIDE_TYPE = "vec2<u32>"

def is_wide(dt: DType) -> bool: return dt.scalar() in WIDE

HELPERS_WIDE = """fn core_add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { let lo = a.x + b.x; return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x)); }
fn core_sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x)); }
fn core_neg64(a: vec2<u32>) -> vec2<u32> { return core_sub64(vec2<u32>(0u, 0u), a); }
fn core_isneg64(a: vec2<u32>) -> bool { return (a.y >> 31u) == 1u; }
fn core_abs64(a: vec2<u32>) -> vec2<u32> { return select(a, core_neg64(a), core_isneg64(a)); }
fn core_mulhi32(a: u32, b: u32) -> u32 {
  let al = a & 0xffffu; let ah = a >> 16u; let bl = b & 0xffffu; let bh = b >> 16u;
  let lh = al * bh; let hl = ah * bl;
  let mid = ((al * bl) >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  return ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}
fn core_mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return vec2<u32>(a.x * b.x, core_mulhi32(a.x, b.x) + a.x * b.y + a.y * b.x); }
fn core_ltu64(a: vec2<u32>, b: vec2<u32>) -> bool { return select(a.x < b.x, a.y < b.y, a.y != b.y); }
fn core_lti64(a: vec2<u32>, b: vec2<u32>) -> bool { return select(a.x < b.x, bitcast<i32>(a.y) < bitcast<i32>(b.y), a.y != b.y); }
fn core_shl64(a: vec2<u32>, n: u32) -> vec2<u32> {
  let s = n & 63u;
  if (s == 0u) { return a; }
  if (s >= 32u) { return vec2<u32>(0u, a.x << (s - 32u)); }
  return vec2<u32>(a.x << s, (a.y << s) | (a.x >> (32u - s)));
}
fn core_shru64(a: vec2<u32>, n: u32) -> vec2<u32> {
  let s = n & 63u;
  if (s == 0u) { return a; }
  if (s >= 32u) { return vec2<u32>(a.y >> (s - 32u), 0u); }
  return vec2<u32>((a.x >> s) | (a.y << (32u - s)), a.y >> s);
}
fn core_shri64(a: vec2<u32>, n: u32) -> vec2<u32> {
  let s = n & 63u; let h = bitcast<i32>(a.y);
  if (s == 0u) { return a; }
  if (s >= 32u) { return vec2<u32>(bitcast<u32>(h >> (s - 32u)), bitcast<u32>(h >> 31u)); }
  return vec2<u32>((a.x >> s) | (a.y << (32u - s)), bitcast<u32>(h >> s));
}
fn core_divu64(n: vec2<u32>, d: vec2<u32>) -> vec2<u32> {
  if (d.x == 0u && d.y == 0u) { return vec2<u32>(0u, 0u); }
  var q = vec2<u32>(0u, 0u);
  var r = vec2<u32>(0u, 0u);
  for (var i: u32 = 0u; i < 64u; i++) {
    let b = 63u - i;
    r = core_shl64(r, 1u);
    r.x = r.x | (select(n.x >> b, n.y >> (b - 32u), b >= 32u) & 1u);
    if (!core_ltu64(r, d)) {
      r = core_sub64(r, d);
      if (b >= 32u) { q.y = q.y | (1u << (b - 32u)); } else { q.x = q.x | (1u << b); }
    }
  }
  return q;
}
fn core_modu64(n: vec2<u32>, d: vec2<u32>) -> vec2<u32> {
  if (d.x == 0u && d.y == 0u) { return vec2<u32>(0u, 0u); }
  return core_sub64(n, core_mul64(core_divu64(n, d), d));
}
fn core_divi64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let q = core_divu64(core_abs64(a), core_abs64(b));
  return select(q, core_neg64(q), core_isneg64(a) != core_isneg64(b));
}
fn core_modi64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let r = core_modu64(core_abs64(a), core_abs64(b));
  return select(r, core_neg64(r), core_isneg64(a));
}
fn core_i32_64(x: i32) -> vec2<u32> { return vec2<u32>(bitcast<u32>(x), select(0u, 0xffffffffu, x < 0)); }
fn core_u64_f32(a: vec2<u32>) -> f32 { return f32(a.y) * 4294967296.0f + f32(a.x); }
fn core_i64_f32(a: vec2<u32>) -> f32 { let f = core_u64_f32(core_abs64(a)); return select(f, -f, core_isneg64(a)); }
fn core_f32_u64(x: f32) -> vec2<u32> { let t = trunc(abs(x)); let hi = floor(t / 4294967296.0f); return vec2<u32>(u32(t - hi * 4294967296.0f), u32(hi)); }
fn core_f32_i64(x: f32) -> vec2<u32> { let m = core_f32_u64(x); return select(m, core_neg64(m), x < 0.0f); }"""

def wide_const(v: int) -> str:
  v &= (1 << 64) - 1
  return f"vec2<u32>({v & 0xffffffff}u, {v >> 32}u)"

def wide_alu(op: Ops, srcs: list[str], src_dtypes: list[DType], dt: DType) -> str:
  """One ALU op with a 64-bit integer operand or result, on rendered operands."""
  sd = src_dtypes[1].scalar() if op is Ops.WHERE else src_dtypes[0].scalar()
  sgn = "i" if sd is dtypes.int64 else "u"
  a, b = srcs[0], srcs[1] if len(srcs) > 1 else ""
  if op is Ops.ADD: return f"core_add64({a}, {b})"
  if op is Ops.SUB: return f"core_sub64({a}, {b})"
  if op is Ops.MUL: return f"core_mul64({a}, {b})"
  if op is Ops.MULACC: return f"core_add64(core_mul64({a}, {b}), {srcs[2]})"
  if op is Ops.NEG: return f"core_neg64({a})"
  if op in (Ops.AND, Ops.OR, Ops.XOR): return f"({a} {({Ops.AND: '&', Ops.OR: '|', Ops.XOR: '^'})[op]} {b})"
  if op in (Ops.SHL, Ops.SHR):
    n = f"{b}.x" if is_wide(src_dtypes[1]) else f"u32({b})"
    return f"core_shl64({a}, {n})" if op is Ops.SHL else f"core_shr{sgn}64({a}, {n})"
  if op is Ops.CMPLT: return f"core_lt{sgn}64({a}, {b})"
  if op is Ops.CMPEQ: return f"all({a} == {b})"
  if op is Ops.CMPNE: return f"any({a} != {b})"
  if op is Ops.MAX: return f"select({b}, {a}, core_lt{sgn}64({b}, {a}))"
  if op is Ops.WHERE: return f"select({srcs[2]}, {b}, {a})"
  if op is Ops.IDIV: return f"core_div{sgn}64({a}, {b})"
  if op is Ops.MOD: return f"core_mod{sgn}64({a}, {b})"
  raise NotImplementedError(f"WGSL: {op.name} of {sd.name} is not emulated")

def wide_cast(dt: DType, from_dt: DType, x: str, value_type: str) -> str:
  """A cast to or from a 64-bit integer; `value_type` is the WGSL type of the non-wide side."""
  if is_wide(dt) and is_wide(from_dt): return x
  if is_wide(dt):
    if from_dt is dtypes.bool: return f"vec2<u32>(select(0u, 1u, {x}), 0u)"
    if value_type == "i32": return f"core_i32_64({x})"
    if value_type == "u32": return f"vec2<u32>({x}, 0u)"
    return f"core_f32_{'i' if dt.scalar() is dtypes.int64 else 'u'}64(f32({x}))"
  if dt is dtypes.bool: return f"any({x} != vec2<u32>(0u, 0u))"
  if value_type == "i32": return f"bitcast<i32>({x}.x)"
  if value_type == "u32": return f"{x}.x"
  f = f"core_{'i' if from_dt.scalar() is dtypes.int64 else 'u'}64_f32({x})"
  return f if value_type == "f32" else f"core_to_f16({f})"
