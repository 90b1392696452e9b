#!/usr/bin/env bash
# The test command: core's tests (tests/), then core's conformance suite on the PYTHON reference device (shapes scaled
# down: it interprets kernels in numpy), then, when the CPU plugin is installed, on every CPU renderer through the HCQ
# command-queue path (the default), on the direct path (DIRECT+CPU), and once with the kernel optimizer off (NOOPT=1).
# Extra arguments go to the first pytest run. Plugin suites also run in their own venvs through .ci/run.
set -uo pipefail
export SPEC="${SPEC:-1}"   # validity rules of every stage are checked in tests
cd "$(dirname "$0")"
rc=0
python -m pytest -n auto -q tests "$@" || rc=1
DEV=PYTHON CORE_TEST_SCALE=0.25 python -m pytest -n auto -q --core-conformance || rc=1
if python -c "import plugin_cpu" 2>/dev/null; then
  for d in CPU:C DIRECT+CPU:C CPU:LLVM DIRECT+CPU:LLVM; do DEV=$d python -m pytest -n auto -q --core-conformance || rc=1; done
  NOOPT=1 DEV=CPU python -m pytest -n auto -q --core-conformance || rc=1
fi
exit $rc
