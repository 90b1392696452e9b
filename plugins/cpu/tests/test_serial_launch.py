"""Small multi-block launches on the calling thread (runtime.SERIAL_US), negative block counts in the native launch, and prepared
launches (CPUProgram.prepare, what a compiled file's replay calls): the same results as the pool's, against numpy."""
import numpy as np
import pytest
from core.ir.dtype import dtypes
from core.ir.ops import UOp, Ops
from plugin_cpu import runtime
from cpu_kernels import RENDERERS, Linear, device, c, rng, buf

NB, W = 24, 16   # 24 blocks of a 16-wide loop: out = a * b + block index

def _program(ren: str):
  dev = device(ren)
  out, a, b = buf(0, dtypes.float32, NB * W), buf(1, dtypes.float32, NB * W), buf(2, dtypes.float32, NB * W)
  g, r = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, NB),), "gidx0"), rng(W)
  lin = Linear()
  lin.add(out, a, b, g, r)
  i = g * c(W) + r
  lin.add(out.index(i).store(a.index(i).load() * b.index(i).load() + g.cast(dtypes.float32)).end(r))
  return dev, dev.runtime("ser", dev.compiler.compile(dev.renderer.render("ser", lin.uops)))

def _bufs(dev, arrays):
  hs = []
  for x in arrays:
    h = dev.allocator.alloc(x.nbytes)
    dev.allocator._copyin(h, memoryview(np.ascontiguousarray(x)).cast("B"))
    hs.append(h)
  return hs

def _read(dev, h) -> np.ndarray:
  o = np.empty(NB * W, np.float32)
  dev.allocator._copyout(memoryview(o).cast("B"), h)
  return o

def _want(x, y): return x * y + np.repeat(np.arange(NB, dtype=np.float32), W)

@pytest.mark.parametrize("ren", RENDERERS)
@pytest.mark.parametrize("serial_us, serial", [(0.0, False), (1e9, True)])
def test_either_side_of_the_threshold_matches_numpy(ren, serial_us, serial, monkeypatch):
  # 0: never serial (every launch goes to the pool); 1e9: every launch of this kernel is short enough to stay on the caller
  monkeypatch.setattr(runtime, "SERIAL_US", serial_us)
  dev, prg = _program(ren)
  rs = np.random.default_rng(1)
  gs = (NB, 1, 1)
  for k in range(runtime.SERIAL_PROBES + 2):   # through the probing launches and past them
    x, y = rs.standard_normal((2, NB * W)).astype(np.float32)
    hs = _bufs(dev, [np.zeros(NB * W, np.float32), x, y])
    prg(*hs, global_size=gs)
    np.testing.assert_array_equal(_read(dev, hs[0]), _want(x, y))
    if serial_us == 0.0: assert prg.serial(gs) is False
    else: assert prg.serial(gs) is (None if k < runtime.SERIAL_PROBES - 1 else True)

@pytest.mark.parametrize("ren", RENDERERS)
def test_prepared_launch_reads_new_contents(ren):
  # a prepared launch keeps its buffers: new inputs written into them give new outputs, as a replay needs
  dev, prg = _program(ren)
  rs = np.random.default_rng(2)
  x, y = rs.standard_normal((2, NB * W)).astype(np.float32)
  hs = _bufs(dev, [np.zeros(NB * W, np.float32), x, y])
  call = prg.prepare(*hs, global_size=(NB, 1, 1))
  for _ in range(runtime.SERIAL_PROBES + 2):
    x, y = rs.standard_normal((2, NB * W)).astype(np.float32)
    dev.allocator._copyin(hs[1], memoryview(x).cast("B"))
    dev.allocator._copyin(hs[2], memoryview(y).cast("B"))
    call()
    np.testing.assert_array_equal(_read(dev, hs[0]), _want(x, y))

@pytest.mark.parametrize("serial_us", [0.0, 1e9])
def test_prepared_launch_reports_a_fault_once_its_block_count_is_settled(serial_us, monkeypatch):
  # past the probing launches a prepared launch calls the native launch itself: a faulting block still raises KernelFault naming
  # the kernel and the address, and the device goes on
  from core.device.compiled import KernelFault
  monkeypatch.setattr(runtime, "SERIAL_US", serial_us)
  dev, prg = _program("C")
  rs = np.random.default_rng(6)
  x, y = rs.standard_normal((2, NB * W)).astype(np.float32)
  hs = _bufs(dev, [np.zeros(NB * W, np.float32), x, y])
  good, wild = prg.prepare(*hs, global_size=(NB, 1, 1)), prg.prepare(64, *hs[1:], global_size=(NB, 1, 1))   # output at address 64
  for _ in range(runtime.SERIAL_PROBES + 1): good()
  assert prg.serial((NB, 1, 1)) is (serial_us > 0)
  for _ in range(2):
    with pytest.raises(KernelFault, match="kernel ser faulted: SIGSEGV"): wild()
  good()
  np.testing.assert_array_equal(_read(dev, hs[0]), _want(x, y))

def test_prepare_refuses_too_many_arguments():
  _, prg = _program("C")
  with pytest.raises(ValueError, match="more than the 64"): prg.prepare(*([0] * 65))

@pytest.mark.parametrize("nblocks", [-NB, NB])
def test_native_negative_block_count_runs_every_block(nblocks):
  # cpu_launch itself: -n runs the same n blocks as n, on the calling thread
  import ctypes
  from plugin_cpu import native
  dev, prg = _program("C")
  x, y = np.random.default_rng(3).standard_normal((2, NB * W)).astype(np.float32)
  hs = _bufs(dev, [np.zeros(NB * W, np.float32), x, y])
  args = (ctypes.c_uint64 * 3)(*(ctypes.addressof(h) for h in hs))
  assert native.lib().cpu_launch(prg.fn, 3, args, nblocks) == 0
  np.testing.assert_array_equal(_read(dev, hs[0]), _want(x, y))
  assert native.lib().cpu_launch(prg.fn, 3, args, -(2**31)) == -1   # does not fit the kernel's int block index

# *** the command-queue path: a kernel's estimates decide, the launch packet carries a negative block count ***

def test_serial_by_estimate(monkeypatch):
  assert runtime.serial_by_estimate({"ops": 1000, "mem": 4096}) and not runtime.serial_by_estimate({})   # unknown: the pool
  assert not runtime.serial_by_estimate({"ops": runtime.SERIAL_OPS, "mem": 0})
  assert not runtime.serial_by_estimate({"ops": 10, "mem": runtime.SERIAL_MEM})
  monkeypatch.setattr(runtime, "SERIAL_OPS", 0)
  assert not runtime.serial_by_estimate({"ops": 1000, "mem": 4096})

def test_queue_runs_a_negative_block_count_packet():
  # the command processor runs every block of a LAUNCH whose count is negative (on its own thread), each once
  import ctypes, struct
  from core.device.buffer import Buffer
  from plugin_cpu import iface_hcq as H, queue as CQ
  from plugin_cpu.compiler import CCompiler
  prg = CQ.load_program("block_ids", CCompiler().compile("void block_ids(int* out, int gidx0) { out[gidx0] += gidx0 + 1; }"))
  dev = H.CPUHCQ("CPU", ring_size=4096)
  try:
    out = Buffer("CPU", 300, dtypes.int32).copyin(np.zeros(300, np.int32).tobytes())
    sig = Buffer("CPU", 1, dtypes.uint64).copyin(np.zeros(1, np.uint64).tobytes())
    ka = Buffer("CPU", 1, dtypes.uint64).copyin(struct.pack("<Q", H.buffer_addr(out)))
    words = CQ.enc_launch(ctypes.cast(prg.fxn, ctypes.c_void_p).value, H.buffer_addr(ka), 1, -300) + CQ.enc_signal(H.buffer_addr(sig), 1)
    assert CQ.decode(words)[0] == ("LAUNCH", (1, ctypes.cast(prg.fxn, ctypes.c_void_p).value, H.buffer_addr(ka), -300))
    q = dev.queue("COMPUTE:0")
    ring, size, wptr = q.buffers["ring"].as_buffer(), q.ring_size, q.value("wptr")
    for i in range(0, len(words), 4): ring[(wptr + i) % size:(wptr + i) % size + 4] = words[i:i + 4]
    q.buffers["wptr"].as_buffer().cast("Q")[0] = wptr + len(words)
    q.buffers["doorbell"].as_buffer().cast("Q")[0] = wptr + len(words)
    dev.wait_signal(sig, 1, 5)
    np.testing.assert_array_equal(np.frombuffer(out.as_buffer(), np.int32), np.arange(1, 301))
  finally: dev.close()

@pytest.mark.parametrize("serial_ops", [0, 1 << 40])
def test_tensor_ops_either_side_of_the_estimate_bound(serial_ops, monkeypatch):
  # a threaded elementwise kernel and a threaded reduction through core's command queues: the launches the pipeline encodes are
  # negative (serial) exactly when the bound lets them be, and the results match numpy either way
  from core import Tensor
  from plugin_cpu import queue as CQ
  monkeypatch.setattr(runtime, "SERIAL_OPS", serial_ops)
  monkeypatch.setattr(runtime, "SERIAL_MEM", 1 << 40)
  counts: list[int] = []
  enc = CQ.enc_launch
  monkeypatch.setattr(CQ, "enc_launch", lambda fn, ka, nargs, nb: (counts.append(nb), enc(fn, ka, nargs, nb))[1])
  n = 65536 + 3 * 1024 + (17 if serial_ops else 29)   # sizes of their own: kernels not prepared by an earlier test
  x, y = np.random.default_rng(4).standard_normal((2, n)).astype(np.float32)
  got = (Tensor(x, device="CPU") * Tensor(y, device="CPU") + 1).numpy()
  np.testing.assert_allclose(got, x * y + 1, rtol=1e-6)
  m = np.random.default_rng(5).standard_normal((256, 257 if serial_ops else 259)).astype(np.float32)
  np.testing.assert_allclose(Tensor(m, device="CPU").sum(axis=1).numpy(), m.sum(axis=1), rtol=1e-4, atol=1e-4)
  from plugin_cpu.renderer import THREADS
  if THREADS > 1:   # (with one thread the optimizer cuts no blocks)
    assert any(abs(c) > 1 for c in counts), counts
    assert all(c > 0 for c in counts) if not serial_ops else any(c < -1 for c in counts), counts
