"""KFD ioctl structures and numbers against include/uapi/linux/kfd_ioctl.h, computed independently here.
Sizes/offsets follow the header's field lists with natural alignment (__u64 on 8, __u32 on 4); ioctl numbers follow
asm-generic/ioctl.h: dir << 30 | size << 16 | 'K' << 8 | nr, with _IOR dir 2, _IOW dir 1, _IOWR dir 3."""
from __future__ import annotations
import ctypes
import pytest
from plugin_amd import kfd

# struct -> (sizeof, {field: offset}) worked out from the header by hand
LAYOUT = {
  kfd.GetVersionArgs: (8, {"major_version": 0, "minor_version": 4}),
  kfd.CreateQueueArgs: (88, {"ring_base_address": 0, "write_pointer_address": 8, "read_pointer_address": 16, "doorbell_offset": 24,
                             "ring_size": 32, "gpu_id": 36, "queue_type": 40, "queue_percentage": 44, "queue_priority": 48,
                             "queue_id": 52, "eop_buffer_address": 56, "eop_buffer_size": 64, "ctx_save_restore_address": 72,
                             "ctx_save_restore_size": 80, "ctl_stack_size": 84}),
  kfd.DestroyQueueArgs: (8, {"queue_id": 0, "pad": 4}),
  kfd.ProcessDeviceApertures: (56, {"lds_base": 0, "scratch_base": 16, "gpuvm_base": 32, "gpuvm_limit": 40, "gpu_id": 48}),
  kfd.GetProcessAperturesNewArgs: (16, {"kfd_process_device_apertures_ptr": 0, "num_of_nodes": 8, "pad": 12}),
  kfd.CreateEventArgs: (32, {"event_page_offset": 0, "event_trigger_data": 8, "event_type": 12, "auto_reset": 16, "node_id": 20,
                             "event_id": 24, "event_slot_index": 28}),
  kfd.SetEventArgs: (8, {"event_id": 0}),
  kfd.EventData: (48, {"kfd_event_data_ext": 32, "event_id": 40, "pad": 44}),   # union: memory exception data is 16 + 8 + 8 = 32
  kfd.WaitEventsArgs: (24, {"events_ptr": 0, "num_events": 8, "wait_for_all": 12, "timeout": 16, "wait_result": 20}),
  kfd.AcquireVmArgs: (8, {"drm_fd": 0, "gpu_id": 4}),
  kfd.AllocMemoryOfGpuArgs: (40, {"va_addr": 0, "size": 8, "handle": 16, "mmap_offset": 24, "gpu_id": 32, "flags": 36}),
  kfd.FreeMemoryOfGpuArgs: (8, {"handle": 0}),
  kfd.MapMemoryToGpuArgs: (24, {"handle": 0, "device_ids_array_ptr": 8, "n_devices": 16, "n_success": 20}),
  kfd.UnmapMemoryFromGpuArgs: (24, {"handle": 0, "device_ids_array_ptr": 8, "n_devices": 16, "n_success": 20}),
}

@pytest.mark.parametrize("struct", list(LAYOUT), ids=lambda s: s.__name__)
def test_struct_layout(struct):
  size, offsets = LAYOUT[struct]
  assert ctypes.sizeof(struct) == size
  for name, off in offsets.items(): assert getattr(struct, name).offset == off, name

# name -> (direction, nr, sizeof) as the header declares it
IOCTLS = {"GET_VERSION": (2, 0x01, 8), "CREATE_QUEUE": (3, 0x02, 88), "DESTROY_QUEUE": (3, 0x03, 8), "CREATE_EVENT": (3, 0x08, 32),
          "DESTROY_EVENT": (1, 0x09, 8), "SET_EVENT": (1, 0x0A, 8), "RESET_EVENT": (1, 0x0B, 8), "WAIT_EVENTS": (3, 0x0C, 24),
          "GET_PROCESS_APERTURES_NEW": (3, 0x14, 16), "ACQUIRE_VM": (1, 0x15, 8), "ALLOC_MEMORY_OF_GPU": (3, 0x16, 40),
          "FREE_MEMORY_OF_GPU": (1, 0x17, 8), "MAP_MEMORY_TO_GPU": (3, 0x18, 24), "UNMAP_MEMORY_FROM_GPU": (3, 0x19, 24)}

@pytest.mark.parametrize("name", list(IOCTLS))
def test_ioctl_numbers(name):
  d, nr, size = IOCTLS[name]
  assert kfd.IOC[name] == d << 30 | size << 16 | 0x4B << 8 | nr

def test_well_known_ioctl_values():
  # values seen in strace output of ROCm programs
  assert kfd.IOC["GET_VERSION"] == 0x80084B01 and kfd.IOC["CREATE_QUEUE"] == 0xC0584B02 and kfd.IOC["ALLOC_MEMORY_OF_GPU"] == 0xC0284B16

def test_ioc_size_field_is_14_bits():
  with pytest.raises(ValueError, match="14-bit"): kfd._IOC(3, 0x4B, 1, 1 << 14)

def test_flags_and_queue_types():
  assert (kfd.QUEUE_TYPE_COMPUTE, kfd.QUEUE_TYPE_SDMA, kfd.QUEUE_TYPE_COMPUTE_AQL) == (0, 1, 2)
  assert (kfd.MEM_VRAM, kfd.MEM_GTT, kfd.MEM_USERPTR, kfd.MEM_DOORBELL) == (1, 2, 4, 8)
  assert (kfd.MEM_WRITABLE, kfd.MEM_EXECUTABLE, kfd.MEM_COHERENT) == (0x80000000, 0x40000000, 0x04000000)
