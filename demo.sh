#!/usr/bin/env bash
# Quick start, part 1: set up .venv with core, the CPU plugin (LLVM renderer) and scikit-learn, then train a small CNN
# on scikit-learn's handwritten digits on the best available device (DEV picks another one). A rerun reinstalls only when
# the sources or the install list changed (a stamp in .venv).
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
PKGS=(./ ./plugins/cpu scikit-learn)
[ -x .venv/bin/python ] || { echo "demo: creating .venv"; "$PY" -m venv .venv; }
# what the install depends on: the package list, both pyproject files and every source file of core and the CPU plugin
stamp="$( { echo "${PKGS[*]}"; cat pyproject.toml plugins/cpu/pyproject.toml plugins/cpu/setup.py;
            find core plugins/cpu/plugin_cpu -type f \( -name '*.py' -o -name '*.c' -o -name '*.h' \) -print0 | sort -z | xargs -0 cat; } | sha256sum)"
if [ "$(cat .venv/.demo-stamp 2>/dev/null)" != "$stamp" ]; then
  echo "demo: installing core, plugin-cpu and scikit-learn into .venv (a minute the first time)..."
  .venv/bin/python -m pip install -q --disable-pip-version-check "${PKGS[@]}"
  echo "$stamp" > .venv/.demo-stamp
fi
exec .venv/bin/python examples/train_digits.py "$@"
