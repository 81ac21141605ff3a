#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz, clang + libFuzzer + ASan/UBSan) and runs each for a while.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   run TARGETs (default: all) SECONDS each (default 60)
#   scripts/fuzz.sh --build-only            configure and build only
#   scripts/fuzz.sh --coverage [TARGET...]  line coverage of wanfw's sources by the corpora (llvm-cov)
#
# Targets: one a harness, tests/fuzz/fuzz_<target>.cpp (safetensors_reader, config_loader, ...).
# Each starts from its checked-in seed corpus (tests/fuzz/corpus/TARGET) and grows a working
# corpus in <build>/fuzz/corpus/TARGET, kept between runs. A finding stops the run: the input is
# saved in <build>/fuzz/findings/TARGET/ and the script exits non-zero; replay it with
# <build>/fuzz/bin/fuzz_TARGET FILE.
# The last line per target gives executions and coverage (libFuzzer's edge count "cov").
# WANFW_FUZZ_RUNS=N also stops each target after N executions (whichever comes first).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${WANFW_BUILD_DIR:-$root/build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
fuzz_build="$build/fuzz"
all_targets=()
for harness in "$root"/tests/fuzz/fuzz_*.cpp; do
  harness="${harness##*/fuzz_}"
  all_targets+=("${harness%.cpp}")
done
log() { printf '[wanfw fuzz] %s\n' "$*"; }

build_only=0
coverage=0
seconds=60
if [ "${1:-}" = "--build-only" ]; then build_only=1; shift
elif [ "${1:-}" = "--coverage" ]; then coverage=1; shift
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then seconds="$1"; shift
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "scripts/fuzz.sh: unknown target '$t' (known: ${all_targets[*]})" >&2; exit 2; }
done

command -v clang++ >/dev/null || { echo "scripts/fuzz.sh: clang++ not found; scripts/setup.sh installs it" >&2; exit 2; }
corpora="$fuzz_build/corpus"  # grown by the sanitizer build's runs; the coverage build reads them
cmake_args=()
if [ $coverage -eq 1 ]; then
  fuzz_build="$build/fuzz-coverage"
  cmake_args=(-DWANFW_FUZZ_COVERAGE=ON)
fi
if [ ! -f "$fuzz_build/build.ninja" ]; then
  torch_prefix="$("$root/.venv/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  log "configuring $fuzz_build (clang, libFuzzer, $([ $coverage -eq 1 ] && echo coverage || echo ASan/UBSan))"
  mkdir -p "$fuzz_build"
  cmake -S "$root/tests/fuzz" -B "$fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_PREFIX_PATH="$torch_prefix" "${cmake_args[@]}" \
    >"$fuzz_build/configure.log" 2>&1 || { cat "$fuzz_build/configure.log"; exit 1; }
fi
cmake --build "$fuzz_build" -- -j "${WANFW_FUZZ_JOBS:-2}" >"$fuzz_build/build.log" 2>&1 ||
  { cat "$fuzz_build/build.log"; exit 1; }
for t in "${all_targets[@]}"; do
  [ -x "$fuzz_build/bin/fuzz_$t" ] || { echo "scripts/fuzz.sh: the build did not produce fuzz_$t" >&2; exit 1; }
done
[ $build_only -eq 0 ] || exit 0

if [ $coverage -eq 1 ]; then
  for t in "${targets[@]}"; do
    mkdir -p "$corpora/$t"
    LLVM_PROFILE_FILE="$fuzz_build/$t.profraw" "$fuzz_build/bin/fuzz_$t" -runs=0 -max_len=65536 \
      "$corpora/$t" "$root/tests/fuzz/corpus/$t" >"$fuzz_build/$t.log" 2>&1
    llvm-profdata merge -sparse "$fuzz_build/$t.profraw" -o "$fuzz_build/$t.profdata"
    log "$t: lines of wanfw's sources run by its corpus ($(ls "$corpora/$t" | wc -l) inputs + seeds)"
    llvm-cov report "$fuzz_build/bin/fuzz_$t" -instr-profile="$fuzz_build/$t.profdata" "$root/core/src" "$root/libs/wan_dit" "$root/libs/wan_vae" "$root/libs/latent_shards/src" |
      awk '$1 ~ /\.(cpp|hpp)$|^TOTAL$/ { printf "  %-26s lines %5d  missed %4d  %7s  branches %7s\n", $1, $8, $9, $10, $13 }' 
  done
  exit 0
fi

# LibTorch itself is not instrumented: ODR checks across it and leaks of its static state are
# not ours to report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:detect_odr_violation=0:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for t in "${targets[@]}"; do
  corpus="$fuzz_build/corpus/$t"
  findings="$fuzz_build/findings/$t"
  mkdir -p "$corpus" "$findings"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1
        -artifact_prefix="$findings/")
  [ -f "$root/tests/fuzz/$t.dict" ] && args+=(-dict="$root/tests/fuzz/$t.dict")
  [ -n "${WANFW_FUZZ_RUNS:-}" ] && args+=(-runs="$WANFW_FUZZ_RUNS")
  log "$t: ${seconds}s"
  output="$fuzz_build/$t.log"
  if "$fuzz_build/bin/fuzz_$t" "${args[@]}" "$corpus" "$root/tests/fuzz/corpus/$t" >"$output" 2>&1; then
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$output" | awk '{print $2}')
    cov=$(grep -E '^#[0-9]+' "$output" | tail -1 | grep -o 'cov: [0-9]*' | awk '{print $2}')
    log "$t: no findings; ${execs:-?} executions, ${cov:-?} edges covered, $(ls "$corpus" | wc -l) corpus inputs"
  else
    status=1
    tail -n 60 "$output"
    log "$t: FINDING; the input is in $findings/ (replay: $fuzz_build/bin/fuzz_$t FILE)"
  fi
done
exit $status
