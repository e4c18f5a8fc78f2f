#!/usr/bin/env bash
# Install splattrain with its test dependencies (the test extras) and run the test suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SPLATTRAIN_SETUP=test source scripts/setup.sh
python -m pytest -q -n 2 --dist loadfile "$@"
