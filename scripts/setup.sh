#!/usr/bin/env bash
# Create (or reuse) a virtual environment and install splattrain into it.
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
python -m pip install --quiet -e ".[test]"
# The dvclive writer's tests use the real package. dvclive's dvc pins hydra-core, which caps
# omegaconf below 2.4; the writer does not use hydra, so omegaconf is put back to the version
# splattrain is tested with (pip reports the hydra-core conflict; it is expected).
python -m pip install --quiet "dvclive>=3.40"
python -m pip install --quiet --upgrade "omegaconf>=2.4"
