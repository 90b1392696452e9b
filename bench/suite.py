"""The benchmark suite of issue 7: every row for this project and, in the same process, numpy, torch and tinygrad when
importable; prints absolute figures, the ratio each target is stated in, and our first-call (compile) times.
Run: python bench/suite.py [--quick] [--rows matmul1024,sum] [--repeat 10] [--rounds 3] [--threads] [--isa avx2]   (the device: DEV)

Fairness: a cell (one framework on one row) starts only once the process's other threads are quiet (suite_libs.settle: our
pool parked, every library's polling workers asleep, at most 1 s): a numpy matmul's OpenBLAS workers poll ~0.1 s after it and
torch's libgomp workers ~10 ms, and a cell started meanwhile shared a core with them (the float64 references, computed before
a row's cells, run numpy's BLAS too). --rounds N runs the whole list of rows N times, round after round, so a slow spell of
the machine (other processes) hits every row and framework alike instead of the rows that happened to run then; a cell's
figure is then the median of its rounds, printed with their range [min-max]; every round is checked against the reference,
and the machine's own loops (the bandwidth and peak the rows are judged against) run again each round, their medians taken.
The bandwidth rows go further, as this VM's memory bandwidth changes between spells of minutes: each row's frameworks and the
machine's loop at the row's footprint are timed in turn, sample after sample (paired), and each ratio is the median of the
per-sample ratios, printed with their range and the spell the samples fell in."""
from __future__ import annotations
import argparse, contextlib, math, os, random, statistics, subprocess, sys, time, traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, TextIO

@dataclass(frozen=True)
class Isa:
  """An instruction set older than this CPU's that --isa holds the whole run to: ours renders and compiles for a CPU model that
  has it, each peer is held to it by its own variables (set before it loads), the machine's loops use its vectors. The code and
  the tiles such a host gets, run on this one: its caches, clocks, memory and cores stay this machine's."""
  arch: str                    # the CPU model ours renders for (DEV=CPU:<renderer>:<arch>, plugin_cpu.compiler.arch_flags)
  lanes: int                   # float32 lanes of its vectors: the FMA peak and bandwidth loops (bench/machine.py) use them
  peer_env: dict[str, str]     # the peers' own switches, set in the child process before anything loads
  blas_kernel: str             # the kernel numpy's OpenBLAS then reports (threadpoolctl)
  torch_capability: str        # torch.backends.cpu.get_cpu_capability() then
  onednn_isa: str              # oneDNN's verbose "isa:" line then

# znver3: the 2-core Zen 3 whose AVX2 figures issue 23 quotes; OpenBLAS's Haswell kernel is its AVX2 one, MKL (torch's BLAS) names
# no kernel it runs, so its switch is set but not checked
ISAS = {"avx2": Isa("znver3", 8, {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                  "MKL_ENABLE_INSTRUCTIONS": "AVX2"}, "Haswell", "AVX2", "Intel AVX2")}
ISA_VAR = "BENCH_ISA"   # names the ISA in the child process --isa runs in (main); set by nothing else

# peers at their best: older OpenBLAS builds needed these, but they hold a current numpy to an older, slower kernel (a 2048
# matmul on a Zen 5: 248 GFLOP/s with them, 457 without); they must go before numpy loads its BLAS. An --isa child keeps the
# ones its parent set (isa_env)
BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if not os.environ.get(ISA_VAR):
  for _var in BLAS_VARS: os.environ.pop(_var, None)
import numpy as np  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))                    # bench/suite_libs.py, bench/machine.py
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # core from a checkout
from suite_libs import LOADERS, Case, NotApplicable, conv_reference, fused_reference, jit_reference, mlp_reference  # noqa: E402
import suite_libs  # noqa: E402
import suite_models as models  # noqa: E402
import machine as machine_bench  # noqa: E402

F32 = np.float32

@dataclass
class Row:
  """One line of the table (issue 7's rows at issue 23's targets). `ref` is the peer the target's ratio is taken against ("copy", "read", "triad": that memory
  bandwidth measured in the same run; None: an absolute target). `bw` names the bandwidth a GB/s row is also judged against
  (its access pattern: a reduction reads, a copy or a normalization reads and writes once, a*b+1 is a triad), at `bw_target`."""
  key: str
  unit: str                                   # GFLOP/s, GB/s: higher is better; ms, us: lower is better
  ref: str | None
  target: float
  sizes: tuple[dict[str, Any], dict[str, Any]]   # (full, --quick)
  describe: Callable[[dict[str, Any]], str]
  data: Callable[[dict[str, Any], np.random.Generator], dict[str, Any]]
  reference: Callable[[dict[str, Any]], Any]
  work: Callable[[dict[str, Any]], float] | None = None   # FLOPs or bytes of one operation (throughput rows)
  select: Callable[[Any], Any] = lambda got: got          # the part of a result the reference covers
  rtol: float = 1e-3
  atol_rel: float = 1e-4                                  # absolute tolerance, as a fraction of the reference's max |value|
  op: str = ""                                            # the frameworks' method that builds the row (default: key)
  bw: str | None = None
  bw_target: float = 0.9
  peak_target: float = 0.0                                # a GFLOP/s row must also reach this fraction of the FMA peak
  @property
  def higher_better(self) -> bool: return self.unit.endswith("/s")

def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray: return rng.standard_normal(shape, dtype=F32)

def _matmul_data(s: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
  return {"a": _normal(rng, s["n"], s["n"]), "b": _normal(rng, s["n"], s["n"])}

def _bf16_exact(x: np.ndarray) -> np.ndarray:
  """x rounded to the nearest bfloat16 (ties to even), kept as float32: inputs every framework converts to bfloat16 exactly."""
  bits = x.view(np.uint32)
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(F32)

def _matmul_bf16_data(s: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
  return {k: _bf16_exact(v) for k, v in _matmul_data(s, rng).items()}

def _conv_data(s: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
  k, g = s.get("k", 3), s.get("groups", 1)
  return {"x": _normal(rng, s["n"], s["c"], s["hw"], s["hw"]), "w": _normal(rng, s["o"], s["c"] // g, k, k) / F32(math.sqrt(k * k * s["c"] / g)),
          **{a: s[a] for a in ("stride", "padding", "groups") if a in s}}

def _conv_out(s: dict[str, Any]) -> int: return (s["hw"] + 2 * s.get("padding", 1) - s.get("k", 3)) // s.get("stride", 1) + 1

def _conv_flops(s: dict[str, Any]) -> float: return 2 * s["n"] * s["o"] * _conv_out(s) ** 2 * s["c"] // s.get("groups", 1) * s.get("k", 3) ** 2

def _conv_describe(s: dict[str, Any]) -> str:
  k, st, p, g = s.get("k", 3), s.get("stride", 1), s.get("padding", 1), s.get("groups", 1)
  return (f"conv2d {s['n']}x{s['c']}x{s['hw']}x{s['hw']} {k}x{k} {s['c']}->{s['o']}" + (f" stride {st}" if st != 1 else "") +
          (f" pad {p}" if p else "") + (" depthwise" if g == s["c"] and g > 1 else f" groups {g}" if g != 1 else ""))

def _conv_row(key: str, target: float, full: dict[str, Any], quick: dict[str, Any]) -> Row:
  """A conv2d row against torch; checked on the first and last image (a float64 reference of all would cost more than the row)."""
  return Row(key, "GFLOP/s", "torch", target, (full, quick), _conv_describe, _conv_data,
             lambda d: conv_reference(d["x"][[0, -1]], d["w"], d.get("stride", 1), d.get("padding", 1), d.get("groups", 1)),
             work=_conv_flops, select=lambda got: got[[0, -1]], op="conv2d")

def _permute_row(key: str, order: tuple[int, ...], what: str, full: tuple[int, ...], quick: tuple[int, ...]) -> Row:
  """A layout change (a permute made contiguous), judged against the copy bandwidth measured in the same run: it moves the
  same bytes as a copy."""
  return Row(key, "GB/s", "copy", 0.8, ({"shape": full}, {"shape": quick}), lambda s: f"{what} {'x'.join(map(str, s['shape']))} float32",
             lambda s, rng: {"x": _normal(rng, *s["shape"]), "order": order}, lambda d: d["x"].transpose(d["order"]),
             work=lambda s: 2 * 4 * math.prod(s["shape"]), op="permute", atol_rel=0, rtol=0, bw="copy")

def _rows_data(s: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
  """A (rows, cols) input and, for layernorm, its weight and bias (not 1 and 0, so a kernel that drops them fails the check)."""
  return {"x": _normal(rng, s["rows"], s["cols"]) * F32(3), "w": _normal(rng, s["cols"]), "b": _normal(rng, s["cols"])}

def _softmax_reference(d: dict[str, Any]) -> np.ndarray:
  x = d["x"].astype(np.float64)
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def _layernorm_reference(d: dict[str, Any]) -> np.ndarray:
  x = d["x"].astype(np.float64)
  y = x - x.mean(-1, keepdims=True)
  return y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5) * d["w"] + d["b"]

def _rows_row(key: str, what: str, reference: Callable[[dict[str, Any]], Any], full: tuple[int, int], quick: tuple[int, int]) -> Row:
  """A last-axis normalization of a (rows, cols) float32 input against torch; it reads the input once and writes the output
  once at best (a row fits in cache between the reduction and the elementwise pass), so it is judged against the copy bandwidth."""
  return Row(key, "GB/s", "torch", 1.0, ({"rows": full[0], "cols": full[1]}, {"rows": quick[0], "cols": quick[1]}),
             lambda s: f"{what} {s['rows']}x{s['cols']} float32, last axis", _rows_data, reference,
             work=lambda s: 2 * 4 * s["rows"] * s["cols"], rtol=1e-4, atol_rel=1e-5, bw="copy")

def _resnet_name(s: dict[str, Any]) -> str:
  return "ResNet-18" if s.get("blocks") is None and s["width"] == 64 else f"ResNet, blocks {s.get('blocks', (2, 2, 2, 2))} width {s['width']}"

def _mlp_data(s: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
  dims, params = s["dims"], []
  for i, o in zip(dims, dims[1:]):
    bound = F32(1 / math.sqrt(i))
    params += [rng.uniform(-bound, bound, (i, o)).astype(F32), rng.uniform(-bound, bound, (o,)).astype(F32)]
  return {"params": params, "x": _normal(rng, s["batch"], dims[0]), "y": rng.integers(0, dims[-1], s["batch"]).astype(np.int32),
          "lr": 0.01, "steps": 3}

def _compile_data(s: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
  # sizes drawn per process (not from the seeded generator) so a peer's own disk cache from an earlier run can't serve them
  base = random.Random().randrange(1000, 200_000)
  return {"inputs": [(_normal(rng, base + i), _normal(rng, base + i), _normal(rng, base + i), 2 + i / 1024) for i in range(s["calls"])]}

ROWS: list[Row] = [
  Row("matmul1024", "GFLOP/s", "numpy", 1.0, ({"n": 1024}, {"n": 64}), lambda s: f"matmul {s['n']} float32", _matmul_data,
      lambda d: d["a"].astype(np.float64) @ d["b"], work=lambda s: 2 * s["n"] ** 3, op="matmul", peak_target=0.85),
  Row("matmul2048", "GFLOP/s", "numpy", 1.0, ({"n": 2048}, {"n": 128}), lambda s: f"matmul {s['n']} float32", _matmul_data,
      lambda d: d["a"].astype(np.float64) @ d["b"], work=lambda s: 2 * s["n"] ** 3, op="matmul", peak_target=0.85),
  # issue 23.4: bfloat16 inputs, float32 sums (the reference is exact on the bf16 values: the tolerance allows a product rounded
  # to bf16 or a bf16 result, not an error in the inputs); judged against our float32 row of the same size, run just before
  Row("matmul_bf16", "GFLOP/s", "matmul1024", 1.5, ({"n": 1024}, {"n": 64}), lambda s: f"matmul {s['n']} bf16 -> float32",
      _matmul_bf16_data, lambda d: d["a"].astype(np.float64) @ d["b"], work=lambda s: 2 * s["n"] ** 3, rtol=1e-2, atol_rel=4e-3),
  # issue 23: convolutions at torch's (oneDNN's) speed
  _conv_row("conv2d", 1.0, {"n": 32, "c": 64, "hw": 56, "o": 64}, {"n": 2, "c": 8, "hw": 12, "o": 8}),
  _conv_row("conv_stem", 0.8, {"n": 8, "c": 3, "hw": 224, "o": 64, "k": 7, "stride": 2, "padding": 3},
            {"n": 2, "c": 3, "hw": 32, "o": 8, "k": 7, "stride": 2, "padding": 3}),
  _conv_row("conv_dw", 1.0, {"n": 8, "c": 32, "hw": 112, "o": 32, "groups": 32}, {"n": 2, "c": 8, "hw": 12, "o": 8, "groups": 8}),
  _conv_row("conv_dw_s2", 1.0, {"n": 8, "c": 144, "hw": 56, "o": 144, "groups": 144, "stride": 2},
            {"n": 2, "c": 8, "hw": 12, "o": 8, "groups": 8, "stride": 2}),
  _conv_row("conv1x1", 1.0, {"n": 32, "c": 256, "hw": 28, "o": 64, "k": 1, "padding": 0}, {"n": 2, "c": 16, "hw": 6, "o": 8, "k": 1, "padding": 0}),
  _permute_row("nchw_nhwc", (0, 2, 3, 1), "NCHW->NHWC", (32, 64, 56, 56), (2, 8, 12, 12)),
  _permute_row("nhwc_nchw", (0, 3, 1, 2), "NHWC->NCHW", (32, 56, 56, 64), (2, 12, 12, 8)),
  Row("mul_add", "GB/s", "torch", 1.0, ({"n": 1 << 24}, {"n": 1 << 16}), lambda s: f"a*b+1 on {_count(s['n'])} float32",
      lambda s, rng: {"a": _normal(rng, s["n"]), "b": _normal(rng, s["n"])}, lambda d: d["a"] * d["b"] + F32(1),
      work=lambda s: 3 * 4 * s["n"], bw="triad"),
  # uniform [0, 1): every element adds, so a kernel that skips part of the input can't pass the check
  Row("sum", "GB/s", "torch", 1.0, ({"n": 1 << 24}, {"n": 1 << 16}), lambda s: f"sum of {_count(s['n'])} float32",
      lambda s, rng: {"a": rng.random(s["n"], dtype=F32)}, lambda d: d["a"].astype(np.float64).sum(), work=lambda s: 4 * s["n"], atol_rel=0,
      bw="read"),
  _rows_row("softmax", "softmax", _softmax_reference, (4096, 1000), (64, 100)),
  _rows_row("layernorm", "layernorm (weight, bias)", _layernorm_reference, (4096, 1024), (64, 128)),
  Row("transpose", "GB/s", "torch", 1.0, ({"shape": (4096, 4096)}, {"shape": (64, 96)}),
      lambda s: f"transpose {'x'.join(map(str, s['shape']))} .T.contiguous() float32", lambda s, rng: {"x": _normal(rng, *s["shape"]), "order": (1, 0)},
      lambda d: d["x"].T, work=lambda s: 2 * 4 * math.prod(s["shape"]), op="permute", atol_rel=0, rtol=0, bw="copy"),
  Row("mlp", "ms", "torch", 1.2, ({"dims": (784, 512, 512, 10), "batch": 128}, {"dims": (784, 64, 64, 10), "batch": 16}),
      lambda s: f"MLP {'-'.join(map(str, s['dims']))} b{s['batch']} SGD step", _mlp_data, mlp_reference, rtol=1e-2, atol_rel=1e-2),
  # issue 23.6: real models against torch, checked against a float64 run of the same model (torch's; numpy's without it)
  # (--quick: a ResNet of two one-block stages, as the first call compiles every distinct kernel; 64x64 so the last stage's
  # batchnorm sees enough values to stay well conditioned over the three checked training steps)
  Row("resnet18", "ms", "torch", 1.0, ({"batch": 8, "hw": 224, "width": 64, "classes": 1000},
                                       {"batch": 4, "hw": 64, "width": 8, "classes": 10, "blocks": (1, 1)}),
      lambda s: f"{_resnet_name(s)} inference b{s['batch']} {s['hw']}x{s['hw']}",
      models.resnet_data, models.resnet_reference, rtol=1e-3, atol_rel=1e-3),
  Row("resnet18_train", "ms", "torch", 1.0, ({"batch": 8, "hw": 224, "width": 64, "classes": 1000},
                                             {"batch": 4, "hw": 64, "width": 8, "classes": 10, "blocks": (1, 1)}),
      lambda s: f"{_resnet_name(s)} SGD step b{s['batch']} {s['hw']}x{s['hw']}",
      # float32 against float64 over three steps: torch's own float32 run is off by up to 4% of the largest change of stem.w and
      # 10% of a late layer's (3.1e-5 of 3.1e-4); a wrong gradient is off by about all of it
      models.resnet_data, models.resnet_train_reference, rtol=5e-2, atol_rel=0.2),
  Row("gpt2_block", "ms", "torch", 1.0, ({"batch": 1, "seq": 256, "width": 768, "heads": 12}, {"batch": 1, "seq": 16, "width": 32, "heads": 2}),
      lambda s: f"transformer block fwd+bwd, seq {s['seq']} width {s['width']} {s['heads']} heads causal", models.block_data,
      models.block_reference, rtol=2e-3, atol_rel=1e-3),
  Row("sdpa", "ms", "torch", 1.0, ({"batch": 1, "seq": 256, "width": 768, "heads": 12}, {"batch": 1, "seq": 16, "width": 32, "heads": 2}),
      lambda s: f"scaled_dot_product_attention {s['batch']}x{s['heads']}x{s['seq']}x{s['width'] // s['heads']} causal", models.sdpa_data,
      models.sdpa_reference, rtol=1e-3, atol_rel=1e-4),
  Row("tiny_op", "us", None, 10, ({"n": 64, "ops": 100}, {"n": 64, "ops": 20}), lambda s: f"tiny op x+1 ({s['n']} floats), eager",
      lambda s, rng: {"a": _normal(rng, s["n"]), "ops": s["ops"]}, lambda d: d["a"] + F32(1)),
  Row("jit_replay", "us", None, 10, ({"n": 64, "kernels": 8, "replays": 20}, {"n": 64, "kernels": 4, "replays": 5}),
      lambda s: f"jit replay per kernel ({s['kernels']} kernels of {s['n']})",
      lambda s, rng: {"inputs": [_normal(rng, s["n"]) for _ in range(3)], "kernels": s["kernels"], "replays": s["replays"]},
      lambda d: jit_reference(d["inputs"][2], d["kernels"])),
  Row("first_compile", "ms", None, 30, ({"calls": 6}, {"calls": 3}), lambda s: "first compile, small fused kernel", _compile_data,
      lambda d: fused_reference(*d["inputs"][0])),
]
ROW_KEYS = [r.key for r in ROWS]
PEERS = ["numpy", "torch", "tinygrad"]
BANDWIDTHS = ("copy", "read", "triad")

def _count(n: int) -> str: return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10}K" if n % 1024 == 0 else str(n)

@dataclass
class Cell:
  """One framework's outcome on one row: `value` in the row's unit (the median of `values`: one per round, or every sample of a
  paired row), or a status (WRONG, n/a, -, err)."""
  value: float | None = None
  status: str = ""
  first_s: float | None = None   # the first call of the first round: compile + run
  values: list[float] = field(default_factory=list)
  def __post_init__(self) -> None:
    if self.value is not None and not self.values: self.values = [self.value]
  def add_round(self, other: Cell) -> None:
    """Takes in another round's outcome: its figure joins the median; a failure in any round fails the cell."""
    if self.status: return   # failed, or n/a, in an earlier round
    if other.status in ("WRONG", "err"): self.status, self.value = other.status, None
    elif other.value is not None:
      self.values += other.values   # a round's figure, or all of a paired row's samples in it
      self.value = statistics.median(self.values)

# *** paired samples: a bandwidth row's frameworks and the machine's loop at its footprint, interleaved ***

LOOP, LOOP_1 = "loop", "loop 1 thread"   # a sample's figures of the machine's loop (bench/machine.py) on all cores, on one
SAMPLE_CALLS = 3     # timed calls per framework in a sample, after one untimed call (another's arrays just left the caches) ...
SAMPLE_S = 0.05      # ... fewer once this much is spent (a slow peer's call is long enough alone)

def paired(row: Row) -> bool:
  """Rows judged as a share of a memory bandwidth: their frameworks and that loop are sampled in turn (this VM's bandwidth moves
  between spells of minutes, ~1x or ~2x the 1-thread figure on 2 threads, and figures taken minutes apart compared spells)."""
  return row.unit == "GB/s" and row.bw is not None

def sample_order(names: list[str], i: int) -> list[str]:
  """The order of sample `i`: rotated each sample, so no one always follows the same other (its caches, its threads' wake-up)."""
  k = i % len(names) if names else 0
  return names[k:] + names[:k]

def paired_ratios(samples: list[dict[str, float]], a: str, b: str) -> list[float]:
  """a / b within each sample that has both: figures taken a fraction of a second apart, in the same spell of the machine."""
  return [s[a] / s[b] for s in samples if s.get(a) and s.get(b)]

def spread(values: list[float]) -> tuple[float, float, float] | None:
  """(median, min, max) of all the values (no best-of: every pair counts), None for none."""
  return (statistics.median(values), min(values), max(values)) if values else None

def spell_text(samples: list[dict[str, float]], kind: str, nbytes: int) -> str:
  """Which spell a row's samples fell in: the machine's loop at the row's footprint on all cores, and that over its 1-thread
  figure in the same sample (on this VM ~1x in the slow spells, ~2x in the fast ones; a range spanning both: the spell changed
  during the row, and the pairs still compare like with like)."""
  loop, scale = spread([s[LOOP] for s in samples if s.get(LOOP)]), spread(paired_ratios(samples, LOOP, LOOP_1))
  if loop is None: return "no machine loop sampled"
  text = f"machine {kind} {nbytes / 2**20:.3g} MiB {_fmt(loop[0])} GB/s [{_fmt(loop[1])}-{_fmt(loop[2])}]"
  return text + (f", {scale[0]:.2f}x [{scale[1]:.2f}-{scale[2]:.2f}] its 1-thread figure" if scale else "")

@dataclass
class Result:
  row: Row
  size: dict[str, Any]
  cells: dict[str, Cell] = field(default_factory=dict)
  machine: machine_bench.Machine | None = None   # what a bandwidth ref ("copy", "read", "triad") is measured by
  samples: list[dict[str, float]] = field(default_factory=list)   # a paired row's: each {framework or LOOP: GB/s}, of all rounds
  @property
  def footprint(self) -> int | None:
    """Bytes one call moves (a GB/s row): the machine's bandwidth loops also ran over that much, for the row's ceiling."""
    return int(self.row.work(self.size)) if self.row.unit == "GB/s" and self.row.work is not None else None
  def paired_spread(self, ref: str) -> tuple[float, float, float] | None:
    """Ours over `ref` (a framework, or a bandwidth: the loop) per sample: (median, min, max); None without samples of both."""
    return spread(paired_ratios(self.samples, "ours", LOOP if ref in BANDWIDTHS else ref)) if self.samples else None
  @property
  def ratio(self) -> float | None:
    ours = self.cells.get("ours", Cell()).value
    if self.row.ref is None: return None
    if self.samples: return (p := self.paired_spread(self.row.ref)) and p[0]
    ref = ((self.machine.bandwidth(self.row.ref, self.footprint) if self.machine else None) if self.row.ref in BANDWIDTHS else
           self.cells.get(self.row.ref, Cell()).value)
    if ours is None or ref is None or ours == 0 or ref == 0: return None
    return ours / ref   # throughput: ours/ref (>= target); time: ours/ref (<= target)
  @property
  def bw_share(self) -> float | None:
    """Ours as a share of the machine's loop of the row's access pattern at its footprint: the median of the samples' shares
    (paired), else of the loop measured with the machine's other figures."""
    ours = self.cells.get("ours", Cell()).value
    if self.row.bw is None or ours is None: return None
    if self.samples: return (p := self.paired_spread(self.row.bw)) and p[0]
    return ours / self.machine.bandwidth(self.row.bw, self.footprint) if self.machine else None
  @property
  def met(self) -> bool | None:
    ours = self.cells.get("ours", Cell())
    if ours.status: return False if ours.status in ("WRONG", "err") else None
    if self.row.ref is None: return None if ours.value is None else ours.value <= self.row.target
    if (r := self.ratio) is None: return None
    if not (r >= self.row.target if self.row.higher_better else r <= self.row.target): return False
    if self.machine is None or ours.value is None: return True
    if self.row.peak_target and ours.value < self.row.peak_target * self.machine.peak_all: return False
    # a bandwidth row must also come near the machine's own bandwidth for its access pattern
    if self.row.bw is None or self.row.ref in BANDWIDTHS: return True
    return (share := self.bw_share) is None or share >= self.row.bw_target

def _close(got: Any, want: Any, row: Row) -> str | None:
  """None when got matches want within the row's tolerance, else what is off."""
  gots, wants = (list(got), list(want)) if isinstance(want, (list, tuple)) else ([got], [want])
  if len(gots) != len(wants): return f"{len(gots)} results, expected {len(wants)}"
  for i, (g, w) in enumerate(zip(gots, wants)):
    g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
    if g.shape != w.shape: return f"result {i}: shape {g.shape}, expected {w.shape}"
    atol = row.atol_rel * (float(np.abs(w).max()) if w.size else 0.0)
    if not np.allclose(g, w, rtol=row.rtol, atol=atol):
      err = np.abs(g - w)
      return f"result {i}: max abs error {float(err.max()):.3g} (tolerance rtol {row.rtol:g}, atol {atol:.3g})"
  return None

def _perturb(x: Any) -> Any:
  """A deliberately wrong result (--inject-wrong): what a fast, broken kernel would return."""
  if isinstance(x, (list, tuple)): return [_perturb(x[0]), *x[1:]]
  return np.asarray(x) * 1.1 + 1

def check(case: Case, row: Row, want: Any, wrong: bool = False) -> tuple[float, str | None]:
  """First call (timed), the check against numpy and a warm-up call: (the first call's seconds, what was off or None)."""
  st = time.perf_counter()
  case.run()
  first = time.perf_counter() - st
  for _ in range(case.calls_before_check - 1): case.run()
  if case.result is not None and want is not None:   # want None: no reference here (a training row without torch)
    got = case.result()
    if wrong: got = _perturb(got)
    if (off := _close(row.select(got), want, row)) is not None: return first, off
    # a zero-copy result (ours, torch) holds the first call's output: kept, the first timed call allocated and page-faulted a
    # fresh one (softmax, ours: 423 faults, 15 GB/s against ~50 on the next calls) instead of the warm-up call
    del got
  if not case.fresh and first < 1.0: case.run()   # a slow first call is mostly running, not compiling: skip the warm-up
  return first, None

def _figure(row: Row, size: dict[str, Any], seconds: float) -> float:
  """One operation's time in the row's unit (throughput from its work, else ms or us)."""
  return row.work(size) / seconds / 1e9 if row.work is not None else seconds * (1e3 if row.unit == "ms" else 1e6)

def measure(case: Case, row: Row, want: Any, size: dict[str, Any], repeat: int, budget_s: float, stat: str,
            wrong: bool = False) -> tuple[Cell, str | None]:
  """First call (timed), the check against numpy, a warm-up call, then up to `repeat` timed calls (stopping early once
  `budget_s` is spent, after at least one). The figure is the min (or median) of the timed calls, per operation.
  Returns the cell and, when the check failed, what was off."""
  first, off = check(case, row, want, wrong)
  if off is not None: return Cell(status="WRONG", first_s=first), off
  times: list[float] = []
  limit = max(repeat, 1) if case.max_calls is None else max(min(repeat, case.max_calls - case.calls_before_check), 1)
  while len(times) < limit and (not times or sum(times) < budget_s):
    st = time.perf_counter()
    case.run()
    times.append(time.perf_counter() - st)
  t = (min(times) if stat == "min" else statistics.median(times)) / case.count
  return Cell(value=_figure(row, size, t), first_s=first), None

def burst(call: Callable[[], float], stat: str) -> float:
  """One sample of a paired row: an untimed call, then up to SAMPLE_CALLS timed ones (fewer once SAMPLE_S is spent); `call`
  runs once and returns its GB/s; the sample is their max (stat min: the least time) or median."""
  call()
  got: list[float] = []
  end = time.perf_counter() + SAMPLE_S
  while len(got) < SAMPLE_CALLS and (not got or time.perf_counter() < end): got.append(call())
  return max(got) if stat == "min" else statistics.median(got)

def _case_rate(case: Case, row: Row, size: dict[str, Any]) -> Callable[[], float]:
  """One timed call of a framework's case, as GB/s."""
  def call() -> float:
    st = time.perf_counter()
    case.run()
    return _figure(row, size, (time.perf_counter() - st) / case.count)
  return call

def sample_pairs(calls: dict[str, Callable[[], float]], settle: Callable[[], object], repeat: int, budget_s: float,
                 stat: str) -> tuple[list[dict[str, float]], dict[str, str]]:
  """Up to `repeat` samples (at least one; fewer once budget_s per participant is spent), each a burst of every participant in
  turn (sample_order), each burst started once the process's other threads are quiet. Returns the samples and, for a
  participant that raised (left out of the later samples), why."""
  samples: list[dict[str, float]] = []
  failed: dict[str, str] = {}
  live, start = dict(calls), time.perf_counter()
  while live and len(samples) < max(repeat, 1) and (not samples or time.perf_counter() - start < budget_s * len(calls)):
    sample: dict[str, float] = {}
    for name in sample_order(list(live), len(samples)):
      settle()
      try: sample[name] = burst(live[name], stat)
      except Exception as e:
        failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        del live[name]
    samples.append(sample)
  return samples, failed

def machine_info() -> str:
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  model, flags = "", set[str]()
  try:
    for line in open("/proc/cpuinfo"):
      k, _, v = line.partition(":")
      k = k.strip()
      if k == "model name" and not model: model = v.strip()
      elif k == "flags" and not flags: flags = set(v.split())
  except OSError: pass
  simd = next((f for f in ("avx512f", "avx2", "avx", "sse2") if f in flags), "")
  # the peak and the bandwidth are measured (bench/machine.py), not estimated from the clock
  return f"{cores} cores, {model or 'unknown CPU'}" + (f", {simd}" if simd else "") + (" fma" if "fma" in flags else "")

def isa_dev(dev: str | None, arch: str) -> str:
  """DEV for ours rendering for CPU model `arch`: DEV's CPU target (unset: the CPU device) with that arch, on the renderer DEV
  names or the CPU plugin's default (LLVM). A DEV that is not one CPU target, or names an arch already, is refused."""
  from core.device.target import parse_dev
  targets = parse_dev(dev or "CPU")
  if len(targets) != 1 or targets[0].device != "CPU" or targets[0].arch is not None:
    raise ValueError(f"--isa renders for a CPU model: DEV must be one CPU target without an arch (CPU, CPU:C, DIRECT+CPU:LLVM), not {dev!r}")
  return str(replace(targets[0], renderer=targets[0].renderer or "LLVM", arch=arch))

def isa_env(isa: str, environ: Mapping[str, str]) -> dict[str, str]:
  """The environment of the child process that runs the suite held to `isa`: ISA_VAR naming it, ours on its CPU model (DEV), the
  peers' switches, and no other OpenBLAS settings."""
  spec = ISAS[isa]
  env = {k: v for k, v in environ.items() if k not in BLAS_VARS}
  return {**env, **spec.peer_env, ISA_VAR: isa, "DEV": isa_dev(environ.get("DEV"), spec.arch)}

def _openblas_kernels() -> list[str]:
  """The kernel each OpenBLAS loaded in this process chose (threadpoolctl; empty without it)."""
  try: from threadpoolctl import threadpool_info
  except ImportError: return []
  return [str(i.get("architecture")) for i in threadpool_info() if i.get("internal_api") == "openblas"]

def isa_report(isa: str, libs: dict[str, Any]) -> list[str]:
  """The header lines of an --isa run: what it is (this machine running another ISA's code) and, for ours and each peer loaded,
  whether it runs that ISA (what it reports, not what it was asked)."""
  spec, name = ISAS[isa], isa.upper()
  lines = [f"ISA: {name} code on this host, NOT an {name} host: ours renders for {spec.arch} (DEV={os.getenv('DEV')}), the peers are "
           f"held to {name} ({', '.join(f'{k}={v}' for k, v in spec.peer_env.items())}), the machine's FMA peak and bandwidth loops run "
           f"{spec.lanes}-lane vectors (% of peak is of an {name} peak); caches, clocks, memory and cores are this machine's"]
  def held(what: str, got: object, want: object) -> str: return f"{what} {got} ({'yes' if got == want else f'NO: not {want}'})"
  checks = []
  if (ours := libs.get("ours")) is not None:
    checks.append(held("ours: vector bytes", getattr(ours.renderer, "simd_width", None), 4 * spec.lanes))
  if "numpy" in libs: checks += [held("numpy: OpenBLAS kernel", k, spec.blas_kernel) for k in _openblas_kernels()] or ["numpy: OpenBLAS kernel unknown (no threadpoolctl)"]
  if (torch := libs.get("torch")) is not None:
    checks += [held("torch: ATen capability", torch.capability, spec.torch_capability), held("oneDNN isa", torch.onednn_isa, spec.onednn_isa)]
  return lines + [f"held to {name}: " + "; ".join(checks)]

def load_note() -> str:
  """The 1-minute load average against the core count: figures taken on a busy machine are contended, and say so."""
  if not hasattr(os, "getloadavg"): return ""
  load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
  return f"load average {load:.1f} on {cores} cores" + (" (busy: other processes share the cores, figures are contended)" if load > cores * 0.75 else "")

def blas_info() -> str:
  """The BLAS libraries loaded in this process (numpy's, torch's), with the kernel each chose for this CPU."""
  try: from threadpoolctl import threadpool_info
  except ImportError: return "BLAS: threadpoolctl not installed (pip install threadpoolctl to see each peer's BLAS kernel)"
  libs = [f"{i.get('internal_api')} {i.get('version')} kernel {i.get('architecture') or '?'}, {i.get('num_threads')} threads "
          f"({os.path.basename(i.get('filepath', ''))})" for i in threadpool_info() if i.get("user_api") == "blas"]
  return "BLAS: " + ("; ".join(libs) if libs else "none loaded")

def _share(r: Result, m: machine_bench.Machine | None) -> str:
  """Our figure as a share of what the machine measured: FLOP/s of the FMA peak, bytes/s of the bandwidth of the row's access
  pattern (named: "% read bw", "% copy bw", "% triad bw")."""
  ours = r.cells.get("ours")
  if ours is None or ours.value is None: return "-"
  if r.row.unit == "GFLOP/s": return "-" if m is None else f"{100 * ours.value / m.peak_all:.0f}% peak"
  if r.row.unit != "GB/s" or not r.row.bw: return "-"
  if r.samples:   # paired: the median share over the samples [their min-max]
    if (p := r.paired_spread(r.row.bw)) is None: return "-"
    return f"{100 * p[0]:.0f}% {r.row.bw} bw" + (f" [{100 * p[1]:.0f}-{100 * p[2]:.0f}]" if p[1] != p[2] else "")
  return "-" if m is None else f"{100 * ours.value / m.bandwidth(r.row.bw, r.footprint):.0f}% {r.row.bw} bw"

def _ratio_text(r: Result) -> str:
  """The target's ratio; a paired row's is the median of its samples' ratios, shown with their [min-max]."""
  if (ratio := r.ratio) is None: return "-"
  text = f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"
  if r.samples and (p := r.paired_spread(r.row.ref or "")) and p[1] != p[2]: text += f" [{p[1]:.2f}-{p[2]:.2f}]"
  return text

def _fmt(v: float) -> str: return f"{v:.3g}" if v < 100 else f"{v:.0f}"

def _cell_text(c: Cell | None) -> str:
  if c is None: return "-"
  if c.status or c.value is None: return c.status or "-"
  return _fmt(c.value) + (f" [{_fmt(min(c.values))}-{_fmt(max(c.values))}]" if len(c.values) > 1 else "")

def print_table(results: list[Result], libs: list[str], out: TextIO, machine: machine_bench.Machine | None = None) -> None:
  head = ["row", "work", "unit", *libs, "of machine", "ratio", "target", "met", "ours 1st call"]
  lines = []
  for r in results:
    if r.row.ref is None: rtxt, ttxt = "-", f"<= {_fmt(r.row.target)} {r.row.unit}"
    else:
      rtxt = _ratio_text(r)
      ttxt = f"{'>=' if r.row.higher_better else '<='} {r.row.target}x {r.row.ref}" + ("" if r.row.higher_better else " time")
      if r.row.bw and r.row.ref not in BANDWIDTHS: ttxt += f", {r.row.bw_target}x {r.row.bw} bw"
      if r.row.peak_target: ttxt += f", {r.row.peak_target:.0%} peak"
    met = {True: "yes", False: "NO", None: "?"}[r.met]
    first = (c := r.cells.get("ours")) and c.first_s
    lines.append([r.row.key, r.row.describe(r.size), r.row.unit, *[_cell_text(r.cells.get(lib)) for lib in libs], _share(r, machine), rtxt, ttxt, met,
                  "-" if not first else f"{first * 1e3:.1f} ms"])
  widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
  for i, line in enumerate([head, *lines]):
    print("  ".join(str(x).ljust(w) if j < 3 else str(x).rjust(w) for j, (x, w) in enumerate(zip(line, widths))), file=out)
    if i == 0: print("  ".join("-" * w for w in widths), file=out)

def run(rows: list[str] | None = None, quick: bool = False, repeat: int = 10, budget_s: float = 2.0, stat: str = "min",
        peers: list[str] | None = None, wrong: set[str] | frozenset[str] = frozenset(), out: TextIO = sys.stdout,
        measure_machine: bool = True, rounds: int = 1, isa: str = "native") -> list[Result]:
  """Runs the suite `rounds` times over all its rows and prints the table; returns the results. `wrong`: rows whose result of
  ours is perturbed before the check (to test the check itself). `isa`: a key of ISAS where this process runs held to it (main
  starts one for --isa), else "native"."""
  todo = [r for r in ROWS if rows is None or r.key in rows]
  names = ["ours", *(PEERS if peers is None else [p for p in PEERS if p in peers])]
  libs: dict[str, Any] = {}
  notes: list[str] = []
  if isa != "native" and "tinygrad" in names:
    names.remove("tinygrad")
    notes.append(f"tinygrad: - (left out under --isa {isa}: the suite knows no switch that holds its kernels to {isa.upper()})")
  for name in names:
    try: libs[name] = LOADERS[name]()
    except Exception as e:   # a missing or broken peer is a "-" column, never a failure of the suite
      if name == "ours": raise
      why = "not installed" if isinstance(e, ImportError) else "failed to load"
      notes.append(f"{name}: - ({why}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
  print(f"bench suite{' (--quick sizes)' if quick else ''}: ours {libs['ours'].info}", file=out)
  print(f"machine: {machine_info()}; {load_note()}", file=out)
  for name in names[1:]:
    if name in libs: print(f"{name}: {libs[name].info}", file=out)
  for n in notes: print(n, file=out)
  print(blas_info(), file=out)
  if isa != "native":
    for line in isa_report(isa, libs): print(line, file=out)
  # each bandwidth row's own footprint too: arrays a few times the L3 stay partly cached between calls, for every peer alike
  footprints = [(kind, fp) for row in todo if (kind := row.bw or (row.ref if row.ref in BANDWIDTHS else None))
                and (fp := Result(row, row.sizes[1 if quick else 0]).footprint)]
  lanes = ISAS[isa].lanes if isa != "native" else None
  machine = machine_bench.measure(quick=quick, footprints=footprints, width=lanes) if measure_machine else None
  if machine is not None: print(machine.text() + (" (round 1)" if rounds > 1 else ""), file=out)
  machines = [machine] if machine is not None else []
  print(f"figures: steady state, the {stat} of up to {repeat} timed calls after a warm-up call (at most ~{budget_s:g} s of "
        "timing per cell), each cell started once the other threads are quiet" +
        (f"; the median of {rounds} rounds over all rows [their min-max]" if rounds > 1 else "") +
        "; 'ours 1st call' is our first call (compile + run). Bandwidth rows (GB/s) instead take up to "
        f"{repeat} samples a round, each an untimed call and up to {SAMPLE_CALLS} timed ones of every framework and of the "
        "machine's loop at the row's footprint in turn (the same spell of the machine's memory); a figure is the median of the "
        "samples [their min-max], a ratio the median of the per-sample ratios [their min-max]", file=out)
  out.flush()
  results = [Result(row, row.sizes[1 if quick else 0], machine=machine) for row in todo]
  loops: dict[tuple[str, int], Callable[[int], float]] | None = {} if measure_machine else None   # the paired rows' loops
  errors: list[str] = []
  header_notes = len(notes)   # the notes printed so far; those of the rows (n/a and why) follow the table
  unsettled = 0
  for rnd in range(rounds):
    if rnd and machines: machines.append(machine_bench.measure(quick=quick, footprints=footprints, width=lanes))   # the same spells as the rows
    for res in results:
      row, size = res.row, res.size
      data = row.data(size, np.random.default_rng(0))
      want = row.reference(data)
      if want is None and rnd == 0: print(f"{row.key}: no reference without torch: results unchecked", file=out)
      if rnd == 0 and row.ref is not None and (other := next((r for r in results if r.row.key == row.ref and r.cells), None)):
        res.cells[row.ref] = other.cells["ours"]   # a row judged against another row of ours (bf16 against float32)
      def settled() -> None:
        nonlocal unsettled
        if not suite_libs.settle(libs["ours"].park): unsettled += 1   # our pool and every peer's workers asleep before the cell
      cells: dict[str, Cell] = {}
      cases: dict[str, Callable[[], float]] = {}   # a paired row's frameworks, checked, timed below in turn with the loop
      for name in names:
        cell, msg = Cell(status="-"), ""
        if name in libs:
          try:
            case = getattr(libs[name], row.op or row.key)(data)
            settled()
            if paired(row):
              first, off = check(case, row, want, wrong=name == "ours" and row.key in wrong)
              cell = Cell(status="WRONG" if off else "", first_s=first)
              if not off: cases[name] = _case_rate(case, row, size)
            else: cell, off = measure(case, row, want, size, repeat, budget_s, stat, wrong=name == "ours" and row.key in wrong)
            if off: msg = f"{row.key}: {name} is WRONG: {off}"
          except NotApplicable as e: cell = Cell(status="n/a"); msg = f"{row.key}: {name} n/a ({e})"
          except Exception as e:
            cell, msg = Cell(status="err"), f"{row.key}: {name} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            if os.getenv("BENCH_TRACEBACK"): traceback.print_exc()
        if msg and msg not in notes + errors: (notes if cell.status == "n/a" else errors).append(msg)
        cells[name] = cell
      if cases:
        if loops is not None and (fp := res.footprint) and row.bw:
          if (row.bw, fp) not in loops: loops[(row.bw, fp)] = machine_bench.sampler(row.bw, fp, lanes)
          loop = loops[(row.bw, fp)]
          cases.update({LOOP: lambda: loop(machine_bench.cores()), LOOP_1: lambda: loop(1)})
        samples, failed = sample_pairs(cases, settled, repeat, budget_s, stat)
        res.samples += samples
        for name, why in failed.items():
          errors.append(f"{row.key}: {name} failed: {why}")
          if name in cells: cells[name] = Cell(status="err")
        for name, cell in cells.items():
          if not cell.status and (got := [x[name] for x in samples if name in x]):
            cell.value, cell.values = statistics.median(got), got
      for name, cell in cells.items():
        if name in res.cells: res.cells[name].add_round(cell)
        else: res.cells[name] = cell
        print(f"  {row.key} {name}{f' round {rnd + 1}' if rounds > 1 else ''}: {_cell_text(cell)} {row.unit}", file=sys.stderr, flush=True)
      del data, want, cases
  if len(machines) > 1:
    machine = machine_bench.median(machines)
    for res in results: res.machine = machine
    print(f"\nthe machine, each figure the median of its {len(machines)} rounds: {machine.text()}", file=out)
  print(file=out)
  print_table(results, names, out, machine)
  for res in results:
    if res.samples and res.row.bw and res.footprint:   # the paired rows: how many pairs, and in which spell of the machine
      print(f"{res.row.key}: {len(res.samples)} samples; {spell_text(res.samples, res.row.bw, res.footprint)}", file=out)
  for n in notes[header_notes:]: print(n, file=out)
  for err in errors: print(err, file=out)
  if unsettled: print(f"{unsettled} cell(s) started with other threads still busy after {suite_libs.SETTLE_MAX_S:g} s", file=out)
  print(f"at the end: {load_note()}", file=out)
  return results

def _measure_ours(lib: Any, row: Row, size: dict[str, Any], repeat: int, budget_s: float, stat: str) -> Cell:
  """One cell of ours on `row`, data made and checked afresh, started once the process's other threads are quiet."""
  data = row.data(size, np.random.default_rng(0))
  # the reference first: numpy's BLAS threads poll for work after it (OpenBLAS: about 0.1 s), and settle waits them out
  want = row.reference(data)
  case = getattr(lib, row.op or row.key)(data)
  suite_libs.settle(lib.park)
  cell, off = measure(case, row, want, size, repeat, budget_s, stat)
  if off: raise RuntimeError(f"{row.key}: ours is WRONG: {off}")
  return cell

def serve(quick: bool, repeat: int, budget_s: float, stat: str, inp: TextIO, out: TextIO) -> None:
  """thread_scaling's child: for each row key read from `inp`, one cell of ours, written back as 'value KEY FIGURE'."""
  lib = LOADERS["ours"]()
  by_key = {r.key: r for r in ROWS}
  for line in inp:
    row = by_key[line.strip()]
    try: print(f"value {row.key} {_measure_ours(lib, row, row.sizes[1 if quick else 0], repeat, budget_s, stat).value}", file=out, flush=True)
    except Exception as e: print(f"error {row.key} {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=out, flush=True)

def thread_scaling(results: list[Result], quick: bool, repeat: int, budget_s: float, stat: str, out: TextIO,
                   machine: machine_bench.Machine | None = None, rounds: int = 1, isa: str = "native") -> dict[str, float]:
  """Issue 23.9: our throughput rows on one thread beside every core the process may use, and the machine's own 1-thread
  to all-thread ratio (FMA peak for GFLOP/s rows, the bandwidth of the row's access pattern for GB/s rows). The one-thread
  cells run in a child process with CPU_THREADS=1 (the thread pool and the optimizer read it when they load), and each is
  paired with an all-core cell measured here just before it: a host whose speed drifts between spells (seen on shared VMs)
  then moves both figures of a pair alike, where a whole one-thread run later would not. Each figure is the median of its
  `rounds`, the speedup the median of the pairs' ratios. Returns the 1-thread figures."""
  rows = [r for r in results if r.row.higher_better and (c := r.cells.get("ours")) is not None and c.value]
  cores = machine_bench.cores()
  if not rows or cores < 2:
    print(f"thread scaling: {'one core: nothing to compare' if cores < 2 else 'no throughput rows of ours ran'}", file=out)
    return {}
  cmd = [sys.executable, os.path.abspath(__file__), "--repeat", str(repeat), "--budget", str(budget_s), "--stat", stat, "--isa", isa,
         "--serve"] + (["--quick"] if quick else [])
  lib = LOADERS["ours"]()
  pairs: dict[str, list[tuple[float, float]]] = {r.row.key: [] for r in rows}
  failed: list[str] = []
  with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        env=dict(os.environ, CPU_THREADS="1")) as child:
    assert child.stdin is not None and child.stdout is not None
    try:
      for _ in range(rounds):
        for r in rows:
          all_ = _measure_ours(lib, r.row, r.size, repeat, budget_s, stat).value
          lib.park()   # our pool asleep while the child times its cell
          child.stdin.write(r.row.key + "\n")
          child.stdin.flush()
          reply = child.stdout.readline().split(maxsplit=2)
          if len(reply) == 3 and reply[0] == "value" and all_: pairs[r.row.key].append((float(reply[2]), all_))
          else: failed.append(f"{r.row.key}: {' '.join(reply) or 'no reply'}")
      child.stdin.close()
    except BrokenPipeError:   # the child exited: its stderr, printed below, says why
      failed.append("the 1-thread child exited")
      with contextlib.suppress(BrokenPipeError): child.stdin.close()
    err = child.stderr.read() if child.stderr is not None else ""
  one = {k: statistics.median(o for o, _ in ps) for k, ps in pairs.items() if ps}
  print(f"\nthread scaling: ours on 1 thread (CPU_THREADS=1) and on all {cores} cores, each 1-thread cell right after an all-core "
        "one" + (f"; medians of {rounds} rounds, the speedup the median of the pairs' ratios [their min-max]" if rounds > 1 else ""), file=out)
  head = ["row", "unit", "1 thread", f"{cores} threads", "speedup", "machine's"]
  lines = []
  for r in rows:
    ps = pairs[r.row.key]
    ratios = [a / o for o, a in ps if o]
    # the machine's own scaling for the row's kind of work: FMA peak, or the bandwidth of its access pattern (copy if unnamed)
    kind = r.row.bw or (r.row.ref if r.row.ref in BANDWIDTHS else "copy")
    mach = None if machine is None else (machine.peak_all / machine.peak_1 if r.row.unit == "GFLOP/s" else
                                         machine.bandwidth(kind) / getattr(machine, f"{kind}_1"))
    speed = "-" if not ratios else f"{statistics.median(ratios):.2f}x" + (f" [{min(ratios):.2f}-{max(ratios):.2f}]" if len(ratios) > 1 else "")
    lines.append([r.row.key, r.row.unit, _fmt(one[r.row.key]) if ps else "err", _fmt(statistics.median(a for _, a in ps)) if ps else "err",
                  speed, "-" if mach is None else f"{mach:.2f}x"])
  widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
  for i, line in enumerate([head, *lines]):
    print("  ".join(str(x).ljust(w) if j < 2 else str(x).rjust(w) for j, (x, w) in enumerate(zip(line, widths))), file=out)
    if i == 0: print("  ".join("-" * w for w in widths), file=out)
  if failed or child.returncode != 0: print(f"thread scaling: the 1-thread run failed: {'; '.join(failed)} {err.strip()[-500:]}", file=out)
  return one

def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="small sizes (a smoke test of every row, seconds not minutes)")
  p.add_argument("--rows", help=f"comma-separated rows to run, of: {','.join(ROW_KEYS)}")
  p.add_argument("--repeat", type=int, default=10, help="at most this many timed calls per cell (default 10)")
  p.add_argument("--budget", type=float, default=2.0, help="stop timing a cell after about this many seconds (default 2)")
  p.add_argument("--stat", choices=("min", "median"), default="min", help="figure of the timed calls (default min)")
  p.add_argument("--rounds", type=int, default=1, help="run all the rows this many times, round after round; each cell's "
                 "figure is the median of its rounds, printed with their range (default 1)")
  p.add_argument("--peers", default=",".join(PEERS), help=f"peers to compare with (default {','.join(PEERS)}; '' for none)")
  p.add_argument("--no-machine", action="store_true", help="skip measuring the machine's FMA peak and memory bandwidth")
  p.add_argument("--isa", choices=("native", *ISAS), default="native", help="native (default): ours and the peers each at "
                 "their best on this CPU; avx2: all held to AVX2 on it (ours renders for znver3, the peers by their own switches, the "
                 "machine's loops in 8-lane vectors): the code an AVX2 host runs, on this host's caches, clocks and memory")
  p.add_argument("--threads", action="store_true", help="also run our throughput rows on one thread: a 1 vs all-core scaling table")
  p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)   # thread_scaling's 1-thread child: rows from stdin
  p.add_argument("--inject-wrong", default="", help="rows whose result of ours is perturbed, to see the check catch it (testing)")
  a = p.parse_args(argv)
  rows = None
  if a.rows:
    rows = [r.strip() for r in a.rows.split(",") if r.strip()]
    if (bad := [r for r in rows if r not in ROW_KEYS]): p.error(f"unknown row(s) {bad}; rows are {','.join(ROW_KEYS)}")
  peers = [x.strip() for x in a.peers.split(",") if x.strip()]
  if (bad := [x for x in peers if x not in PEERS]): p.error(f"unknown peer(s) {bad}; peers are {','.join(PEERS)}")
  if a.rounds < 1: p.error("--rounds must be at least 1")
  if os.environ.get(ISA_VAR, "native") != a.isa:
    if os.environ.get(ISA_VAR): p.error(f"{ISA_VAR} is --isa's own: its child process runs with it set; unset it")
    # the peers read their switches when they load, and numpy has loaded here: the run goes to a new process that has them
    try: env = isa_env(a.isa, os.environ)
    except ValueError as e: p.error(str(e))
    return subprocess.run([sys.executable, os.path.abspath(__file__), *(sys.argv[1:] if argv is None else argv)], env=env).returncode
  if a.serve:
    serve(a.quick, a.repeat, a.budget, a.stat, sys.stdin, sys.stdout)
    return 0
  results = run(rows, a.quick, a.repeat, a.budget, a.stat, peers, {r for r in a.inject_wrong.split(",") if r}, measure_machine=not a.no_machine,
                rounds=a.rounds, isa=a.isa)
  if a.threads: thread_scaling(results, a.quick, a.repeat, a.budget, a.stat, sys.stdout, results[0].machine if results else None, a.rounds,
                                a.isa)
  # a wrong or failing result of ours is an error exit (missing peers never are)
  return 1 if any(r.cells["ours"].status in ("WRONG", "err") for r in results) else 0

if __name__ == "__main__":
  sys.exit(main())
