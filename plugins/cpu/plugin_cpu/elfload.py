"""The in-process loader of x86-64 ELF objects lives in core (core.device.elfload): core's host code (the HCQ submit program)
loads its objects with it too. Kept under this name for the plugin's users."""
from core.device.elfload import ELFLoadError, LoadedObject, is_relocatable, supported

__all__ = ["ELFLoadError", "LoadedObject", "is_relocatable", "supported"]
