#!/usr/bin/env bash
# Install splattrain with its test dependencies and run the test suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
python -m pytest -q "$@"
