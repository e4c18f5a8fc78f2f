#!/usr/bin/env bash
# Install splattrain (runtime dependencies only) and train the shipped demo scene (outputs/demo/).
# Extra arguments are passed on as config overrides, e.g. trainer.max_steps=500.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
splattrain fit --config configs/demo.yaml "$@"
