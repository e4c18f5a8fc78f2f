#!/usr/bin/env bash
# Create (or reuse) a virtual environment and install splattrain into it: with its runtime
# dependencies only, or with SPLATTRAIN_SETUP=test also the test extras (scripts/test.sh).
# torch is installed first, pinned, so pip does not pull a multi-GB CUDA build on CPU
# machines. Override the venv location with SPLATTRAIN_VENV.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="${SPLATTRAIN_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install --quiet --upgrade pip
if ! python -c "import torch" >/dev/null 2>&1; then
  python -m pip install --quiet "torch==${SPLATTRAIN_TORCH_VERSION:-2.13.0}"
fi
if [ "${SPLATTRAIN_SETUP:-}" = test ]; then
  python -m pip install --quiet -e ".[test]"
  # The dvclive writer's test runs the real package in a folder of its own: dvclive's dvc pins
  # hydra-core, which caps omegaconf below 2.4, and splattrain is tested with omegaconf 2.4.
  # The packages both need are held at this environment's versions (omegaconf aside), so pip
  # finds no conflict between the two.
  if [ ! -d "$venv/dvclive-packages" ]; then
    python -m pip freeze --exclude-editable | grep -v -i -e '^omegaconf==' -e ' @ ' >"$venv/dvclive-constraints.txt"
    python -m pip install --quiet --no-warn-script-location --target "$venv/dvclive-packages" \
      -c "$venv/dvclive-constraints.txt" "dvclive>=3.40"
  fi
else
  python -m pip install --quiet -e .
fi
