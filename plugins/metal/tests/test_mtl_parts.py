"""The parts of the macOS runtime that need no Mac: address -> (MTLBuffer, offset) resolution, and a clear refusal off macOS."""
from __future__ import annotations
import sys
import pytest

def test_addresses_resolve_to_their_buffer_and_offset() -> None:
  from plugin_metal.iface_mtl import Allocations
  al = Allocations()
  al.add(0x10000, 111, 0x100)
  al.add(0x30000, 222, 0x40)
  assert al.resolve(0x10000) == (111, 0) and al.resolve(0x100ff) == (111, 0xff) and al.resolve(0x30010) == (222, 0x10)
  for bad in (0xffff, 0x10100, 0x30040):
    with pytest.raises(ValueError, match="in no MTLBuffer"): al.resolve(bad)
  assert al.remove(0x10000) == 111
  with pytest.raises(ValueError): al.resolve(0x10000)

@pytest.mark.skipif(sys.platform == "darwin", reason="off macOS only")
def test_mtl_interface_off_macos_says_what_to_use() -> None:
  from core.device.target import Target
  from plugin_metal.runtime import make_device
  with pytest.raises(RuntimeError, match="MOCK\\+METAL"): make_device("METAL", Target(device="METAL"))
