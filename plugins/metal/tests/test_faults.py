"""Fault containment on MOCK+METAL: each kernel's MSL runs on the host as C++, rendered with core's access guard
(core/codegen/access_guard.py), so a wild index raises KernelFault with the kernel and the address through the HCQ fault
report, and the device keeps working; accesses the IR proves in range stay unchecked (and vectorized)."""
from __future__ import annotations
from metal_tools import need_cxx
from core.testing.faults import check_wild_index

def test_wild_index_is_a_fault_naming_kernel_and_address_and_the_device_goes_on() -> None:
  need_cxx()
  out = check_wild_index("MOCK+METAL")
  plain, wild = out["sources"]["plain"], out["sources"]["wild"]
  # the kernel before the corruption: every access proven in range, no check, vector loads and stores as on the device
  assert plain and all("CORE_GUARD(" not in s.split("#define CORE_GUARD", 1)[1] for s in plain), plain
  assert any("device floatx" in s for s in plain), plain
  # the corrupted kernel checks the access it can no longer prove (the load from data1), and only that one
  body = wild[0].split("#define CORE_GUARD", 1)[1]
  assert body.count("CORE_GUARD(") == 1 and "CORE_GUARD(1, data1," in body, wild[0]

def test_allocations_span_views_and_unknown_addresses() -> None:
  from core.codegen.access_guard import Allocations, guard_fault, guard_table
  mem = Allocations()
  mem.add(0x1000, 0x100)
  mem.add(0x2000, 0x40)
  assert mem.span(0x1080) == (0x1000, 0x1100) and mem.span(0x2000) == (0x2000, 0x2040)
  assert mem.span(0x1100) == (0x1100, 0x1100)   # one past the end: no allocation, so every access through it is wild
  mem.remove(0x1000)
  assert mem.span(0x1080) == (0x1080, 0x1080)
  table = guard_table([0x2010], [(0x2000, 0x2040)])
  assert list(table) == [0, 0, -0x10, 0x30] and guard_fault("k", table, [0x2010]) is None
  table[0], table[1] = 1, 0x40
  fault = guard_fault("k", table, [0x2010])
  assert fault is not None and fault.kernel == "k" and fault.address == 0x2050 and "kernel k accessed address 0x2050" in str(fault)
