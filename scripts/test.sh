#!/usr/bin/env bash
# Set up (idempotent), build, and run the whole test suite through CTest.
# Extra arguments go to ctest (e.g. -R unit. to run the unit tests only).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root/${WANFW_BUILD_DIR:-build}"
exec ctest --output-on-failure --parallel "${WANFW_TEST_JOBS:-2}" --timeout 900 "$@"
