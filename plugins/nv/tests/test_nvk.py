"""The NVK interface's RM code (plugin_nv.nvk) over the simulated driver (plugin_nv.nvk_sim): the object tree it builds, the arch
it reads, the checks the simulated driver makes on every ioctl (bad handles, wrong parents, wrong sizes, other archs' classes),
and the op suite's kernels on NVK+NV for three archs (a subprocess each, NVK_SIM=<arch>). The whole conformance suite runs on
NVK+NV in CI (pyproject's [tool.core] conformance)."""
from __future__ import annotations
import ctypes, errno, json, mmap, os, subprocess, sys
import pytest
from plugin_nv import rm_abi as R
from plugin_nv.nvk import RM, RMError, arch_of
from plugin_nv.nvk_sim import SimDriver

@pytest.fixture(scope="module")
def rm() -> RM: return RM(os_=SimDriver("sm_90"))

def test_the_object_tree(rm: RM):
  objs = rm.os.objs   # type: ignore[attr-defined]
  cls = {h: o.cls for (_, h), o in objs.items()}
  assert cls[rm.root] == R.NV01_ROOT_CLIENT and cls[rm.device] == R.NV01_DEVICE_0 and cls[rm.subdevice] == R.NV20_SUBDEVICE_0
  assert cls[rm.usermode] == R.HOPPER_USERMODE_A and cls[rm.vaspace] == R.FERMI_VASPACE_A and cls[rm.virtual] == R.NV50_MEMORY_VIRTUAL
  ch = rm.channel("compute")
  assert cls_of(rm, ch.group) == R.KEPLER_CHANNEL_GROUP_A and cls_of(rm, ch.handle) == 0xC86F and cls_of(rm, ch.engine) == 0xCBC0
  ch2 = rm.channel("copy")
  assert cls_of(rm, ch2.engine) == 0xC8B5 and ch2.token != ch.token

def cls_of(rm: RM, h: int) -> int: return rm.os.objs[(rm.root, h)].cls   # type: ignore[attr-defined]

def test_memory_is_at_one_address_for_cpu_and_gpu(rm: RM):
  mem = rm.alloc_memory(3 * 4096 + 5, vidmem=True)
  assert mem.size == 4 * 4096
  ctypes.c_uint32.from_address(mem.va + 8).value = 0xC0FFEE
  assert rm.os.vm.u32(mem.va + 8) == 0xC0FFEE   # type: ignore[attr-defined]  # the GPU reads what the CPU wrote, at the same address
  rm.free_memory(mem)
  with pytest.raises(Exception, match="not mapped"): rm.os.vm.u32(mem.va + 8)   # type: ignore[attr-defined]

@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"])
def test_the_arch_comes_from_the_driver(arch: str):
  r = RM(os_=SimDriver(arch))
  assert r.arch == arch
  assert cls_of(r, r.usermode) == (R.HOPPER_USERMODE_A if arch in ("sm_90", "sm_100", "sm_120") else R.VOLTA_USERMODE_A)

def test_arch_of_unknown_architecture():
  assert arch_of(R.ARCHITECTURE_GA100, 0) == "sm_80" and arch_of(R.ARCHITECTURE_GB200, 2) == "sm_120"
  with pytest.raises(RMError, match="architecture 0x160 is not one this plugin targets"): arch_of(0x160, 0)

def test_bad_handle_wrong_parent_wrong_params(rm: RM):
  with pytest.raises(RMError, match=r"status 0x33 \(NV_ERR_INVALID_OBJECT_HANDLE\); simulated driver: parent 0xdeadbeef is not an object"):
    rm.alloc(0xDEADBEEF, R.FERMI_VASPACE_A, R.NV_VASPACE_ALLOCATION_PARAMETERS())
  with pytest.raises(RMError, match=r"NV_ERR_INVALID_OBJECT_PARENT.*class 0x90f1 lives under 0x80, not under .* \(class 0x2080\)"):
    rm.alloc(rm.subdevice, R.FERMI_VASPACE_A, R.NV_VASPACE_ALLOCATION_PARAMETERS())
  with pytest.raises(RMError, match=r"NV_ERR_INVALID_PARAM_STRUCT.*NV_VASPACE_ALLOCATION_PARAMETERS \(56 bytes\), paramsSize is 4"):
    rm.alloc(rm.device, R.FERMI_VASPACE_A, R.NV2080_ALLOC_PARAMETERS())
  with pytest.raises(RMError, match=r"NV_ERR_INSERT_DUPLICATE_NAME.*handle .* is in use"):
    rm.alloc(rm.device, R.FERMI_VASPACE_A, R.NV_VASPACE_ALLOCATION_PARAMETERS(), handle=rm.vaspace)
  with pytest.raises(RMError, match=r"NV_ERR_INVALID_CLASS.*class 0x1234"): rm.alloc(rm.device, 0x1234)
  with pytest.raises(RMError, match=r"NV_ERR_INVALID_OBJECT.*control 0xc36f0108 is for class 0xc86f"):
    rm.control(rm.device, R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN, R.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS())
  with pytest.raises(RMError, match=r"NV_ERR_NOT_SUPPORTED.*control 0x20800101"): rm.control(rm.subdevice, 0x20800101, R.NV2080_ALLOC_PARAMETERS())

def test_other_archs_classes_are_refused(rm: RM):
  ch = rm.channel("compute")
  with pytest.raises(RMError, match=r"NV_ERR_NOT_SUPPORTED.*class 0xc7c0 is not supported on this GPU \(sm_90\)"): rm.alloc(ch.handle, 0xC7C0)
  with pytest.raises(RMError, match=r"NV_ERR_NOT_SUPPORTED.*has an engine object already"): rm.alloc(ch.handle, 0xC8B5)

def test_channel_checks(rm: RM):
  group = rm.alloc(rm.device, R.KEPLER_CHANNEL_GROUP_A, R.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(hVASpace=rm.vaspace, engineType=1))
  ctx = rm.alloc(group, R.FERMI_CONTEXT_SHARE_A, R.NV_CTXSHARE_ALLOCATION_PARAMETERS(hVASpace=rm.vaspace))
  ring, userd = rm.alloc_memory(8 * 64), rm.alloc_memory(4096)
  def params(**kw: int) -> R.NV_CHANNEL_ALLOC_PARAMS:
    p = R.NV_CHANNEL_ALLOC_PARAMS(hObjectError=userd.handle, hObjectBuffer=ring.handle, gpFifoOffset=ring.va, gpFifoEntries=64, hContextShare=ctx)
    p.hUserdMemory[0] = userd.handle
    for k, v in kw.items(): setattr(p, k, v)
    return p
  with pytest.raises(RMError, match="gpFifoEntries 48 is not a power of two"): rm.alloc(group, 0xC86F, params(gpFifoEntries=48))
  with pytest.raises(RMError, match="NV_ERR_INVALID_OFFSET.*not inside a GPU mapping of hObjectBuffer"): rm.alloc(group, 0xC86F, params(gpFifoOffset=ring.va + 4096))
  with pytest.raises(RMError, match="hContextShare .* is not an object"): rm.alloc(group, 0xC86F, params(hContextShare=0x77))
  with pytest.raises(RMError, match="NV_ERR_INVALID_STATE.*no channel with an engine object"):
    rm.control(group, R.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, R.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(bEnable=1))
  rm.alloc(group, 0xC86F, params())   # the same parameters, valid

def test_ioctl_level_refusals(rm: RM):
  sim = rm.os
  with pytest.raises(OSError, match=r"takes NVOS21_PARAMETERS \(32 bytes\) or NVOS64_PARAMETERS \(48 bytes\); got NVOS21_PARAMETERS with a size field of 40") as e:
    sim.ioctl(rm.ctl, R.ioctl_request(R.NV_ESC_RM_ALLOC, 40), R.NVOS21_PARAMETERS())
  assert e.value.errno == errno.EINVAL
  with pytest.raises(OSError, match="takes NVOS54_PARAMETERS"): sim.ioctl(rm.ctl, R.ioctl_request(R.NV_ESC_RM_CONTROL, 32), R.NVOS21_PARAMETERS())
  with pytest.raises(OSError, match="not an NVIDIA _IOWR"): sim.ioctl(rm.ctl, 0xC0204B2B, R.NVOS21_PARAMETERS())
  dev = sim.open("/dev/nvidia0", os.O_RDWR)
  with pytest.raises(OSError, match="RM ioctls on /dev/nvidiactl"): sim.ioctl(dev, R.ioctl_request(R.NV_ESC_RM_ALLOC, 32), R.NVOS21_PARAMETERS())
  with pytest.raises(OSError, match="RM_MAP_MEMORY bound no memory"): sim.mmap(0, 4096, 3, 1, dev, 0)
  with pytest.raises(OSError, match="REGISTER_FD: fd 12345 is not /dev/nvidiactl"):
    sim.ioctl(dev, R.ioctl_request(R.NV_ESC_REGISTER_FD, 4), R.nv_ioctl_register_fd_t(ctl_fd=12345))
  sim.close(dev)

def test_gpu_mappings_must_be_fixed_and_cpu_mapped(rm: RM):
  params = R.NV_MEMORY_ALLOCATION_PARAMS(owner=rm.root, size=4096, attr=R.NVOS32_ATTR_LOCATION_PCI)
  h = rm.alloc(rm.device, R.NV01_MEMORY_SYSTEM, params)
  with pytest.raises(RMError, match="must be where this memory is mapped for the CPU"): rm.map_gpu(h, 4096, 1 << 37)
  with pytest.raises(RMError, match="NV01_MEMORY_SYSTEM with attr LOCATION 0, not PCI"):
    rm.alloc(rm.device, R.NV01_MEMORY_SYSTEM, R.NV_MEMORY_ALLOCATION_PARAMS(owner=rm.root, size=4096))

def test_host_memory_of_others_is_mapped_for_the_gpu(rm: RM):
  page = mmap.mmap(-1, 4096)   # a page RM did not allocate (as another device's semaphore)
  host = (ctypes.c_uint64 * 3).from_buffer(page)
  host[:] = [7, 8, 9]
  addr = ctypes.addressof(host)
  va = rm.gpu_address(addr + 8, 8)
  assert rm.os.vm.u64(va) == 8   # type: ignore[attr-defined]
  assert rm.gpu_address(addr + 16, 8) == va + 8   # the same page range, mapped once
  mem = rm.alloc_memory(4096)
  assert rm.gpu_address(mem.va + 16, 8) == mem.va + 16   # its own memory: the host address
  rm.free_memory(mem)

def test_channel_serves_gpfifo_entries_and_checks_the_doorbell(rm: RM):
  import time
  from plugin_nv import pushbuf as pb
  ch = rm.channel("compute")
  seg = rm.alloc_memory(4096)
  words = pb.incr(pb.SUBCH_COMPUTE, pb.SET_OBJECT, ch.engine_class)
  for i, w in enumerate(words): ctypes.c_uint32.from_address(seg.va + 4 * i).value = w
  def submit(put: int, token: int) -> None:
    e0, e1 = pb.gp_entry(seg.va, len(words))
    ctypes.c_uint64.from_address(ch.gpfifo.va + 8 * (put - 1)).value = e0 | e1 << 32
    ctypes.c_uint32.from_address(ch.userd.va + pb.USERD_GP_PUT).value = put
    rm.ring_doorbell(token)
    rm.os.kick()   # type: ignore[attr-defined]
  def gp_get() -> int: return ctypes.c_uint32.from_address(ch.userd.va + pb.USERD_GP_GET).value
  submit(1, ch.token)
  deadline = time.monotonic() + 20
  while gp_get() != 1 and time.monotonic() < deadline: time.sleep(0.01)
  assert gp_get() == 1   # the simulated GPU fetched the entry and ran SET_OBJECT
  faults = len(rm.os.faults)   # type: ignore[attr-defined]
  submit(2, 0xDEAD)
  while len(rm.os.faults) == faults and time.monotonic() < deadline: time.sleep(0.01)   # type: ignore[attr-defined]
  assert "the doorbell holds 0xdead, which is no channel's work-submit token" in rm.os.faults[-1]   # type: ignore[attr-defined]
  rm.ring_doorbell(ch.token)

def test_missing_and_denied_device_nodes():
  with pytest.raises(OSError, match="NVK\\+NV needs /dev/nvidiactl .*Use MOCK\\+NV"): RM(os_=SimDriver("sm_90", missing=True))
  with pytest.raises(OSError, match="permission denied opening /dev/nvidiactl") as e: RM(os_=SimDriver("sm_90", denied=True))
  assert e.value.errno == errno.EACCES

SCRIPT = r'''
import json, numpy as np
from core import Tensor
from core.device.registry import Device
rng = np.random.default_rng(0)
a, b = rng.standard_normal((37, 19)).astype(np.float32), rng.standard_normal((19, 11)).astype(np.float32)
out = {"matmul": float(np.abs((Tensor(a) @ Tensor(b)).numpy() - a @ b).max()),
       "reduce": float(abs(Tensor(a).sum().numpy() - a.sum())),
       "exp": float(np.abs(Tensor(a).exp().numpy() - np.exp(a)).max() / np.exp(a).max()),
       "half": float(np.abs(Tensor(a).half().relu().numpy().astype(np.float32) - np.maximum(a.astype(np.float16), 0)).max()),
       "arch": Device[Device.DEFAULT].hcq.arch, "kind": Device[Device.DEFAULT].hcq.kind}
# across devices: with the CPU plugin (an HCQ device) its queues wait on this device's semaphores (published by this device's
# own thread) and the other way round (its semaphores mapped for the GPU); without it (the plugin's CI job), PYTHON
import importlib.util
other = "CPU" if importlib.util.find_spec("plugin_cpu") else "PYTHON"
c = Tensor(a, device=other) + 1
out["cross"] = float(np.abs(((c.to(Device.DEFAULT) * 2).to(other) + c).numpy() - 3 * (a + 1)).max())
print("RESULT " + json.dumps(out))
'''

@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_ops_on_nvk_sim(arch: str):
  env = dict(os.environ, DEV="NVK+NV", NVK_SIM=arch)
  p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
  line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
  assert line is not None, p.stdout[-2000:] + p.stderr[-4000:]
  r = json.loads(line[7:])
  assert r["arch"] == arch and r["kind"] == "NVK"
  assert r["matmul"] < 1e-4 and r["reduce"] < 1e-3 and r["exp"] < 1e-5 and r["half"] == 0.0 and r["cross"] < 1e-5

UNWAITED = r'''
from core.testing.helpers import unwaited_resubmits_land
from plugin_nv.iface_nvk import NVKHCQ
NVKHCQ._publish_loop = lambda self: None   # no publisher thread: only the host's own calls hand the GPU what core announced
print("RESULT", *unwaited_resubmits_land())
'''

def test_a_submission_nobody_waits_for_is_published():
  # core's submitted_without_wait() (a run with wait=False) publishes the channels' new ring words as a wait does; left to the
  # publisher thread (stopped here) they reached the GPU 0.2-10 ms later, or never without it
  env = dict(os.environ, DEV="NVK+NV", NVK_SIM="sm_90")
  p = subprocess.run([sys.executable, "-c", UNWAITED], env=env, capture_output=True, text=True, timeout=600)
  line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
  assert line is not None, p.stdout[-2000:] + p.stderr[-4000:]
  n, done = map(int, line.split()[1:])
  assert n >= 1 and done == n
