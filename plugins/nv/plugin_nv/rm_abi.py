"""The NVIDIA kernel driver's resource-manager (RM) ioctl ABI that the NVK interface speaks (nvk.py; nvk_sim.py serves the same
ABI in process): structures, escapes, classes, control commands and status codes, checked against the open kernel modules'
headers by tests/test_rm_abi.py.

From NVIDIA/open-gpu-kernel-modules: src/common/sdk/nvidia/inc/nvos.h (NVOS00/02/21/33/54/64_PARAMETERS, the channel group and
memory allocation parameters), alloc/alloc_channel.h (NV_CHANNEL_ALLOC_PARAMS), ctrl/ctrlc36f.h (the work-submit token),
src/nvidia/arch/nvalloc/unix/include/nv_escape.h and nv-unix-nvos-params-wrappers.h (escape numbers, the with-fd wrappers),
kernel-open/common/inc/nv-ioctl-numbers.h and nv-ioctl.h (NV_IOCTL_MAGIC 'F', NV_IOCTL_BASE 200, nv_ioctl_register_fd_t).
Types: NvHandle/NvV32/NvU32 are 32-bit, NvP64/NvU64 64-bit and 8-byte aligned, NvBool one byte."""
from __future__ import annotations
import ctypes

u8, u32, s32, u64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64
NV_MAX_SUBDEVICES = 8
CC_CHAN_ALLOC_IV_SIZE_DWORD, CC_CHAN_ALLOC_NONCE_SIZE_DWORD = 3, 8

class NVOS00_PARAMETERS(ctypes.Structure):   # NV_ESC_RM_FREE
  _fields_ = [("hRoot", u32), ("hObjectParent", u32), ("hObjectOld", u32), ("status", u32)]

class NVOS02_PARAMETERS(ctypes.Structure):   # NV_ESC_RM_ALLOC_MEMORY (system memory)
  _fields_ = [("hRoot", u32), ("hObjectParent", u32), ("hObjectNew", u32), ("hClass", u32), ("flags", u32), ("pMemory", u64),
              ("limit", u64), ("status", u32)]

class NVOS21_PARAMETERS(ctypes.Structure):   # NV_ESC_RM_ALLOC
  _fields_ = [("hRoot", u32), ("hObjectParent", u32), ("hObjectNew", u32), ("hClass", u32), ("pAllocParms", u64), ("paramsSize", u32),
              ("status", u32)]

class NVOS64_PARAMETERS(ctypes.Structure):   # NV_ESC_RM_ALLOC with access rights
  _fields_ = [("hRoot", u32), ("hObjectParent", u32), ("hObjectNew", u32), ("hClass", u32), ("pAllocParms", u64), ("pRightsRequested", u64),
              ("paramsSize", u32), ("flags", u32), ("status", u32)]

class NVOS33_PARAMETERS(ctypes.Structure):   # NV_ESC_RM_MAP_MEMORY
  _fields_ = [("hClient", u32), ("hDevice", u32), ("hMemory", u32), ("offset", u64), ("length", u64), ("pLinearAddress", u64),
              ("status", u32), ("flags", u32)]

class NVOS54_PARAMETERS(ctypes.Structure):   # NV_ESC_RM_CONTROL
  _fields_ = [("hClient", u32), ("hObject", u32), ("cmd", u32), ("flags", u32), ("params", u64), ("paramsSize", u32), ("status", u32)]

class nv_ioctl_nvos02_parameters_with_fd(ctypes.Structure):
  _fields_ = [("params", NVOS02_PARAMETERS), ("fd", ctypes.c_int)]

class nv_ioctl_nvos33_parameters_with_fd(ctypes.Structure):
  _fields_ = [("params", NVOS33_PARAMETERS), ("fd", ctypes.c_int)]

class nv_ioctl_register_fd_t(ctypes.Structure):
  _fields_ = [("ctl_fd", ctypes.c_int)]

class NV_MEMORY_DESC_PARAMS(ctypes.Structure):
  _fields_ = [("base", u64), ("size", u64), ("addressSpace", u32), ("cacheAttrib", u32)]

class NV_CHANNEL_ALLOC_PARAMS(ctypes.Structure):   # a GPFIFO channel (AMPERE/HOPPER/BLACKWELL_CHANNEL_GPFIFO_A)
  _fields_ = [("hObjectError", u32), ("hObjectBuffer", u32), ("gpFifoOffset", u64), ("gpFifoEntries", u32), ("flags", u32),
              ("hContextShare", u32), ("hVASpace", u32), ("hUserdMemory", u32 * NV_MAX_SUBDEVICES), ("userdOffset", u64 * NV_MAX_SUBDEVICES),
              ("engineType", u32), ("cid", u32), ("subDeviceId", u32), ("hObjectEccError", u32),
              ("instanceMem", NV_MEMORY_DESC_PARAMS), ("userdMem", NV_MEMORY_DESC_PARAMS), ("ramfcMem", NV_MEMORY_DESC_PARAMS),
              ("mthdbufMem", NV_MEMORY_DESC_PARAMS), ("hPhysChannelGroup", u32), ("internalFlags", u32),
              ("errorNotifierMem", NV_MEMORY_DESC_PARAMS), ("eccErrorNotifierMem", NV_MEMORY_DESC_PARAMS), ("ProcessID", u32),
              ("SubProcessID", u32), ("encryptIv", u32 * CC_CHAN_ALLOC_IV_SIZE_DWORD), ("decryptIv", u32 * CC_CHAN_ALLOC_IV_SIZE_DWORD),
              ("hmacNonce", u32 * CC_CHAN_ALLOC_NONCE_SIZE_DWORD), ("tpcConfigID", u32)]

class NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(ctypes.Structure):   # KEPLER_CHANNEL_GROUP_A
  _fields_ = [("hObjectError", u32), ("hObjectEccError", u32), ("hVASpace", u32), ("engineType", u32), ("bIsCallingContextVgpuPlugin", u8)]

class NV_MEMORY_ALLOCATION_PARAMS(ctypes.Structure):   # NV1_MEMORY_USER / NV01_MEMORY_LOCAL_USER
  _fields_ = [("owner", u32), ("type", u32), ("flags", u32), ("width", u32), ("height", u32), ("pitch", s32), ("attr", u32), ("attr2", u32),
              ("format", u32), ("comprCovg", u32), ("zcullCovg", u32), ("rangeLo", u64), ("rangeHi", u64), ("size", u64), ("alignment", u64),
              ("offset", u64), ("limit", u64), ("address", u64), ("ctagOffset", u32), ("hVASpace", u32), ("internalflags", u32), ("tag", u32),
              ("numaNode", s32)]

class NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS(ctypes.Structure):
  _fields_ = [("workSubmitToken", u32)]

class NV0080_ALLOC_PARAMETERS(ctypes.Structure):   # NV01_DEVICE_0 (class/cl0080.h)
  _fields_ = [("deviceId", u32), ("hClientShare", u32), ("hTargetClient", u32), ("hTargetDevice", u32), ("flags", u32),
              ("vaSpaceSize", u64), ("vaStartInternal", u64), ("vaLimitInternal", u64), ("vaMode", u32)]

class NV2080_ALLOC_PARAMETERS(ctypes.Structure):   # NV20_SUBDEVICE_0 (class/cl2080.h)
  _fields_ = [("subDeviceId", u32)]

class NV_VASPACE_ALLOCATION_PARAMETERS(ctypes.Structure):   # FERMI_VASPACE_A (nvos.h)
  _fields_ = [("index", u32), ("flags", u32), ("vaSize", u64), ("vaStartInternal", u64), ("vaLimitInternal", u64), ("bigPageSize", u32),
              ("vaBase", u64), ("pasid", u32)]

class NV_CTXSHARE_ALLOCATION_PARAMETERS(ctypes.Structure):   # FERMI_CONTEXT_SHARE_A (nvos.h)
  _fields_ = [("hVASpace", u32), ("flags", u32), ("subctxId", u32)]

class NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS(ctypes.Structure):   # NV50_MEMORY_VIRTUAL (class/cl0070.h)
  _fields_ = [("offset", u64), ("limit", u64), ("hVASpace", u32)]

class NVOS46_PARAMETERS(ctypes.Structure):   # NV_ESC_RM_MAP_MEMORY_DMA: memory into a GPU virtual address range
  _fields_ = [("hClient", u32), ("hDevice", u32), ("hDma", u32), ("hMemory", u32), ("offset", u64), ("length", u64), ("flags", u32),
              ("flags2", u32), ("kindOverride", u32), ("dmaOffset", u64), ("status", u32)]

NV0000_CTRL_GPU_MAX_PROBED_GPUS = 32   # NV_MAX_DEVICES

class NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS(ctypes.Structure):   # ctrl/ctrl0000/ctrl0000gpu.h
  _fields_ = [("gpuIds", u32 * NV0000_CTRL_GPU_MAX_PROBED_GPUS), ("excludedGpuIds", u32 * NV0000_CTRL_GPU_MAX_PROBED_GPUS),
              ("gpuFlags", u32 * NV0000_CTRL_GPU_MAX_PROBED_GPUS)]

class NV0000_CTRL_GPU_ATTACH_IDS_PARAMS(ctypes.Structure):
  _fields_ = [("gpuIds", u32 * NV0000_CTRL_GPU_MAX_PROBED_GPUS), ("failedId", u32)]

class NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS(ctypes.Structure):
  _fields_ = [("gpuId", u32), ("gpuFlags", u32), ("deviceInstance", u32), ("subDeviceInstance", u32), ("sliStatus", u32), ("boardId", u32),
              ("gpuInstance", u32), ("numaId", s32)]

class NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS(ctypes.Structure):   # ctrl/ctrl2080/ctrl2080mc.h
  _fields_ = [("architecture", u32), ("implementation", u32), ("revision", u32), ("subRevision", u8)]

class NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(ctypes.Structure):   # ctrl/ctrla06f/ctrla06fgpfifo.h (NVA06F_..., typedef'd for A06C)
  _fields_ = [("bEnable", u8), ("bSkipSubmit", u8), ("bSkipEnable", u8)]

# escapes (nv_escape.h, nv-ioctl-numbers.h) and control commands (ctrlc36f.h)
NV_IOCTL_MAGIC, NV_IOCTL_BASE = ord("F"), 200
NV_ESC_REGISTER_FD = NV_IOCTL_BASE + 1
NV_ESC_RM_ALLOC_MEMORY, NV_ESC_RM_FREE, NV_ESC_RM_CONTROL, NV_ESC_RM_ALLOC = 0x27, 0x29, 0x2A, 0x2B
NV_ESC_RM_MAP_MEMORY, NV_ESC_RM_UNMAP_MEMORY = 0x4E, 0x4F
NV_ESC_RM_MAP_MEMORY_DMA, NV_ESC_RM_UNMAP_MEMORY_DMA = 0x57, 0x58
NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN = 0xC36F0108
NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, NV0000_CTRL_CMD_GPU_GET_PROBED_IDS, NV0000_CTRL_CMD_GPU_ATTACH_IDS = 0x205, 0x214, 0x215
NV2080_CTRL_CMD_MC_GET_ARCH_INFO = 0x20801701
NVA06C_CTRL_CMD_GPFIFO_SCHEDULE = 0xA06C0101

# classes (class/cl*.h); the GPFIFO, compute and copy classes per arch are in qmd.ARCHS
NV01_ROOT_CLIENT, NV01_DEVICE_0, NV20_SUBDEVICE_0 = 0x41, 0x80, 0x2080
NV01_MEMORY_SYSTEM, NV01_MEMORY_LOCAL_USER, NV01_MEMORY_SYSTEM_OS_DESCRIPTOR = 0x3E, 0x40, 0x71
NV50_MEMORY_VIRTUAL, FERMI_VASPACE_A, FERMI_CONTEXT_SHARE_A, KEPLER_CHANNEL_GROUP_A = 0x50A0, 0x90F1, 0x9067, 0xA06C
VOLTA_USERMODE_A, HOPPER_USERMODE_A = 0xC361, 0xC661
USERMODE_SIZE = 0x10000
NV2080_ENGINE_TYPE_GRAPHICS, NV2080_ENGINE_TYPE_COPY0 = 0x1, 0x9
# NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_*
ARCHITECTURE_GA100, ARCHITECTURE_GH100, ARCHITECTURE_AD100, ARCHITECTURE_GB100, ARCHITECTURE_GB200 = 0x170, 0x180, 0x190, 0x1A0, 0x1B0

# NV_MEMORY_ALLOCATION_PARAMS fields (nvos.h NVOS32_*): type IMAGE, attr LOCATION 26:25 (VIDMEM 0, PCI 1), PHYSICALITY 28:27,
# COHERENCY 31:29, PAGE_SIZE 24:23; attr2 GPU_CACHEABLE 3:2; flags ALIGNMENT_FORCE, MAP_NOT_REQUIRED
NVOS32_TYPE_IMAGE = 0
NVOS32_ATTR_LOCATION_VIDMEM, NVOS32_ATTR_LOCATION_PCI = 0 << 25, 1 << 25
NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS = 3 << 27
NVOS32_ATTR_COHERENCY_UNCACHED, NVOS32_ATTR_COHERENCY_CACHED, NVOS32_ATTR_COHERENCY_WRITE_COMBINE = 0 << 29, 1 << 29, 2 << 29
NVOS32_ATTR_PAGE_SIZE_4KB, NVOS32_ATTR_PAGE_SIZE_HUGE = 1 << 23, 3 << 23
NVOS32_ATTR2_GPU_CACHEABLE_YES, NVOS32_ATTR2_GPU_CACHEABLE_NO = 1 << 2, 2 << 2
NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE, NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED = 0x100, 0x8000
# NVOS02 flags (host memory described by its address, NV01_MEMORY_SYSTEM_OS_DESCRIPTOR): PHYSICALITY 7:4 (NONCONTIGUOUS 1),
# LOCATION 11:8 (PCI 0), COHERENCY 15:12 (CACHED 1)
NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS, NVOS02_FLAGS_LOCATION_PCI, NVOS02_FLAGS_COHERENCY_CACHED = 1 << 4, 0 << 8, 1 << 12
# NVOS46 flags: CACHE_SNOOP 4:4, PAGE_SIZE 11:8 (4KB = 1), DMA_OFFSET_FIXED 15:15
NVOS46_FLAGS_CACHE_SNOOP_ENABLE, NVOS46_FLAGS_PAGE_SIZE_4KB, NVOS46_FLAGS_DMA_OFFSET_FIXED = 1 << 4, 1 << 8, 1 << 15
# NVOS33 flags: CACHING_TYPE 25:23 (CACHED 0, UNCACHED 1, WRITECOMBINED 2)
NVOS33_FLAGS_CACHING_TYPE_CACHED, NVOS33_FLAGS_CACHING_TYPE_WRITECOMBINED = 0 << 23, 2 << 23

# status codes (nvstatuscodes.h)
STATUS = {0x19: "NV_ERR_INSERT_DUPLICATE_NAME", 0x1F: "NV_ERR_INVALID_ARGUMENT", 0x22: "NV_ERR_INVALID_CLASS", 0x24: "NV_ERR_INVALID_COMMAND",
          0x26: "NV_ERR_INVALID_DEVICE", 0x29: "NV_ERR_INVALID_FLAGS", 0x2E: "NV_ERR_INVALID_LIMIT", 0x31: "NV_ERR_INVALID_OBJECT",
          0x33: "NV_ERR_INVALID_OBJECT_HANDLE", 0x34: "NV_ERR_INVALID_OBJECT_NEW", 0x36: "NV_ERR_INVALID_OBJECT_PARENT",
          0x37: "NV_ERR_INVALID_OFFSET", 0x3A: "NV_ERR_INVALID_PARAM_STRUCT", 0x40: "NV_ERR_INVALID_STATE", 0x51: "NV_ERR_NO_MEMORY",
          0x56: "NV_ERR_NOT_SUPPORTED", 0x57: "NV_ERR_OBJECT_NOT_FOUND"}
STATUS_CODE = {v: k for k, v in STATUS.items()}

def ioctl_request(esc: int, size: int) -> int:
  """The ioctl request number of an escape: Linux _IOWR(NV_IOCTL_MAGIC, esc, size): dir 3 << 30, size << 16, type << 8, nr."""
  if not 0 <= size < 1 << 14: raise ValueError(f"ioctl argument of {size} bytes (the size field has 14 bits)")
  return 3 << 30 | size << 16 | NV_IOCTL_MAGIC << 8 | esc

STRUCTS = (NVOS00_PARAMETERS, NVOS02_PARAMETERS, NVOS21_PARAMETERS, NVOS64_PARAMETERS, NVOS33_PARAMETERS, NVOS54_PARAMETERS,
           nv_ioctl_nvos02_parameters_with_fd, nv_ioctl_nvos33_parameters_with_fd, nv_ioctl_register_fd_t, NV_MEMORY_DESC_PARAMS,
           NV_CHANNEL_ALLOC_PARAMS, NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, NV_MEMORY_ALLOCATION_PARAMS,
           NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS, NV0080_ALLOC_PARAMETERS, NV2080_ALLOC_PARAMETERS,
           NV_VASPACE_ALLOCATION_PARAMETERS, NV_CTXSHARE_ALLOCATION_PARAMETERS, NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS, NVOS46_PARAMETERS,
           NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS, NV0000_CTRL_GPU_ATTACH_IDS_PARAMS, NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS,
           NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS, NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS)
