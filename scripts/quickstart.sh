#!/usr/bin/env bash
# Set up (idempotent), build what the quick start runs, and train examples/quickstart.yaml on the CPU.
# Extra arguments go to `wanfw run` (e.g. --set trainer.max_steps=100).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" --quickstart  # the test command builds and installs the rest
cd "$root"
exec build/bin/wanfw run examples/quickstart.yaml "$@"
