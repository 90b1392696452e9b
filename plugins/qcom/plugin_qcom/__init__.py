"""The QCOM plugin's hooks: declares the QCOM device (Adreno A6xx/A7xx: OpenCL C renderer; KGSL, CL and MOCK interfaces) and its HCQ rules."""
from __future__ import annotations
import os
from typing import Any
from core.device.hookspecs import hookimpl, hcq_rules
from core.device.spec import DeviceSpec

__version__ = "0.1.0"
# KGSL: the Adreno kernel driver (the default on a phone); CL: any OpenCL driver, kernels enqueued one by one; MOCK: a
# software command processor decoding the real Adreno packets and running each dispatch on the CL interface
INTERFACES = ("KGSL", "CL", "MOCK")

def is_available() -> bool:
  """An Adreno kernel driver node exists (nothing is opened). CL and MOCK run wherever OpenCL does, but only when DEV names them."""
  return os.path.exists("/dev/kgsl-3d0")

def unavailable_reason() -> str:
  return ("no Adreno kernel driver (/dev/kgsl-3d0) (KGSL+QCOM is untested on hardware); DEV=CL+QCOM runs on any OpenCL driver "
          "(apt-get install pocl-opencl-icd ocl-icd-libopencl1), DEV=MOCK+QCOM runs the Adreno command stream in software")

# the one place the OpenCL renderer is built for compile-only use (DEV=NULL:QCOM): Adreno's capabilities (native half, no
# double); the compiler is the first OpenCL driver's, which must accept them (the device factory builds its own, runtime.py)
def make_cl(arch: str | None = None) -> tuple[Any, Any]:
  from plugin_qcom.renderer import OpenCLRenderer
  from plugin_qcom.compiler import CLCompiler
  from plugin_qcom import cl
  return OpenCLRenderer(), CLCompiler(cl.context())

@hookimpl
def core_plugin_info() -> dict[str, Any]: return {"name": "qcom", "version": __version__, "api": (2, 0)}

@hookimpl
def core_devices() -> list[DeviceSpec]:
  return [DeviceSpec("QCOM", factory="plugin_qcom.runtime:make_device", renderers={"CL": "plugin_qcom:make_cl"}, default_renderer="CL",
                     interfaces=INTERFACES, priority=40, is_available=is_available, unavailable_reason=unavailable_reason,
                     description="Qualcomm Adreno GPUs (A6xx/A7xx): OpenCL C; KGSL command streams, any OpenCL driver (CL+QCOM), "
                                 "a software command processor (MOCK+QCOM)")]

# the HCQ rules (KGSL and MOCK), imported only when core's HCQ pipeline asks for them
core_pm_prep_program, core_pm_lower, core_pm_bufferize = hcq_rules("plugin_qcom.prep:pm_prep_program", "plugin_qcom.lower:pm_lower",
                                                                 "plugin_qcom.bufferize:pm_bufferize")
