#!/usr/bin/env bash
# The test command: core's suite (tests/), in parallel. Plugin suites run in their own venvs through .ci/run.
set -euo pipefail
cd "$(dirname "$0")"
exec python -m pytest -n auto -q "$@"
