"""The RM ioctl structures (plugin_nv.rm_abi) against the open kernel modules' headers: HEADERS is an excerpt of
NVIDIA/open-gpu-kernel-modules (nvos.h, alloc/alloc_channel.h, ctrl/ctrlc36f.h, nv-ioctl.h, nv-unix-nvos-params-wrappers.h,
class/cl0080.h, cl2080.h, cl0070.h, ctrl/ctrl0000/ctrl0000gpu.h, ctrl/ctrl2080/ctrl2080mc.h, ctrl/ctrla06f/ctrla06fgpfifo.h;
comments dropped), compiled by the C compiler with nvtypes.h's scalar types for x86-64 Linux; every structure's size and every
field's offset must equal the ctypes layout."""
from __future__ import annotations
import ctypes, os, shutil, subprocess, tempfile
import pytest
from core.testing.helpers import missing_tool
from plugin_nv import rm_abi

PRELUDE = """
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
typedef uint8_t NvU8; typedef NvU8 NvBool; typedef uint32_t NvU32; typedef int32_t NvS32; typedef uint32_t NvV32;
typedef unsigned long long NvU64; typedef NvU32 NvHandle; typedef void* NvP64;
#define NV_ALIGN_BYTES(size) __attribute__ ((aligned (size)))
#define NV_DECLARE_ALIGNED(TYPE_VAR, ALIGN) TYPE_VAR __attribute__ ((aligned (ALIGN)))
#define NV_MAX_SUBDEVICES 8
#define CC_CHAN_ALLOC_IV_SIZE_DWORD 3U
#define CC_CHAN_ALLOC_NONCE_SIZE_DWORD 8U
#define NV0000_CTRL_GPU_MAX_PROBED_GPUS 32
"""

HEADERS = """
typedef struct
{
  NvHandle  hRoot;
  NvHandle  hObjectParent;
  NvHandle  hObjectOld;
  NvV32     status;
} NVOS00_PARAMETERS;
typedef struct
{
    NvHandle    hRoot;
    NvHandle    hObjectParent;
    NvHandle    hObjectNew;
    NvV32       hClass;
    NvV32       flags;
    NvP64       pMemory NV_ALIGN_BYTES(8);
    NvU64       limit NV_ALIGN_BYTES(8);
    NvV32       status;
} NVOS02_PARAMETERS;
typedef struct
{
    NvHandle hRoot;
    NvHandle hObjectParent;
    NvHandle hObjectNew;
    NvV32    hClass;
    NvP64    pAllocParms NV_ALIGN_BYTES(8);
    NvU32    paramsSize;
    NvV32    status;
} NVOS21_PARAMETERS;
typedef struct
{
    NvHandle hRoot;                               
    NvHandle hObjectParent;                       
    NvHandle hObjectNew;                          
    NvV32    hClass;                              
    NvP64    pAllocParms NV_ALIGN_BYTES(8);       
    NvP64    pRightsRequested NV_ALIGN_BYTES(8);  
    NvU32    paramsSize;                          
    NvU32    flags;                               
    NvV32    status;                              
} NVOS64_PARAMETERS;
typedef struct
{
    NvHandle hClient;
    NvHandle hDevice;            
    NvHandle hMemory;            
    NvU64    offset NV_ALIGN_BYTES(8);
    NvU64    length NV_ALIGN_BYTES(8);
    NvP64    pLinearAddress NV_ALIGN_BYTES(8);     
    NvU32    status;
    NvU32    flags;
} NVOS33_PARAMETERS;
typedef struct
{
    NvHandle hClient;
    NvHandle hObject;
    NvV32    cmd;
    NvU32    flags;
    NvP64    params NV_ALIGN_BYTES(8);
    NvU32    paramsSize;
    NvV32    status;
} NVOS54_PARAMETERS;
typedef struct
{
    NvHandle hObjectError;               
    NvHandle hObjectEccError;            
    NvHandle hVASpace;                   
    NvU32    engineType;                 
    NvBool   bIsCallingContextVgpuPlugin;
} NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS;
typedef struct
{
    NvU32     owner;                        
    NvU32     type;                         
    NvU32     flags;                        
    NvU32     width;                        
    NvU32     height;                       
    NvS32     pitch;                        
    NvU32     attr;                         
    NvU32     attr2;                        
    NvU32     format;                       
    NvU32     comprCovg;                    
    NvU32     zcullCovg;                    
    NvU64     rangeLo   NV_ALIGN_BYTES(8);  
    NvU64     rangeHi   NV_ALIGN_BYTES(8);  
    NvU64     size      NV_ALIGN_BYTES(8);  
    NvU64     alignment NV_ALIGN_BYTES(8);  
    NvU64     offset    NV_ALIGN_BYTES(8);  
    NvU64     limit     NV_ALIGN_BYTES(8);  
    NvP64     address   NV_ALIGN_BYTES(8);  
    NvU32     ctagOffset;                   
    NvHandle  hVASpace;                     
    NvU32     internalflags;                
    NvU32     tag;                          
    NvS32     numaNode;                     
} NV_MEMORY_ALLOCATION_PARAMS;
typedef struct
{
    NVOS02_PARAMETERS params;
    int fd;
} nv_ioctl_nvos02_parameters_with_fd;
typedef struct
{
    NVOS33_PARAMETERS params;
    int fd;
} nv_ioctl_nvos33_parameters_with_fd;
typedef struct nv_ioctl_register_fd
{
    int ctl_fd;
} nv_ioctl_register_fd_t;
typedef struct NV_MEMORY_DESC_PARAMS {
    NV_DECLARE_ALIGNED(NvU64 base, 8);
    NV_DECLARE_ALIGNED(NvU64 size, 8);
    NvU32 addressSpace;
    NvU32 cacheAttrib;
} NV_MEMORY_DESC_PARAMS;
typedef struct NV_CHANNEL_ALLOC_PARAMS {
    NvHandle hObjectError; 
    NvHandle hObjectBuffer; 
    NV_DECLARE_ALIGNED(NvU64 gpFifoOffset, 8);    
    NvU32    gpFifoEntries;    
    NvU32    flags;
    NvHandle hContextShare; 
    NvHandle hVASpace; 
    NvHandle hUserdMemory[NV_MAX_SUBDEVICES];
    NV_DECLARE_ALIGNED(NvU64 userdOffset[NV_MAX_SUBDEVICES], 8);
    NvU32    engineType;
    NvU32    cid;
    NvU32    subDeviceId;
    NvHandle hObjectEccError; 
    NV_DECLARE_ALIGNED(NV_MEMORY_DESC_PARAMS instanceMem, 8);
    NV_DECLARE_ALIGNED(NV_MEMORY_DESC_PARAMS userdMem, 8);
    NV_DECLARE_ALIGNED(NV_MEMORY_DESC_PARAMS ramfcMem, 8);
    NV_DECLARE_ALIGNED(NV_MEMORY_DESC_PARAMS mthdbufMem, 8);
    NvHandle hPhysChannelGroup;              
    NvU32    internalFlags;                 
    NV_DECLARE_ALIGNED(NV_MEMORY_DESC_PARAMS errorNotifierMem, 8); 
    NV_DECLARE_ALIGNED(NV_MEMORY_DESC_PARAMS eccErrorNotifierMem, 8); 
    NvU32    ProcessID;                 
    NvU32    SubProcessID;                 
    NvU32    encryptIv[CC_CHAN_ALLOC_IV_SIZE_DWORD];          
    NvU32    decryptIv[CC_CHAN_ALLOC_IV_SIZE_DWORD];          
    NvU32    hmacNonce[CC_CHAN_ALLOC_NONCE_SIZE_DWORD];       
    NvU32    tpcConfigID; 
} NV_CHANNEL_ALLOC_PARAMS;
typedef struct NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS {
    NvU32 workSubmitToken;
} NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS;
typedef struct NV0080_ALLOC_PARAMETERS {
    NvU32    deviceId;
    NvHandle hClientShare;
    NvHandle hTargetClient;
    NvHandle hTargetDevice;
    NvV32    flags;
    NV_DECLARE_ALIGNED(NvU64 vaSpaceSize, 8);
    NV_DECLARE_ALIGNED(NvU64 vaStartInternal, 8);
    NV_DECLARE_ALIGNED(NvU64 vaLimitInternal, 8);
    NvV32    vaMode;
} NV0080_ALLOC_PARAMETERS;
typedef struct NV2080_ALLOC_PARAMETERS {
    NvU32 subDeviceId;
} NV2080_ALLOC_PARAMETERS;
typedef struct
{
    NvU32   index;
    NvV32   flags;
    NvU64   vaSize NV_ALIGN_BYTES(8);
    NvU64   vaStartInternal NV_ALIGN_BYTES(8);
    NvU64   vaLimitInternal NV_ALIGN_BYTES(8);
    NvU32   bigPageSize;
    NvU64   vaBase NV_ALIGN_BYTES(8);
    NvU32   pasid;
} NV_VASPACE_ALLOCATION_PARAMETERS;
typedef struct
{
    NvHandle hVASpace;
    NvU32    flags;
    NvU32    subctxId;
} NV_CTXSHARE_ALLOCATION_PARAMETERS;
typedef struct NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS {
    NV_DECLARE_ALIGNED(NvU64 offset, 8);
    NV_DECLARE_ALIGNED(NvU64 limit, 8);
    NvHandle hVASpace;
} NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS;
typedef struct
{
    NvHandle hClient;
    NvHandle hDevice;
    NvHandle hDma;
    NvHandle hMemory;
    NvU64    offset NV_ALIGN_BYTES(8);
    NvU64    length NV_ALIGN_BYTES(8);
    NvV32    flags;
    NvV32    flags2;
    NvV32    kindOverride;
    NvU64    dmaOffset NV_ALIGN_BYTES(8);
    NvV32    status;
} NVOS46_PARAMETERS;
typedef struct NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS {
    NvU32 gpuIds[NV0000_CTRL_GPU_MAX_PROBED_GPUS];
    NvU32 excludedGpuIds[NV0000_CTRL_GPU_MAX_PROBED_GPUS];
    NvU32 gpuFlags[NV0000_CTRL_GPU_MAX_PROBED_GPUS];
} NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS;
typedef struct NV0000_CTRL_GPU_ATTACH_IDS_PARAMS {
    NvU32 gpuIds[NV0000_CTRL_GPU_MAX_PROBED_GPUS];
    NvU32 failedId;
} NV0000_CTRL_GPU_ATTACH_IDS_PARAMS;
typedef struct NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS {
    NvU32 gpuId;
    NvU32 gpuFlags;
    NvU32 deviceInstance;
    NvU32 subDeviceInstance;
    NvU32 sliStatus;
    NvU32 boardId;
    NvU32 gpuInstance;
    NvS32 numaId;
} NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS;
typedef struct NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS {
    NvU32 architecture;
    NvU32 implementation;
    NvU32 revision;
    NvU8  subRevision;
} NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS;
typedef struct NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS {
    NvBool bEnable;
    NvBool bSkipSubmit;
    NvBool bSkipEnable;
} NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS;
typedef NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS;
"""

def c_layout() -> dict[str, int]:
  """'Struct' -> sizeof and 'Struct.field' -> offsetof, as the C compiler lays the headers out."""
  cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
  if cc is None:
    missing_tool("no C compiler (cc, gcc or clang) to lay out the driver headers: apt install gcc")
  lines = []
  for s in rm_abi.STRUCTS:
    lines.append(f'printf("{s.__name__} %zu\\n", sizeof({s.__name__}));')
    lines += [f'printf("{s.__name__}.{f} %zu\\n", offsetof({s.__name__}, {f}));' for f, *_ in s._fields_]
  src = PRELUDE + HEADERS + "int main(void) {\n" + "\n".join(lines) + "\nreturn 0; }\n"
  with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "l.c"), "w") as f: f.write(src)
    subprocess.run([cc, "-o", os.path.join(d, "l"), os.path.join(d, "l.c")], check=True, capture_output=True, text=True)
    out = subprocess.run([os.path.join(d, "l")], check=True, capture_output=True, text=True).stdout
  return {k: int(v) for k, v in (line.split() for line in out.splitlines())}

@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the ABI is checked for 64-bit hosts")
def test_structures_match_the_headers():
  c = c_layout()
  for s in rm_abi.STRUCTS:
    assert ctypes.sizeof(s) == c[s.__name__], s.__name__
    for f, *_ in s._fields_: assert getattr(s, f).offset == c[f"{s.__name__}.{f}"], f"{s.__name__}.{f}"
  # spot values the headers give (so a wrong excerpt can't agree with a wrong table by accident)
  assert c["NVOS21_PARAMETERS"] == 32 and c["NVOS21_PARAMETERS.pAllocParms"] == 16 and c["NVOS54_PARAMETERS"] == 32
  assert c["NVOS33_PARAMETERS.pLinearAddress"] == 32 and c["nv_ioctl_nvos33_parameters_with_fd"] == 56
  assert c["NVOS46_PARAMETERS.dmaOffset"] == 48 and c["NVOS46_PARAMETERS"] == 64 and c["NV0080_ALLOC_PARAMETERS.vaSpaceSize"] == 24
  assert c["NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS"] == 384 and c["NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS"] == 3

def test_ioctl_numbers():
  # _IOWR('F', NV_ESC_RM_ALLOC, NVOS21_PARAMETERS): read|write, 32 bytes, type 'F' (0x46), number 0x2b
  assert rm_abi.ioctl_request(rm_abi.NV_ESC_RM_ALLOC, ctypes.sizeof(rm_abi.NVOS21_PARAMETERS)) == 0xC020462B
  assert rm_abi.ioctl_request(rm_abi.NV_ESC_RM_CONTROL, 32) == 0xC020462A and rm_abi.NV_ESC_REGISTER_FD == 201
  with pytest.raises(ValueError): rm_abi.ioctl_request(1, 1 << 14)
  # _IOWR('F', NV_ESC_RM_MAP_MEMORY_DMA, NVOS46_PARAMETERS): 64 bytes, number 0x57
  assert rm_abi.ioctl_request(rm_abi.NV_ESC_RM_MAP_MEMORY_DMA, ctypes.sizeof(rm_abi.NVOS46_PARAMETERS)) == 0xC0404657
