#!/usr/bin/env bash
# Idempotent set-up from nothing: Debian packages, the pinned Python environment (our LibTorch),
# and a configured + built tree. On a ready machine it takes seconds.
#
#   scripts/setup.sh               set up and build everything (build/), the tests' tools included
#   scripts/setup.sh --runtime     only what `wanfw run` needs: no test-only packages, the
#                                  wanfw_runtime target (every built-in plugin)
#   scripts/setup.sh --quickstart  as --runtime, building only what examples/quickstart.yaml runs
#   WANFW_BUILD_TYPE=Debug ...  another build type
#
# The virtual environment lives in a per-user cache keyed by the pinned requirements, and
# `.venv` links to it, so fresh clones reuse it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
log() { printf '[wanfw setup] %s\n' "$*"; }
runtime_only=false
target=""
case "${1:-}" in
  --runtime) runtime_only=true; target=wanfw_runtime ;;
  --quickstart) runtime_only=true; target=wanfw_quickstart ;;
esac

# --- 1. Debian packages -------------------------------------------------------------------
debs=(build-essential cmake ninja-build ccache pkg-config python3-venv time
      libboost-dev libboost-filesystem-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
      doctest-dev nlohmann-json3-dev libgloo-dev zlib1g-dev
      libavformat-dev libavcodec-dev libavutil-dev libswscale-dev  # mp4 previews and decodes (FFmpeg)
      libgif-dev)  # animated GIF previews in TensorBoard
$runtime_only || debs+=(
      ffmpeg  # ffprobe: the tests read our mp4 files with an independent reader
      strace  # the test that counts what a resumed run opens of its checkpoint
      clang libclang-rt-dev llvm)  # clang, its libFuzzer/sanitizer runtimes, llvm-cov: the fuzz targets
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# --- 2. Python environment (pinned torch wheel = LibTorch) ---------------------------------
python_bin="${WANFW_PYTHON:-python3}"
req="$root/scripts/python-requirements.txt"
pyver="$("$python_bin" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
key="$(cat "$req" | sha256sum | cut -c1-12)"
cache="${WANFW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wanfw}"
venv="$cache/venv-py$pyver-$key"
# What training needs (the requirements above the tests' marker) first; the tests' packages when
# the whole set-up runs. .complete marks an environment with both.
if [ ! -f "$venv/.complete" ] && [ ! -f "$venv/.runtime-complete" ]; then
  log "creating Python environment $venv (one-time; downloads the pinned torch wheel)"
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python_bin" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r <(sed '/^# --- tests/q' "$req")
  touch "$venv/.runtime-complete"
fi
if ! $runtime_only && [ ! -f "$venv/.complete" ]; then
  log "installing the tests' Python packages into $venv"
  "$venv/bin/python" -m pip install -q -r "$req"
  touch "$venv/.complete"
fi
if [ "$(readlink .venv 2>/dev/null)" != "$venv" ]; then
  rm -rf .venv
  ln -s "$venv" .venv
fi

# --- 3. Configure and build ----------------------------------------------------------------
build_dir="${WANFW_BUILD_DIR:-build}"
if [ ! -f "$build_dir/build.ninja" ]; then
  torch_prefix="$(.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  log "configuring $build_dir against LibTorch at $torch_prefix"
  cmake -S . -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE="${WANFW_BUILD_TYPE:-Release}" \
    -DCMAKE_PREFIX_PATH="$torch_prefix" \
    -DWANFW_PYTHON="$root/.venv/bin/python" \
    ${WANFW_CMAKE_ARGS:-}
fi
if $runtime_only; then
  log "building $build_dir (the $target target)"
  cmake --build "$build_dir" --target "$target"
else
  log "building $build_dir"
  cmake --build "$build_dir"
fi
