"""Shared fixtures: the OpenCL device the CL and MOCK tests run on (pocl in CI). Under CI=true a missing driver fails the
test (the job installs pocl), elsewhere it skips."""
from __future__ import annotations
from typing import Any
import pytest
from core.testing.helpers import missing_tool

@pytest.fixture(scope="session")
def clctx() -> Any:
  from plugin_qcom import cl
  if not cl.available():
    msg = f"no OpenCL device: {cl.INSTALL}"
    missing_tool(msg)
  return cl.context()
