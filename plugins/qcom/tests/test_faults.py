"""Fault containment on MOCK+QCOM: each kernel's OpenCL C runs on the host (pocl), rendered with core's access guard
(core/codegen/access_guard.py), so a wild index raises KernelFault with the kernel and the address through the HCQ fault
report, and the device keeps working; accesses the IR proves in range stay unchecked (and vectorized)."""
from __future__ import annotations
from typing import Any
from core.testing.faults import check_wild_index

def test_wild_index_is_a_fault_naming_kernel_and_address_and_the_device_goes_on(clctx: Any) -> None:
  out = check_wild_index("MOCK+QCOM")
  plain, wild = out["sources"]["plain"], out["sources"]["wild"]
  # the kernel before the corruption: every access proven in range, no check, vector loads and stores as on the device
  assert plain and all("CORE_GUARD(" not in s.split("#define CORE_GUARD", 1)[1] for s in plain), plain
  assert any("vload" in s and "vstore" in s for s in plain), plain
  # the corrupted kernel checks the access it can no longer prove (the load from data1), and only that one
  body = wild[0].split("#define CORE_GUARD", 1)[1]
  assert body.count("CORE_GUARD(") == 1 and "CORE_GUARD(1, data1," in body, wild[0]

def test_guard_table_is_the_mock_argument_not_the_kernels() -> None:
  # the program image and the command stream carry the kernel's own arguments; the MOCK adds the table at launch
  from plugin_qcom.prep import signature
  src = "__kernel void E_4(__global float* restrict data0, __global const float* restrict data1, __global long* restrict core_guard, int n) {}"
  assert signature(src) == ("E_4", 2, 1)
