"""The HCQ pipeline: lowers a schedule into command buffers and a compiled host submit program (see README.md)."""
from __future__ import annotations

from core.device.hcq import HCQError  # noqa: F401  # defined with the device contract whose waits raise it
