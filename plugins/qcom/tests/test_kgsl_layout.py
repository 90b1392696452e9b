"""KGSL structure layouts and ioctl numbers. The sizes and offsets below are worked out by hand from msm_kgsl.h's field lists
(LP64 C layout); with MSM_KGSL_H=/path/to/msm_kgsl.h (e.g. mesa's src/freedreno/vulkan/msm_kgsl.h) every field's offset and
every ioctl number is also compared with what a C compiler makes of the header."""
from __future__ import annotations
import ctypes, os, shutil, subprocess, tempfile
import pytest
from plugin_qcom import kgsl

def test_sizes_and_offsets_by_hand() -> None:
  assert ctypes.sizeof(kgsl.kgsl_gpuobj_alloc) == 48 and kgsl.kgsl_gpuobj_alloc.id.offset == 32 and kgsl.kgsl_gpuobj_alloc.metadata.offset == 40
  assert ctypes.sizeof(kgsl.kgsl_gpuobj_free) == 32 and kgsl.kgsl_gpuobj_free.len.offset == 24
  assert ctypes.sizeof(kgsl.kgsl_gpuobj_info) == 48 and kgsl.kgsl_gpuobj_info.id.offset == 40
  assert ctypes.sizeof(kgsl.kgsl_command_object) == 32 and kgsl.kgsl_command_object.id.offset == 28
  assert ctypes.sizeof(kgsl.kgsl_gpu_command) == 64 and kgsl.kgsl_gpu_command.synclist.offset == 40 and kgsl.kgsl_gpu_command.timestamp.offset == 60
  assert ctypes.sizeof(kgsl.kgsl_device_getproperty) == 24 and kgsl.kgsl_device_getproperty.sizebytes.offset == 16
  assert ctypes.sizeof(kgsl.kgsl_drawctxt_create) == 8 and ctypes.sizeof(kgsl.kgsl_device_waittimestamp_ctxtid) == 12

def test_ioctl_numbers_by_hand() -> None:
  # _IOWR(0x09, 0x4A, 64 bytes) = 3 << 30 | 64 << 16 | 0x09 << 8 | 0x4A
  assert kgsl.IOCTL_KGSL_GPU_COMMAND == 0xC040094A
  assert kgsl.IOCTL_KGSL_GPUOBJ_ALLOC == 0xC0300945 and kgsl.IOCTL_KGSL_GPUOBJ_FREE == 0x40200946
  assert kgsl.IOCTL_KGSL_DRAWCTXT_CREATE == 0xC0080913 and kgsl.IOCTL_KGSL_DEVICE_WAITTIMESTAMP_CTXTID == 0x400C0907

def test_submission_argument_points_at_the_ibs() -> None:
  cmd, (arr, objs) = kgsl.gpu_command(5, [kgsl.ib_command(0x1000, 64), kgsl.ib_command(0x2000, 32)], [kgsl.memobj(0x1000, 4096, 3)])
  assert cmd.numcmds == 2 and cmd.cmdlist == ctypes.addressof(arr) and cmd.cmdsize == 32 and cmd.context_id == 5
  assert arr[1].gpuaddr == 0x2000 and arr[1].size == 32 and arr[1].flags == kgsl.KGSL_CMDLIST_IB
  assert cmd.numobjs == 1 and cmd.objlist == ctypes.addressof(objs) and objs[0].flags == kgsl.KGSL_OBJLIST_MEMOBJ and objs[0].id == 3

def test_layouts_match_the_header() -> None:
  header = os.environ.get("MSM_KGSL_H")
  if not header: pytest.skip("set MSM_KGSL_H to msm_kgsl.h to compare with a C compiler's layout")
  cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
  assert cc is not None, "no C compiler"
  lines = ["#include <stdint.h>", "#include <stddef.h>", "#include <stdio.h>", "#define __user", f'#include "{header}"', "int main(void) {"]
  want = []
  for s in kgsl.STRUCTS:
    lines.append(f'  printf("%zu\\n", sizeof(struct {s.__name__}));')
    want.append(ctypes.sizeof(s))
    for f, _ in s._fields_:
      lines.append(f'  printf("%zu\\n", offsetof(struct {s.__name__}, {f}));')
      want.append(getattr(s, f).offset)
  for name, v in kgsl.IOCTLS.items():
    lines.append(f'  printf("%lu\\n", (unsigned long){name});')
    want.append(v)
  with tempfile.TemporaryDirectory() as d:
    src, exe = os.path.join(d, "check.c"), os.path.join(d, "check")
    with open(src, "w") as f: f.write("\n".join(lines + ["  return 0;", "}"]) + "\n")
    subprocess.run([cc, src, "-o", exe], check=True, capture_output=True)
    got = [int(x) for x in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()]
  assert got == want
