"""The NVIDIA kernel driver's resource-manager (RM) ioctl ABI that the NVK interface speaks (not written yet: these are its
structures, checked against the open kernel modules' headers by tests/test_rm_abi.py).

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

# escapes (nv_escape.h, nv-ioctl-numbers.h) and control commands (ctrlc36f.h)
NV_IOCTL_MAGIC, NV_IOCTL_BASE = ord("F"), 200
NV_ESC_REGISTER_FD = NV_IOCTL_BASE + 1
NV_ESC_RM_ALLOC_MEMORY, NV_ESC_RM_FREE, NV_ESC_RM_CONTROL, NV_ESC_RM_ALLOC = 0x27, 0x29, 0x2A, 0x2B
NV_ESC_RM_MAP_MEMORY, NV_ESC_RM_UNMAP_MEMORY = 0x4E, 0x4F
NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN = 0xC36F0108

def ioctl_request(esc: int, size: int) -> int:
  """The ioctl request number of an escape: Linux _IOWR(NV_IOCTL_MAGIC, esc, size): dir 3 << 30, size << 16, type << 8, nr."""
  if not 0 <= size < 1 << 14: raise ValueError(f"ioctl argument of {size} bytes (the size field has 14 bits)")
  return 3 << 30 | size << 16 | NV_IOCTL_MAGIC << 8 | esc

STRUCTS = (NVOS00_PARAMETERS, NVOS02_PARAMETERS, NVOS21_PARAMETERS, NVOS64_PARAMETERS, NVOS33_PARAMETERS, NVOS54_PARAMETERS,
           nv_ioctl_nvos02_parameters_with_fd, nv_ioctl_nvos33_parameters_with_fd, nv_ioctl_register_fd_t, NV_MEMORY_DESC_PARAMS,
           NV_CHANNEL_ALLOC_PARAMS, NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, NV_MEMORY_ALLOCATION_PARAMS,
           NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS)
