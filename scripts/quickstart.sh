#!/usr/bin/env bash
# Set up (idempotent), build, and train examples/quickstart.yaml on the CPU.
# Extra arguments go to `wanfw run` (e.g. --set trainer.max_steps=100).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
exec build/bin/wanfw run examples/quickstart.yaml "$@"
