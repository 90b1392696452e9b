#!/usr/bin/env bash
# Quick start, part 1: set up .venv with core, the CPU plugin (LLVM renderer) and scikit-learn, then train a small CNN
# on scikit-learn's handwritten digits on the best available device (DEV picks another one).
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check ./ ./plugins/cpu scikit-learn
exec .venv/bin/python examples/train_digits.py "$@"
