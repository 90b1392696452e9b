"""The one wgpu adapter and device per process: opened on first use, with the features and limits kernels may rely on."""
from __future__ import annotations
import dataclasses, functools, os, threading
from typing import Any

# the adapter's limits a kernel depends on; the device is requested with the adapter's own values (more than WebGPU's defaults)
LIMITS = ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
          "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
          "max-compute-workgroup-size-y", "max-compute-workgroup-size-z", "max-compute-workgroups-per-dimension")
FEATURES = ("shader-f16", "timestamp-query")

class NoAdapter(RuntimeError):
  """wgpu found no WebGPU adapter (no Vulkan, Metal or D3D12 driver it can use)."""

def import_wgpu() -> Any:
  """wgpu, imported with XDG_RUNTIME_DIR set (Mesa's Vulkan loader warns on every start without one)."""
  if not os.environ.get("XDG_RUNTIME_DIR"):
    import tempfile   # here, not at the top: the plugin's availability check imports this module at every start
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="core-webgpu-xdg-")
  try: import wgpu
  except ImportError as e:
    raise NoAdapter(f"WEBGPU needs the wgpu package: pip install ./plugins/webgpu (or pip install wgpu): {e}") from e
  return wgpu

@dataclasses.dataclass
class GPU:
  """An open wgpu device. `limits` and `features` are what was granted; `lock` serializes submissions from several threads."""
  wgpu: Any
  adapter: Any
  device: Any
  features: frozenset[str]
  limits: dict[str, int]
  lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)

  @property
  def f16(self) -> bool: return "shader-f16" in self.features
  @property
  def offset_alignment(self) -> int: return int(self.device.limits["min-storage-buffer-offset-alignment"])
  def describe(self) -> str:
    info = self.adapter.info
    return f"{info.get('device', '?')} ({info.get('backend_type', '?')}, {info.get('description', '')})"

_lock = threading.Lock()

@functools.cache
def _open() -> GPU:
  wgpu = import_wgpu()
  adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
  if adapter is None:
    raise NoAdapter("wgpu found no WebGPU adapter: install a Vulkan driver (Debian: apt install mesa-vulkan-drivers libvulkan1 "
                    "for the lavapipe software GPU), or use another device, e.g. DEV=CPU")
  feats = frozenset(f for f in FEATURES if f in adapter.features)
  limits = {k: int(adapter.limits[k]) for k in LIMITS if k in adapter.limits}
  device = adapter.request_device_sync(required_features=sorted(feats), required_limits=limits)
  return GPU(wgpu, adapter, device, feats, limits)

def gpu() -> GPU:
  """The process's WebGPU device (opened now if it is not yet). Raises NoAdapter, naming the fix, when there is none."""
  with _lock:
    try: return _open()
    except NoAdapter: raise
    except Exception as e:
      raise NoAdapter(f"wgpu could not open a WebGPU device: {type(e).__name__}: {e}. Install a Vulkan driver (Debian: apt install "
                      f"mesa-vulkan-drivers libvulkan1) or use another device, e.g. DEV=CPU") from e

@functools.cache
def _has_vulkan_loader() -> bool:
  # the dynamic linker's cache names every library it finds by soname; ctypes.util.find_library would run ldconfig for the
  # same answer (a process spawn, tens of ms on every start: the default device is picked by asking every plugin)
  for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
    if d and os.path.exists(os.path.join(d, "libvulkan.so.1")): return True
  try:
    with open("/etc/ld.so.cache", "rb") as f:
      if b"libvulkan.so.1\0" in f.read(): return True
  except OSError: pass
  import ctypes.util
  return ctypes.util.find_library("vulkan") is not None

def unavailable_reason() -> str | None:
  """Why the device can't open here, found without opening a driver (None: it may open): wgpu missing, or no Vulkan loader."""
  import importlib.util
  if importlib.util.find_spec("wgpu") is None: return "the wgpu package is not installed (pip install ./plugins/webgpu)"
  if os.name != "posix" or os.uname().sysname == "Darwin": return None   # Metal / D3D12: nothing to check without opening
  if not _has_vulkan_loader(): return "no Vulkan loader (libvulkan.so.1): apt install libvulkan1 mesa-vulkan-drivers"
  dirs = [os.path.join(d, "vulkan", "icd.d") for d in ("/usr/share", "/usr/local/share", "/etc",
          *os.environ.get("XDG_DATA_DIRS", "").split(":")) if d]
  if not os.environ.get("VK_ICD_FILENAMES") and not os.environ.get("VK_DRIVER_FILES") and \
     not any(os.path.isdir(d) and any(f.endswith(".json") for f in os.listdir(d)) for d in dirs):
    return "no Vulkan driver (no ICD in /usr/share/vulkan/icd.d): apt install mesa-vulkan-drivers for lavapipe, or a GPU driver"
  return None
