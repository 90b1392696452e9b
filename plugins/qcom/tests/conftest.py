"""Shared fixtures: the OpenCL device the CL and MOCK tests run on (pocl in CI). Under CI=true a missing driver fails the
test (the job installs pocl), elsewhere it skips."""
from __future__ import annotations
import os
from typing import Any
import pytest

@pytest.fixture(scope="session")
def clctx() -> Any:
  from plugin_qcom import cl
  if not cl.available():
    msg = f"no OpenCL device: {cl.INSTALL}"
    if os.environ.get("CI") == "true": pytest.fail(msg)
    pytest.skip(msg)
  return cl.context()
