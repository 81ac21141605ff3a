#!/usr/bin/env bash
# Set up (idempotent), build, and run the whole test suite through CTest; then the ten slowest
# CTest entries and the ten slowest test functions (docs/building.md gives their budget), what did
# not run and why (scripts/not_run.py), and CTest's verdict again as the last lines.
# Extra arguments go to ctest (e.g. -L unit to run the unit tests only).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root/${WANFW_BUILD_DIR:-build}"
log="$PWD/ctest-last.log"
rm -rf test-results  # each integration entry writes its tests' times there (JUnit XML)
status=0
# One CTest job a core, as many as the memory holds at 4 GiB a job (an 8-rank torchrun entry
# peaks near that); the 2-core, 24 GiB machine runs 2. WANFW_TEST_JOBS overrides.
cores="$(nproc)"
memory_gib="$(awk '/^MemTotal:/ { print int($2 / 1048576) }' /proc/meminfo)"
jobs=$(( cores < memory_gib / 4 ? cores : memory_gib / 4 ))
jobs=$(( jobs > 0 ? jobs : 1 ))
ctest --output-on-failure --parallel "${WANFW_TEST_JOBS:-$jobs}" --timeout 900 "$@" 2>&1 | tee "$log" || status=$?
# "  12/150 Test #123: integration.dmd ......   Passed   41.27 sec"
# (sed, not head: head closing the pipe early would fail the script under pipefail)
slowest="$(perl -ne 'printf "  %8.1f  %s\n", $2, $1 if /Test +#\d+: (.*?) \.{3,}.* ([\d.]+) sec$/' "$log" |
  sort -rn | sed -n '1,10p')" || true
if [ -n "$slowest" ]; then
  echo
  echo "The ten slowest CTest entries (seconds):"
  printf '%s\n' "$slowest"
  if [ -d test-results ]; then
    echo "The ten slowest test functions (seconds, as pytest timed them):"
    "$root/.venv/bin/python" "$root/scripts/slowest_tests.py" test-results 10 || true
  fi
  "$root/.venv/bin/python" "$root/scripts/not_run.py" . || true
  grep -E '^(100% tests passed|[0-9]+% tests passed, [0-9]+ tests failed|Total Test time)' "$log" || true
fi
exit "$status"
