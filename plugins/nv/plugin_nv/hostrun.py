"""Host builds of NV kernels for the MOCK GPU: the kernel's linearized uops (what the PTX or CUDA renderer was given) compiled for
this CPU by core's host build (core.codegen.hostbuild), run over a QMD's grid and block. The one seam between the software GPU and
the host compiler: `build_kernel` files it, `HostKernel.run` runs it."""
from __future__ import annotations
from typing import Any, Protocol
from core.ir.ops import UOp

class HostKernel(Protocol):
  """What mock_gpu.run_launch needs of a host build."""
  nbufs: int
  nvars: int
  local_size: tuple[int, int, int]
  def run(self, args: list[int], grid: tuple[int, int, int], block: tuple[int, int, int],
          spans: list[tuple[int, int]] | None = None) -> None: ...

def build_kernel(name: str, uops: tuple[UOp, ...]) -> HostKernel:
  """The host build of kernel `name` from its linearized uops (compiled once per process by core)."""
  try: from core.codegen.hostbuild import host_build
  except ImportError as e:
    raise NotImplementedError(f"{name}: MOCK+NV runs kernels through core's host build (core.codegen.hostbuild), which this core lacks") from e
  build: Any = host_build(name, uops)
  return build
