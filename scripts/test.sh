#!/usr/bin/env bash
# Set up (idempotent), build, and run the whole test suite through CTest; then the ten slowest
# tests (docs/building.md gives their budget), and CTest's verdict again as the last lines.
# Extra arguments go to ctest (e.g. -R unit. to run the unit tests only).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root/${WANFW_BUILD_DIR:-build}"
log="$PWD/ctest-last.log"
status=0
ctest --output-on-failure --parallel "${WANFW_TEST_JOBS:-2}" --timeout 900 "$@" 2>&1 | tee "$log" || status=$?
# "  12/650 Test #123: unit.a name with spaces ......   Passed   41.27 sec"
# (sed, not head: head closing the pipe early would fail the script under pipefail)
slowest="$(perl -ne 'printf "  %8.1f  %s\n", $2, $1 if /Test +#\d+: (.*?) \.{3,}.* ([\d.]+) sec$/' "$log" |
  sort -rn | sed -n '1,10p')" || true
if [ -n "$slowest" ]; then
  echo
  echo "The ten slowest tests (seconds):"
  printf '%s\n' "$slowest"
  grep -E '^(100% tests passed|[0-9]+% tests passed, [0-9]+ tests failed|Total Test time)' "$log" || true
fi
exit "$status"
