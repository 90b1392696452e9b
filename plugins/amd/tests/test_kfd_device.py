"""KFD+AMD over the simulated driver (kfd_sim.py): the driver's argument checks (each refused with the errno the real driver gives),
topology and queue sizes, hand-built PM4/SDMA submissions through real KFD queues (doorbell units), and the device running ops
through core's pipeline (in a subprocess with DEV=KFD+AMD AMD_KFD_SIM=<arch>), compared with numpy."""
from __future__ import annotations
import ctypes, errno, json, os, struct, subprocess, sys, time
import pytest
from plugin_amd import kfd as K
from plugin_amd.kfd_sim import SimDriver, BOARDS, GPU_ID, driver_sizes

HERE = os.path.dirname(os.path.abspath(__file__))

@pytest.fixture
def drv():
  d = K.KFD(backend=SimDriver("gfx1100"))
  yield d
  for w in list(d.os.queues.values()): w.close()

def refused(err: int, fn, *args, **kw) -> str:
  with pytest.raises(K.KFDError) as e: fn(*args, **kw)
  assert e.value.errno == err, str(e.value)
  return str(e.value)

# *** opening: topology, arch, errors ***

@pytest.mark.parametrize("arch", list(BOARDS))
def test_arch_comes_from_the_topology(arch):
  d = K.KFD(backend=SimDriver(arch))
  assert d.arch == arch and d.gpu_id == GPU_ID and d.version()[0] == 1
  d.close()

@pytest.mark.parametrize("arch", list(BOARDS))
def test_queue_sizes_worked_out_like_the_driver(arch):
  # a kernel that does not export cwsr_size / ctl_stack_size: kfd.queue_sizes must reach the driver's numbers itself
  sim = SimDriver(arch, export_sizes=False)
  d = K.KFD(backend=sim)
  assert "cwsr_size" not in d.properties
  want = driver_sizes(BOARDS[arch])
  assert (d.sizes.ctl_stack, d.sizes.cwsr, d.sizes.debug_memory, d.sizes.eop) == \
         (want["ctl_stack_size"], want["cwsr_size"], want["debug_memory_size"], want["eop_buffer_size"])
  assert d.sizes.cwsr % K.PAGE == 0 and d.sizes.ctl_stack % K.PAGE == 0
  d.close()

def test_gfx1100_sizes_by_hand():
  # 96 CUs, 32 waves each: control stack 40 + 3072*12 + 8 = 0x9030 -> 0xA000; per CU 0x60000 VGPR + 0x4000 + 0x10000 + 0x1000
  s = K.queue_sizes(dict(BOARDS["gfx1100"]))
  assert s.ctl_stack == 0xA000 and s.cwsr == 0xA000 + 96 * 0x75000 and s.debug_memory == 3072 * 32

def test_unknown_arch_is_refused_by_name():
  sim = SimDriver("gfx1100")
  sim.props["gfx_target_version"] = 100300
  msg = refused(errno.ENODEV, K.KFD, backend=sim)
  assert "gfx1030" in msg and "gfx1100" in msg

def test_no_dev_kfd_says_what_to_use():
  msg = refused(errno.ENOENT, K.KFD, backend=SimDriver("gfx1100", missing=True))
  assert "needs /dev/kfd" in msg and "MOCK+AMD" in msg

def test_permission_denied_says_join_the_render_group():
  msg = refused(errno.EACCES, K.KFD, backend=SimDriver("gfx1100", denied=True))
  assert "render" in msg and "video" in msg and "usermod" in msg

def test_gpu_present_reads_the_topology():
  assert K.gpu_present(SimDriver("gfx1100")) and not K.gpu_present(SimDriver("gfx1100", missing=True))

# *** the driver's checks (errno as kfd_chardev.c / kfd_queue.c) ***

def test_alloc_checks(drv):
  refused(errno.EINVAL, drv.ioctl, "ALLOC_MEMORY_OF_GPU", K.AllocMemoryOfGpuArgs(va_addr=0x10000, size=0, gpu_id=drv.gpu_id, flags=K.MEM_GTT))
  refused(errno.EINVAL, drv.ioctl, "ALLOC_MEMORY_OF_GPU", K.AllocMemoryOfGpuArgs(va_addr=0x10000, size=4096, gpu_id=1234, flags=K.MEM_GTT))
  refused(errno.EINVAL, drv.ioctl, "ALLOC_MEMORY_OF_GPU", K.AllocMemoryOfGpuArgs(size=4096, gpu_id=drv.gpu_id, flags=K.MEM_USERPTR,
                                                                                    mmap_offset=0x1234))   # unaligned userptr
  drv.os.vram = 1 << 20
  refused(errno.ENOMEM, drv.alloc, 2 << 20, K.MEM_VRAM | K.MEM_PUBLIC)

def test_alloc_before_acquire_vm_and_a_second_vm():
  sim = SimDriver("gfx1100")
  fd = sim.open("/dev/kfd", 0)
  with pytest.raises(OSError) as e: sim.ioctl(fd, K.IOC["ALLOC_MEMORY_OF_GPU"], K.AllocMemoryOfGpuArgs(size=4096, gpu_id=GPU_ID, flags=K.MEM_GTT))
  assert e.value.errno == errno.EINVAL and "ACQUIRE_VM" in e.value.strerror
  drm1, drm2 = sim.open("/dev/dri/renderD128", 0), sim.open("/dev/dri/renderD128", 0)
  sim.ioctl(fd, K.IOC["ACQUIRE_VM"], K.AcquireVmArgs(drm_fd=drm1, gpu_id=GPU_ID))
  with pytest.raises(OSError) as e: sim.ioctl(fd, K.IOC["ACQUIRE_VM"], K.AcquireVmArgs(drm_fd=drm2, gpu_id=GPU_ID))
  assert e.value.errno == errno.EBUSY
  with pytest.raises(OSError) as e: sim.ioctl(drm1, K.IOC["GET_VERSION"], K.GetVersionArgs())   # a KFD ioctl on the render node
  assert e.value.errno == errno.ENOTTY

def test_map_free_and_mmap_checks(drv):
  m = drv.alloc(8192, K.MEM_GTT)
  ids = (K.u32 * 1)(drv.gpu_id)
  refused(errno.EINVAL, drv.ioctl, "MAP_MEMORY_TO_GPU", K.MapMemoryToGpuArgs(handle=m.handle, device_ids_array_ptr=ctypes.addressof(ids),
                                                                               n_devices=0))
  refused(errno.EINVAL, drv.ioctl, "MAP_MEMORY_TO_GPU", K.MapMemoryToGpuArgs(handle=m.handle, device_ids_array_ptr=ctypes.addressof(ids),
                                                                               n_devices=1, n_success=2))
  refused(errno.EBUSY, drv.ioctl, "FREE_MEMORY_OF_GPU", K.FreeMemoryOfGpuArgs(handle=m.handle))   # still mapped to the GPU
  refused(errno.EPERM, drv.alloc, 4096, K.MEM_VRAM)   # host mmap of VRAM allocated without PUBLIC
  with pytest.raises(OSError) as e: drv.os.mmap(0, 4096, K.PROT_READ, K.MAP_SHARED, drv.fd, 3 << 62 | (GPU_ID & 0xFFFF) << 46)
  assert e.value.errno == errno.EINVAL   # the doorbell slice is mapped whole
  drv.free(m)
  refused(errno.EINVAL, drv.ioctl, "FREE_MEMORY_OF_GPU", K.FreeMemoryOfGpuArgs(handle=m.handle))   # already freed

def _queue_parts(drv, ring_size=4096):
  ring, rw = drv.alloc(ring_size, K.MEM_GTT), drv.alloc(K.PAGE, K.MEM_GTT)
  eop = drv.alloc(drv.sizes.eop, K.MEM_VRAM, cpu=False)
  cwsr = drv.alloc(drv.sizes.cwsr_total, K.MEM_VRAM, cpu=False)
  return ring, rw, eop, cwsr

def _args(drv, ring, rw, eop, cwsr, **kw):
  a = dict(ring_base_address=ring.va, ring_size=ring.size, gpu_id=drv.gpu_id, queue_type=K.QUEUE_TYPE_COMPUTE, queue_percentage=100,
           queue_priority=7, read_pointer_address=rw.va, write_pointer_address=rw.va + 8, eop_buffer_address=eop.va,
           eop_buffer_size=drv.sizes.eop, ctx_save_restore_address=cwsr.va, ctx_save_restore_size=drv.sizes.cwsr,
           ctl_stack_size=drv.sizes.ctl_stack)
  a.update(kw)
  return K.CreateQueueArgs(**a)

@pytest.mark.parametrize("field, value, err", [
  ("queue_percentage", 101, errno.EINVAL), ("queue_priority", 16, errno.EINVAL), ("ring_size", 3000, errno.EINVAL),
  ("queue_type", 7, K.ENOTSUPP), ("gpu_id", 99, errno.EINVAL), ("ring_size", 8192, errno.EINVAL),   # the ring BO is 4096 bytes
  ("write_pointer_address", "ring+4096", errno.EINVAL), ("read_pointer_address", "nowhere", errno.EINVAL),
  ("eop_buffer_size", 1024, errno.EINVAL), ("ctl_stack_size", "ctl+4096", errno.EINVAL), ("ctx_save_restore_size", "cwsr-4096", errno.EINVAL),
  ("ctx_save_restore_address", "cwsr+4096", errno.EINVAL)])
def test_create_queue_checks(drv, field, value, err):
  ring, rw, eop, cwsr = _queue_parts(drv)
  special = {"ring+4096": ring.va + 4096, "nowhere": 0x1000, "ctl+4096": drv.sizes.ctl_stack + 4096, "cwsr-4096": drv.sizes.cwsr - 4096,
             "cwsr+4096": cwsr.va + 4096}
  refused(err, drv.ioctl, "CREATE_QUEUE", _args(drv, ring, rw, eop, cwsr, **{field: special.get(value, value)}))

def test_buffers_of_a_queue_cant_be_freed(drv):
  ring, rw, eop, cwsr = _queue_parts(drv)
  q = drv.create_queue(K.QUEUE_TYPE_COMPUTE, ring, rw, eop, cwsr)
  refused(errno.EBUSY, drv.free, ring)
  drv.destroy_queue(q.queue_id)
  refused(errno.EINVAL, drv.destroy_queue, q.queue_id)
  drv.free(ring)

# *** hand-built submissions through real KFD queues: the doorbell counts dwords (PM4) or bytes (SDMA) ***

def _wait(word: ctypes.c_uint64, value: int, what: str) -> None:
  deadline = time.monotonic() + 10
  while word.value != value:
    if time.monotonic() > deadline: raise AssertionError(f"{what}: {word.value:#x}, want {value:#x}")
    time.sleep(1e-3)

def test_sdma_and_pm4_queues_run_their_rings(drv):
  from plugin_amd import pm4, sdma
  ring_c, rw_c, eop, cwsr = _queue_parts(drv)
  qc = drv.create_queue(K.QUEUE_TYPE_COMPUTE, ring_c, rw_c, eop, cwsr)
  ring_s, rw_s = drv.alloc(4096, K.MEM_GTT), drv.alloc(K.PAGE, K.MEM_GTT)
  qs = drv.create_queue(K.QUEUE_TYPE_SDMA, ring_s, rw_s)
  assert qs.doorbell != qc.doorbell
  data = drv.alloc(8192, K.MEM_VRAM | K.MEM_PUBLIC)
  ctypes.memmove(data.va, bytes(range(256)) * 16, 4096)
  sig_bo = drv.alloc(4096, K.MEM_GTT)
  sig = ctypes.c_uint64.from_address(sig_bo.va)
  words = sdma.copy_linear("gfx1100", data.va + 4096, data.va, 4096) + sdma.fence(sig_bo.va, 5)
  ctypes.memmove(ring_s.va, struct.pack(f"<{len(words)}I", *words), 4 * len(words))
  ctypes.c_uint64.from_address(rw_s.va + 8).value = 4 * len(words)
  ctypes.c_uint64.from_address(qs.doorbell).value = 4 * len(words)   # SDMA: bytes
  _wait(sig, 5, "SDMA fence")
  assert ctypes.string_at(data.va + 4096, 4096) == ctypes.string_at(data.va, 4096)
  _wait(ctypes.c_uint64.from_address(rw_s.va), 4 * len(words), "SDMA read pointer (bytes)")
  words = pm4.release_mem("gfx1100", sig_bo.va, 77)
  ctypes.memmove(ring_c.va, struct.pack(f"<{len(words)}I", *words), 4 * len(words))
  ctypes.c_uint64.from_address(qc.doorbell).value = len(words)   # PM4 compute: dwords
  _wait(sig, 77, "PM4 RELEASE_MEM")
  _wait(ctypes.c_uint64.from_address(rw_c.va), len(words), "PM4 read pointer (dwords)")

def test_the_gpu_faults_on_memory_it_does_not_map(drv):
  from plugin_amd import sdma
  ring_s, rw_s = drv.alloc(4096, K.MEM_GTT), drv.alloc(K.PAGE, K.MEM_GTT)
  qs = drv.create_queue(K.QUEUE_TYPE_SDMA, ring_s, rw_s)
  host = (ctypes.c_uint8 * 64)()   # host memory never mapped to the GPU
  dst = drv.alloc(4096, K.MEM_GTT)
  words = sdma.copy_linear("gfx1100", dst.va, ctypes.addressof(host), 64)
  ctypes.memmove(ring_s.va, struct.pack(f"<{len(words)}I", *words), 4 * len(words))
  n = len(drv.os.faults)
  ctypes.c_uint64.from_address(qs.doorbell).value = 4 * len(words)
  deadline = time.monotonic() + 10
  while len(drv.os.faults) == n and time.monotonic() < deadline: time.sleep(1e-3)
  assert "simulated GPU's page tables" in drv.os.faults[-1] and "SDMA packet at ring byte offset 0x0" in drv.os.faults[-1]

# *** the device through core's pipeline, in a subprocess ***

FAULT = r'''
import ctypes, json, sys
sys.path.insert(0, TESTS)
from kfd_ops import run_ops
out = run_ops()
from core.device.registry import Device
from core.hcq import HCQError
from core.device.buffer import Buffer
from core.ir.dtype import dtypes
from plugin_amd import pm4
hcq = Device["AMD"].hcq
q = hcq.queue("COMPUTE:0")
bell = ctypes.c_uint64.from_address(q.q.doorbell).value
out["units"] = [ctypes.addressof(q.buffers["wptr"]._buf) == q.rw.va + 8, ctypes.addressof(q.buffers["doorbell"]._buf) == q.q.doorbell,
                q.hw_wptr.value > 0 and bell == q.hw_wptr.value == q.hw_rptr.value, hcq.ring_layout("COMPUTE:0").unit, hcq.ring_layout("COPY:0").unit]
out["queue_ids"] = sorted({q.q.queue_id, hcq.queue("COPY:0").q.queue_id})
def submit(words):
  ring, wp = q.buffers["ring"].as_buffer().cast("I"), q.buffers["wptr"].as_buffer().cast("Q")
  for i, w in enumerate(words): ring[(wp[0] + i) % len(ring)] = w   # a PM4 write pointer counts dwords
  wp[0] += len(words)
  q.buffers["doorbell"].as_buffer().cast("Q")[0] = wp[0]
sig = Buffer("AMD", 1, dtypes.uint64).allocate()
addr = ctypes.addressof(sig._buf)
unknown = next(o for o in range(1, 256) if o not in pm4.OPCODE_NAMES)
submit([pm4.header(unknown, 1), 0] + pm4.release_mem(hcq.arch, addr, 1))
try: hcq.wait_signal(sig, 1, 5.0); out["fault"] = "no error"
except HCQError as e: out["fault"] = str(e)
out["unknown"] = unknown
submit(pm4.release_mem(hcq.arch, addr, 2))
hcq.wait_signal(sig, 2, 5.0)
out["after_fault"] = sig.as_buffer().cast("Q")[0]
print("RESULT " + json.dumps(out))
'''

@pytest.fixture(scope="module", params=["gfx1100", "gfx942", "gfx1201"])
def sim_run(request) -> dict:
  env = {k: v for k, v in os.environ.items() if k not in ("DEV",)}
  env.update(DEV="KFD+AMD", AMD_KFD_SIM=request.param, HCQ_TIMEOUT="10")
  p = subprocess.run([sys.executable, "-c", f"TESTS = {HERE!r}\n" + FAULT], env=env, capture_output=True, text=True, timeout=900)
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
  assert p.returncode == 0 and lines, f"the KFD+AMD script failed:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
  return dict(json.loads(lines[-1][7:]), want_arch=request.param)

def test_device_is_kfd_on_the_installed_arch(sim_run):
  assert sim_run["hcq"] == "KFDHCQ" and sim_run["arch"] == sim_run["want_arch"]
  assert len(sim_run["queue_ids"]) == 2

def test_ops_match_numpy(sim_run):
  from kfd_ops import BOUNDS
  for op, bound in BOUNDS.items(): assert sim_run[op] <= bound, (op, sim_run[op], bound)

def test_core_writes_the_hardware_write_pointer_and_doorbell_in_the_engines_units(sim_run):
  # core's wptr/doorbell buffers are the queue's own words (no host thread in between), counted in dwords for PM4, and
  # after the ops the engine read everything the doorbell announced
  assert sim_run["units"] == [True, True, True, 4, 1]

def test_a_fault_names_the_packet_and_the_queue_recovers(sim_run):
  assert "KFD command processor reported a fault" in sim_run["fault"]
  assert f"opcode {sim_run['unknown']:#04x}" in sim_run["fault"] and "COMPUTE queue" in sim_run["fault"]
  assert sim_run["after_fault"] == 2

def test_kfd_without_a_driver_says_so():
  env = {k: v for k, v in os.environ.items() if k not in ("DEV", "AMD_KFD_SIM")}
  env["DEV"] = "KFD+AMD"
  code = "from core.tensor import Tensor\nTensor([1.0], device='AMD').numpy()"
  p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  if os.path.exists("/dev/kfd"): pytest.skip("this machine has /dev/kfd")
  assert p.returncode != 0 and "needs /dev/kfd" in p.stderr, p.stderr[-3000:]
