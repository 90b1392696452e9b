#!/usr/bin/env bash
# The core job's test command: core's tests (tests/), then core's conformance suite on the PYTHON reference device (shapes
# scaled down: it interprets kernels in numpy). Extra arguments go to the first pytest run. The suite runs on each plugin's
# devices in that plugin's own job (.ci/run plugin NAME, the DEV strings in its [tool.core] conformance), CPU's included.
set -uo pipefail
export SPEC="${SPEC:-1}"   # validity rules of every stage are checked in tests
cd "$(dirname "$0")"
rc=0
python -m pytest -n auto -q tests "$@" || rc=1
DEV=PYTHON CORE_TEST_SCALE=0.25 python -m pytest -n auto -q --core-conformance || rc=1
exit $rc
