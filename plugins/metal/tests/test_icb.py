"""Jit replays through indirect command buffers on MOCK+METAL: results against numpy over several replays (dependent kernels,
a symbolic variable, inputs in new buffers every call), proof that the replays ran the ICB (built once, executed once per replay,
no dispatch encoded directly), and the ICB's commands (pipelines, bindings with offsets, grids, barriers). Everything that opens
the device runs in one subprocess with DEV=MOCK+METAL; its checks come back as JSON."""
from __future__ import annotations
from typing import Any
import pytest
from metal_tools import run_mock_script

SCRIPT = r'''
import ctypes, json, numpy as np
from core import Variable
from core.tensor.tensor import Tensor
from core.tensor.jit import Jit
from core.device.registry import Device
from core.engine.run import buffer_of
from core.hcq.state import compile_kernel
from core.codegen.program import program_uops
rng = np.random.default_rng(3)
dev = Device[Device.DEFAULT]
hcq = dev.hcq
comp = hcq.queue("COMPUTE:0")
out = {}

def counts(): return comp.encoder.dispatches, comp.encoder.icb_dispatches

# several dependent kernels; every call's inputs stay alive, so each replay binds new buffers
@Jit
def f(x, w):
  h = (x @ w).relu().contiguous().realize()
  return (h.softmax(1) * 2 + h.sum(0).contiguous()).realize()   # the column sum its own kernel: the softmax fuses into the output's
def f_np(x, w):
  h = np.maximum(x @ w, 0)
  e = np.exp(h - h.max(1, keepdims=True))
  return e / e.sum(1, keepdims=True) * 2 + h.sum(0)
keep, errs, icbs_after, per_replay = [], [], [], []
for i in range(6):
  x, w = rng.standard_normal((8, 24)).astype(np.float32), rng.standard_normal((24, 16)).astype(np.float32)
  tx, tw = Tensor(x).realize(), Tensor(w).realize()
  keep += [tx, tw]
  before = counts()
  r = f(tx, tw)
  after = counts()
  errs.append(float(np.abs(r.numpy() - f_np(x, w)).max()))
  if f.cnt == 2 and f.replay is not None:
    st = hcq.graphs[f.replay]["COMPUTE:0"]
    icbs_after.append([id(icb) for icb in st.icbs])
    per_replay.append((after[0] - before[0], after[1] - before[1]))
    if i == 5: last = (tx, tw, r)
out["f_err"] = errs
st = hcq.graphs[f.replay]["COMPUTE:0"]
out["f_kernels"] = sum(1 for it in f.items if it.ast.op.name != "COPY")
out["f_icbs"] = [(len(icb.commands), icb.executed, icb.encoded) for icb in st.icbs]
out["f_same_icbs"] = all(ids == icbs_after[0] for ids in icbs_after)
out["f_per_replay"] = per_replay
# the commands of the ICB against the captured kernels: pipeline (its kernel's name), grid and threadgroup from the compiled
# program, bindings = the addresses of this replay's buffers (inputs: the last call's tensors), barrier on every dependent one
tx, tw, r = last
progs = [compile_kernel(it.ast, Device.DEFAULT) for it in f.items]
cmds = [c for icb in st.icbs for c in icb.obj]
checks = []
for c, it, p in zip(cmds, f.items, progs):
  spec = p.arg
  params = sorted(u.arg for u in program_uops(p) if u.op.name == "PARAM")
  want = [hcq.addr(buffer_of(it.bufs[i])) if it.bufs[i] not in f.input_bufs else None for i in params]
  got = dict(c.bindings)
  checks.append({"name": hcq.programs[c.pipeline].name == spec.name, "grid": list(c.grid) == list((tuple(spec.global_size) + (1, 1, 1))[:3]),
                 "tg": list(c.threadgroup) == list((tuple(spec.local_size) + (1, 1, 1))[:3]), "barrier": c.barrier,
                 "fixed": all(w is None or got[i] == w for i, w in enumerate(want)), "nbind": len(got) == len(params) + len(spec.vars)})
out["f_checks"] = checks
inputs_now = {hcq.addr(buffer_of(tx.uop.base)), hcq.addr(buffer_of(tw.uop.base))}
out["f_inputs_bound"] = inputs_now <= {a for c in cmds for _, a in c.bindings}

# a symbolic variable: its value is the int32 in the kernarg memory the ICB binds (patched in place, no re-encoding)
@Jit
def g(a, b): return (a * b + 1).sum(axis=1).realize()
errs, vals = [], []
for i in [3, 5, 2, 7, 4, 6]:
  v = Variable("i", 1, 10).bind(i)
  x, y = rng.standard_normal((3, i), dtype=np.float32), rng.standard_normal((3, i), dtype=np.float32)
  r = g(Tensor(x).reshape(3, v), Tensor(y).reshape(3, v))
  errs.append(float(np.abs(r.numpy() - (x * y + 1).sum(axis=1)).max()))
  if g.replay is not None:
    c = hcq.graphs[g.replay]["COMPUTE:0"].icbs[0].obj[-1]
    vals.append((i, ctypes.c_int32.from_address(dict(c.bindings)[max(dict(c.bindings))]).value))
out["g_err"] = errs
out["g_vals"] = vals
out["g_icbs"] = [(len(icb.commands), icb.executed) for icb in hcq.graphs[g.replay]["COMPUTE:0"].icbs]

# the same inputs every call: after the build nothing is encoded again
@Jit
def h(x): return (x.exp() + 1).realize()
x = Tensor(np.linspace(-1, 1, 64, dtype=np.float32)).realize()
res = [h(x).numpy().copy() for _ in range(5)]
out["h_err"] = max(float(np.abs(r - (np.exp(np.linspace(-1, 1, 64, dtype=np.float32)) + 1)).max()) for r in res)
out["h_icbs"] = [(len(icb.commands), icb.executed, icb.encoded) for icb in hcq.graphs[h.replay]["COMPUTE:0"].icbs]

# a fault inside an ICB (its pipeline is gone): the replay raises HCQError; the next replay builds the ICB again and is right
st = hcq.graphs[h.replay]["COMPUTE:0"]
handle = st.icbs[0].commands[0].pipeline
saved = hcq.programs.pop(handle)
try:
  h(x)
  out["icb_fault"] = "no error"
except Exception as e: out["icb_fault"] = f"{type(e).__name__}: {e}"
hcq.programs[handle] = saved
r = h(x).numpy()
out["after_fault_err"] = float(np.abs(r - (np.exp(np.linspace(-1, 1, 64, dtype=np.float32)) + 1)).max())
out["after_fault_icbs"] = [(len(icb.commands), icb.executed, icb.encoded) for icb in st.icbs]
print("RESULT " + json.dumps(out))
'''

@pytest.fixture(scope="module")
def result() -> dict[str, Any]: return run_mock_script(SCRIPT)

def test_dependent_kernels_replayed_from_the_icb_match_numpy(result: dict[str, Any]) -> None:
  assert len(result["f_err"]) == 6 and max(result["f_err"]) < 1e-4
  assert result["f_kernels"] >= 3   # the matmul, the column sum, the softmax with the output: dependent kernels

def test_the_icb_is_built_once_and_each_replay_executes_it(result: dict[str, Any]) -> None:
  # calls 1 and 2 run eagerly and capture; calls 3..6 are the 4 replays
  assert len(result["f_per_replay"]) == 4 and result["f_same_icbs"]
  n = result["f_kernels"]
  assert [c[0] for c in result["f_icbs"]] and sum(c[0] for c in result["f_icbs"]) == n
  assert all(executed == 4 for _, executed, _ in result["f_icbs"])
  # every replay ran each kernel once from the ICB and encoded no dispatch directly
  assert result["f_per_replay"] == [[0, n]] * 4

def test_only_changed_commands_are_encoded_again(result: dict[str, Any]) -> None:
  # same input buffers every call: the commands were encoded when the ICB was built, never again
  (ncmd, executed, encoded), = result["h_icbs"]
  assert executed == 3 and encoded == ncmd
  # new input buffers every call: the commands reading them are encoded again, the others not
  total = sum(c[0] for c in result["f_icbs"])
  encoded = sum(c[2] for c in result["f_icbs"])
  assert total < encoded < 4 * total

def test_icb_commands_hold_pipeline_bindings_grid_and_barriers(result: dict[str, Any]) -> None:
  checks = result["f_checks"]
  assert len(checks) == result["f_kernels"]
  for c in checks: assert c["name"] and c["grid"] and c["tg"] and c["fixed"] and c["nbind"], c
  # the first kernel depends on nothing in the run; every later one reads what an earlier one wrote
  assert [c["barrier"] for c in checks] == [False] + [True] * (len(checks) - 1)
  assert result["f_inputs_bound"]

def test_symbolic_variable_replays_through_the_icb(result: dict[str, Any]) -> None:
  assert len(result["g_err"]) == 6 and max(result["g_err"]) < 1e-4
  assert result["g_vals"] and all(i == v for i, v in result["g_vals"])   # the bound int32 is this call's value
  assert all(executed == 4 for _, executed in result["g_icbs"])

def test_a_fault_in_an_icb_is_raised_and_the_next_replay_rebuilds_it(result: dict[str, Any]) -> None:
  assert result["icb_fault"].startswith("HCQError") and "which is not loaded" in result["icb_fault"], result["icb_fault"]
  (ncmd, executed, encoded), = result["after_fault_icbs"]
  assert executed == 1 and encoded == ncmd and result["after_fault_err"] < 1e-6
