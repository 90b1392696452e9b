"""The DEV grammar: every documented form parses into the right Target and prints back unchanged."""
from __future__ import annotations
import pytest
from core.device.target import DevSyntaxError, Target, parse_dev, parse_target

@pytest.mark.parametrize("s, want", [
  ("CPU", Target(device="CPU")),
  ("CPU:LLVM", Target(device="CPU", renderer="LLVM")),
  ("CPU:C", Target(device="CPU", renderer="C")),
  ("NV:PTX:sm_90", Target(device="NV", renderer="PTX", arch="sm_90")),
  ("MOCK+AMD:LLVM:gfx1100", Target(interface="MOCK", device="AMD", renderer="LLVM", arch="gfx1100")),
  ("NULL:AMD:gfx950", Target(device="NULL", renderer="AMD", arch="gfx950")),
  ("NULL:NV:CUDA:sm_90", Target(device="NULL", renderer="NV:CUDA", arch="sm_90")),
  ("PCI:0,1+AMD", Target(interface="PCI", indices=(0, 1), device="AMD")),
  ("PCI:3+NV:CUDA", Target(interface="PCI", indices=(3,), device="NV", renderer="CUDA")),
])
def test_each_form(s: str, want: Target) -> None:
  assert parse_target(s) == want
  assert str(want) == s
  assert parse_dev(s) == [want]

def test_names_are_case_insensitive_but_arch_keeps_case() -> None:
  assert parse_target("cpu:llvm") == Target(device="CPU", renderer="LLVM")
  assert parse_target("nv:ptx:SM_90").arch == "SM_90"

def test_several_targets_in_order() -> None:
  assert parse_dev("CPU:C; NULL:LLVM ;PCI:0+AMD;") == [Target(device="CPU", renderer="C"), Target(device="NULL", renderer="LLVM"),
                                                      Target(interface="PCI", indices=(0,), device="AMD")]

def test_field_order_matches_the_contract() -> None:
  assert Target("PCI", (0, 1), "AMD", "LLVM", "gfx1100") == parse_target("PCI:0,1+AMD:LLVM:gfx1100")

@pytest.mark.parametrize("bad, says", [
  ("", "names no device"), (";", "names no device"), ("CPU:LLVM:x86:extra", "too many"), ("1CPU", "device '1CPU' is not a name"),
  ("PCI:a+AMD", "must be integers"), ("A+B+AMD", "at most one"), ("CPU:", "renderer '' is not a name"), ("+CPU", "interface ''"),
  ("NV:PTX:sm 90", "arch 'sm 90'"), ("NV:PTX:sm_90:x", "too many"), ("NULL:NV:1PTX:sm_90", "renderer '1PTX'"),
])
def test_syntax_errors_quote_the_grammar(bad: str, says: str) -> None:
  with pytest.raises(DevSyntaxError, match="grammar|no device|must be") as e: parse_dev(bad)
  assert says in str(e.value)

def test_target_needs_a_device() -> None:
  with pytest.raises(ValueError, match="needs a device"): Target()
