"""Writes docs/tensor-api.md: every public Tensor method in one table (name, what it does, differences from tinygrad and
PyTorch), from the class itself. `python docs/tensor_api.py` regenerates it; tests/test_docs.py fails when it is stale.
What a method does comes from the first line of its docstring, else from SUMMARY below; a public method with neither is an
error, so nothing new goes undocumented."""
from __future__ import annotations
import inspect, pathlib, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "tensor-api.md"

# one line each, for methods whose docstring is missing (short elementwise ops, aliases, properties)
SUMMARY = {
  "T": "the transpose of a 2-D tensor (the last two axes reversed for more)", "abs": "absolute value", "acos": "arc cosine",
  "acosh": "inverse hyperbolic cosine", "add": "self + x, broadcast, with an optional alpha", "all": "True where every element (on an axis) is true",
  "allclose": "whether every element is close to the other's (isclose with rtol/atol)", "any": "True where some element (on an axis) is true",
  "argmin": "the index of the smallest element (on an axis)", "argsort": "the indices that sort the tensor along a dimension",
  "asin": "arc sine", "asinh": "inverse hyperbolic sine", "atanh": "inverse hyperbolic tangent",
  "bitcast": "the same bits read as another dtype of the same size", "bitwise_and": "bitwise and", "bitwise_not": "bitwise not",
  "bitwise_or": "bitwise or", "bitwise_xor": "bitwise exclusive or", "bool": "cast to bool", "cast": "cast to a dtype",
  "ceil": "round up", "celu": "continuously differentiable ELU", "chunk": "split into n pieces along a dimension",
  "clamp": "limit to [min, max]", "clip": "limit to [min, max] (alias of clamp)", "contiguous": "materialize in row-major order (a realize point)",
  "contiguous_backward": "make the gradient contiguous in the backward pass", "cos": "cosine", "cosh": "hyperbolic cosine",
  "cpu": "the tensor on the CPU device", "cumprod": "cumulative product along a dimension", "cumsum": "cumulative sum along a dimension",
  "data": "the realized bytes as a memoryview (a copy)", "detach": "the same values, cut from the autograd graph",
  "device": "the device the tensor lives on", "uop": "the tensor's graph node (a UOp)", "double": "cast to float64", "dtype": "the element type",
  "element_size": "bytes per element", "elu": "exponential linear unit", "empty_like": "an uninitialized tensor of the same shape",
  "eq": "elementwise ==", "exp": "e to the power", "exp2": "2 to the power", "expand_as": "broadcast to another tensor's shape",
  "expm1": "exp(x) - 1", "flatten": "merge dimensions start..end into one", "flip": "reverse along axes", "float": "cast to float32",
  "floor": "round down", "frac": "the fractional part, x - trunc(x)", "full": "a tensor filled with one value",
  "full_like": "a tensor of the same shape filled with one value", "ge": "elementwise >=", "glorot_uniform": "Glorot (Xavier) uniform init",
  "gt": "elementwise >", "half": "cast to float16", "hardsigmoid": "piecewise-linear sigmoid", "hardswish": "x * hardsigmoid(x)",
  "hardtanh": "clamp to [min_val, max_val]", "int": "cast to int32", "is_floating_point": "whether the dtype is a float",
  "isfinite": "True where neither inf nor nan", "isinf": "True where +-inf (selectable sign)", "isnan": "True where nan",
  "item": "the single element as a Python number", "kaiming_normal": "Kaiming (He) normal init", "le": "elementwise <=",
  "leaky_relu": "relu with a small negative slope", "lerp": "linear interpolation self + w * (end - self)",
  "linspace": "n evenly spaced values from start to stop", "log": "natural logarithm", "log10": "base-10 logarithm",
  "log1p": "log(1 + x)", "log2": "base-2 logarithm", "log_softmax": "log of softmax, computed stably", "logical_and": "elementwise and of truth values",
  "logical_not": "elementwise not of truth values", "logical_or": "elementwise or of truth values", "logical_xor": "elementwise xor of truth values",
  "logsigmoid": "log(sigmoid(x)), stable", "logsumexp": "log(sum(exp(x))) along an axis, stable", "long": "cast to int64",
  "lshift": "shift bits left", "lt": "elementwise <", "matmul": "matrix product (batched, broadcast)", "max": "largest element (on an axis)",
  "maximum": "elementwise max of two tensors", "mean": "mean (on an axis)", "min": "smallest element (on an axis)",
  "minimum": "elementwise min of two tensors", "mish": "x * tanh(softplus(x))", "moveaxis": "move a dimension to another position",
  "movedim": "move a dimension to another position (alias of moveaxis)", "mse_loss": "mean squared error against a target",
  "mul": "self * x, broadcast", "nbytes": "bytes the tensor's elements take", "ndim": "number of dimensions", "ne": "elementwise !=",
  "neg": "negation", "normal": "normal random values with mean and std", "numel": "number of elements",
  "numpy": "the values as a numpy array (a read-only view of host memory where possible)", "ones": "a tensor of ones",
  "ones_like": "ones of the same shape", "permute": "reorder dimensions", "prod": "product (on an axis)",
  "quick_gelu": "x * sigmoid(1.702 x)", "rand_like": "uniform random values of the same shape", "randn_like": "normal random values of the same shape",
  "reciprocal": "1 / x", "relu": "max(x, 0)", "relu6": "min(max(x, 0), 6)", "repeat_interleave": "repeat each element n times along a dimension",
  "replace": "make this tensor hold another's graph (same shape and dtype)", "requires_grad": "whether gradients flow to it (None: may need one)",
  "requires_grad_": "set requires_grad in place", "rms_norm": "x / sqrt(mean(x^2) + eps) over the last axis", "rsqrt": "1 / sqrt(x)",
  "scaled_uniform": "uniform init scaled by 1/sqrt(numel)", "selu": "scaled exponential linear unit", "sequential": "apply a list of layers in order",
  "shape": "the dimensions", "shrink": "keep a (start, end) range of each dimension (bounds may be bound Variables: docs/symbolic.md)", "sign": "-1, 0 or 1 by the sign (nan stays nan)",
  "silu": "x * sigmoid(x)", "sin": "sine", "sinh": "hyperbolic sine", "size": "the shape, or one dimension of it",
  "softmax": "exp(x) / sum(exp(x)) along an axis, stable", "softmin": "softmax of -x", "softsign": "x / (1 + |x|)",
  "split": "split into pieces of given sizes along a dimension", "sqrt": "square root", "square": "x * x",
  "squeeze": "drop size-1 dimensions", "stack": "join tensors along a new dimension", "std": "standard deviation (on an axis, with correction)",
  "std_mean": "(std, mean) together", "sub": "self - x, broadcast, with an optional alpha", "swish": "x * sigmoid(x) (alias of silu)",
  "tan": "tangent", "tanh": "hyperbolic tangent", "to_": "move this tensor to another device in place", "tolist": "the values as nested Python lists",
  "transpose": "swap two dimensions", "trunc": "round toward zero", "unbind": "split into the slices along a dimension",
  "unflatten": "split one dimension into several", "uniform": "uniform random values in [low, high)", "unsqueeze": "insert a size-1 dimension",
  "var": "variance (on an axis, with correction)", "var_mean": "(var, mean) together", "view": "reshape (alias)", "zeros": "a tensor of zeros",
  "zeros_like": "zeros of the same shape", "no_grad": "when True, new tensors don't track gradients (a class-level switch)",
  "CHUNK_SIZE": "bytes per chunk of fs_store's hash tree (default 1 MiB)",
  "training": "training mode (dropout, BatchNorm statistics, optimizer steps): the TRAINING setting, so Context(TRAINING=1) sets it too",
}

# where this framework's behaviour differs from tinygrad's or PyTorch's; everything else follows tinygrad
DIFFERENCES = {
  "numpy": "a read-only view of the tensor's memory on host devices (CPU, PYTHON), a copy elsewhere and for buffers a Jit rewrites; tinygrad and PyTorch hand out writable arrays",
  "__array__": "as numpy()",
  "from_blob": "the device must wrap host memory (CPU); tinygrad wraps any device's pointer",
  "from_dlpack": "numpy and torch CPU producers; device memory (CUDA capsules) is not taken",
  "__dlpack__": "always host memory (a copy from devices without host-visible memory)",
  "data": "a copy of the bytes (tinygrad: a memoryview of the buffer)",
  "fmod": "not exact when |x / y| is beyond float precision (1e20 fmod 3): no exact float remainder yet",
  "gather": "an index outside [0, n) reads 0, as in tinygrad (torch raises); CHECK_BOUNDS=1 raises IndexError (see Index bounds)",
  "one_hot": "a value outside [0, num_classes) gives an all-zero row, as in tinygrad; CHECK_BOUNDS=1 raises IndexError",
  "scatter": "an index outside [0, n) writes nothing; CHECK_BOUNDS=1 raises IndexError",
  "sparse_categorical_crossentropy": "a label outside [0, classes) (other than ignore_index) adds 0 to the loss; CHECK_BOUNDS=1 raises IndexError",
  "cross_entropy": "a label outside [0, classes) (other than ignore_index) adds 0 to the loss (torch raises); CHECK_BOUNDS=1 raises IndexError",
  "nll_loss": "a label outside [0, classes) (other than ignore_index) adds 0 to the loss (torch raises); CHECK_BOUNDS=1 raises IndexError",
  "fs_store": "BLAKE2b-128 chunk hashes in a local folder (CORE_FS_DIR); tinygrad hashes on the device and can use a remote store, so roots differ from tinygrad's",
  "fs_load": "reads the local store only (CORE_FS_DIR); a chunk that fails its hash raises core.tensor.fs.CorruptChunk",
  "training": "a class-level switch only (Tensor.training), not an attribute of each tensor",
  "pow": "the gradient is torch's at every point (d/db = y*b**(y-1), 0 where y is 0; d/dy = b**y*ln(b), 0 where b is 0 and y >= 0)",
  "interpolate": "uint8 linear modes compute as PyTorch's CPU kernel: per axis (last first) in fixed point, rounded half up",
  "bitwise_or": "a Python int operand beyond the tensor's int dtype promotes it (int32 | 0xFFFFFFFF is int64 4294967295; tinygrad and torch wrap to -1)",
  "full": "an int fill_value beyond int32 gives int64 (uint64 beyond that), as tinygrad's arange; one that doesn't fit an explicit dtype raises ValueError",
}

# the rules for bad input, after the tables
BAD_INPUT = """## Bad input and index bounds

Arguments: every public method checks its arguments. Types come from the method's annotations (core/tensor/validate.py wraps
each method when the class is built), so `t.unsqueeze([0])` raises `TypeError: Tensor.unsqueeze: argument 'dim' must be int,
got list [0]`; values are checked by the method (`avg_pool2d(0)`: `ValueError ... 'kernel_size[0]' must be >= 1`). Bad input
raises `TypeError`, `ValueError` or `IndexError` naming the method and the argument (some older checks raise `RuntimeError`,
as tinygrad and PyTorch do there); an allocation the device can't hold raises `core.device.allocator.OutOfMemory` (a
`MemoryError`) with the size and the device. tests/tensor/test_fuzz_api.py fuzzes the whole API to keep it that way.

Python indices (`t[5]`, `t[[0, 5, -9]]`) are checked: outside `[-n, n)` is an `IndexError`, negative ones wrap.

Tensor indices are values on the device, so they are not checked by default. The one rule, tinygrad's: an index or label
outside the valid range selects nothing and reads 0. `gather`, `scatter` and `one_hot` take `[0, n)`; fancy indexing
(`t[idx]`) first wraps `[-n, 0)` like numpy; the class labels of `sparse_categorical_crossentropy`, `cross_entropy` and
`nll_loss` take `[0, classes)` or `ignore_index`, and another label adds 0 to the loss (it still counts in the mean's
divisor of sparse_categorical_crossentropy). `CHECK_BOUNDS=1` (or `Context(CHECK_BOUNDS=1)`) checks them instead: when the
op is built, a reduction kernel on the index's device finds the first offending position and the op raises
`IndexError: Tensor.gather: index[1] = 7 is out of range for dim 0 of size 3`. It runs on every device and renderer (it is
ordinary tensor code, not a renderer feature), costs one small kernel and a read-back per indexing op, and is skipped while a
Jit captures (a replay would not repeat it). Why not a check inside the generated kernels: these ops never use an index
value as an address (each compares it with an arange and sums a one-hot mask), so no load or store of theirs has an
address out of range for a compiler to guard; a kernel would need the op's marker carried through the scheduler and an
error buffer the engine reads back. A kernel that does compute a wild address is a fault (README, "Threads, faults and
Ctrl-C").

Python scalars: an int beyond int32 becomes int64 (then uint64) where no dtype is given (`Tensor.full((2,), 2**40)`,
`Tensor(2**40)`, `Tensor([2**40])`); as an operand of an int tensor it promotes the op (`int32_t + 2**40` is int64,
`uint8_t == -1` compares in int32); an int that doesn't fit an explicitly given dtype, or any 64-bit dtype, raises
`ValueError`.
"""

# what tinygrad's own Tensor API tests show (tools/tinygrad_compat), after the bad-input rules
TINYGRAD_TESTS = """## Differences from tinygrad

`python tools/tinygrad_compat/run.py` runs tinygrad's own Tensor API test files, test/backend/test_ops.py (427 tests,
against PyTorch) and test/test_tiny.py (21), against core through a `tinygrad` shim that only maps names (docs/tinygrad-compat.md).
Measured on DEV=CPU: 418 of 427 and 19 of 21 pass, 437 of 448 (97.5%); of the 439 that tinygrad itself runs on its CPU
device, 437 (99.5%). Every test that does not pass, and why:

| test | why |
|---|---|
| `test_ops` `TestOps.test_int_or` | deliberate: a Python int that doesn't fit the tensor's int dtype promotes the op (`int32 \\| 0xFFFFFFFF` is int64 4294967295, see "Python scalars" above); tinygrad and torch wrap it to int32 (-1), numpy raises OverflowError |
| `test_ops` `TestOps.test_sigmoid_alt_extreme` | deliberate: `exp(300) / (1 + exp(300))` is inf/inf, NaN in IEEE float32 as in numpy and torch (value and gradient); tinygrad's simplifier rewrites `x * (1/(1+x))` to `1 - 1/(1+x)` and gets 1 with gradient 0. `Tensor.sigmoid` itself is exact at any input |
| `test_ops` `test_max_nan`, `test_pow_int`, `test_large_bs_conv`, `test_large_ic_conv`, `test_sd_big_conv`, `test_conv2d_bs_4_cin_1`, `test_conv2d_bs_4_cin_3` | skipped by the file itself on every device (`@unittest.skip`: broken, not supported, slow, redundant) |
| `test_tiny` `test_image`, `test_beam_image` | skipped by the file itself off tinygrad's CL device (IMAGE kernels) |
"""

SECTIONS = [("CreationMixin", "Creation"), ("RandomMixin", "Random numbers"), ("MovementMixin", "Movement"), ("IndexingMixin", "Indexing"),
            ("ElementwiseMixin", "Elementwise"), ("ReduceMixin", "Reductions"), ("SortMixin", "Sorting"), ("ConvMixin", "Convolutions and pooling"),
            ("NNOpsMixin", "Neural-network ops and losses"), ("InteropMixin", "Interop"),
            ("StoreMixin", "Content-addressed storage"), ("Tensor", "Tensor itself: data, autograd, devices")]

def _owner(cls: type, name: str) -> str:
  # a name no class in the MRO holds is the metaclass's (Tensor.training)
  return next((c.__name__ for c in cls.__mro__ if name in c.__dict__), "Tensor")

def _summary(cls: type, name: str) -> str:
  # a plain value (CHUNK_SIZE, no_grad) has its type's docstring, not its own
  static = inspect.getattr_static(cls, name)
  own = callable(static) or isinstance(static, (property, classmethod, staticmethod))
  doc = (inspect.getdoc(getattr(cls, name)) if own else "") or ""
  first = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
  if first and not (isinstance(inspect.getattr_static(cls, name), property) and name in SUMMARY): return first
  if name in SUMMARY: return SUMMARY[name]
  raise ValueError(f"Tensor.{name} has no docstring and no entry in docs/tensor_api.py SUMMARY: document it")

def render() -> str:
  sys.path.insert(0, str(ROOT))
  from core.tensor.tensor import Tensor
  names = sorted(n for n in dir(Tensor) if not n.startswith("_")) + ["__array__", "__dlpack__", "training"]
  out = ["# The Tensor API", "",
         "Every public method and property of `core.Tensor`, generated from the class by `python docs/tensor_api.py` (a test",
         "fails when this page is stale). Names, arguments, broadcasting and dtype promotion follow tinygrad's Tensor, which",
         "mostly matches PyTorch's; the last column says where this framework differs.", ""]
  if (lost := [n for n in names if _owner(Tensor, n) not in dict(SECTIONS)]):
    raise ValueError(f"no section of docs/tensor_api.py SECTIONS holds {lost} (from {sorted({_owner(Tensor, n) for n in lost})})")
  for owner, title in SECTIONS:
    mine = [n for n in names if _owner(Tensor, n) == owner]
    if not mine: continue
    out += [f"## {title}", "", "| name | what it does | differences |", "|---|---|---|"]
    for n in mine:
      text = _summary(Tensor, n).replace("|", "\\|")
      out.append(f"| `{n}` | {text} | {DIFFERENCES.get(n, 'as tinygrad').replace('|', chr(92) + '|')} |")
    out.append("")
  return "\n".join(out + [BAD_INPUT, TINYGRAD_TESTS])

if __name__ == "__main__":
  OUT.write_text(render())
  print(f"wrote {OUT}")
