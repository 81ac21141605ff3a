#!/usr/bin/env bash
# Packs the third-party C++ packages the build needs (headers, shared libraries, CMake package
# files of Boost, yaml-cpp, spdlog, fmt, nlohmann-json, doctest, Gloo, zlib, giflib), as scripts/setup.sh
# installs them, into one relocatable tarball: for building wanfw on a machine that has a
# compiler, CMake and a PyTorch but no package registry (an air-gapped GPU node, say).
#
#   scripts/pack-deps.sh OUT.tar.xz
#
# On the other machine (x86-64 Linux, glibc >= this one's):
#   mkdir -p deps && tar xJf OUT.tar.xz -C deps
#   cmake -S . -B build -G Ninja -DWANFW_MP4_WRITER=OFF -DCMAKE_PREFIX_PATH="$PWD/deps/usr;$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
#   cmake --build build
#   LD_LIBRARY_PATH=$PWD/deps/usr/lib/x86_64-linux-gnu build/bin/wanfw run ...
set -euo pipefail
out="${1:?usage: scripts/pack-deps.sh OUT.tar.xz}"
out="$(realpath -m "$out")"

# The -dev packages of scripts/setup.sh and the run-time libraries they link against.
packages=(libboost1.74-dev libboost-filesystem1.74-dev libboost-filesystem1.74.0 libboost-system1.74-dev
          libboost-system1.74.0 libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
          nlohmann-json3-dev doctest-dev libgloo-dev zlib1g-dev libgif-dev libgif7)
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    { echo "pack-deps: package $p is not installed; run scripts/setup.sh first" >&2; exit 1; }
  # Files and links only (dpkg -L also lists folders); docs stay behind.
  dpkg -L "$p" | grep -E '^/usr/(include|lib|share/cmake)/' | while read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    case "$f" in *.a) continue ;; esac  # shared libraries only: plugins are shared objects
    mkdir -p "$stage$(dirname "$f")"
    if [ -L "$f" ] && [[ "$(readlink "$f")" == /* ]]; then
      ln -sfn "$(basename "$(readlink "$f")")" "$stage$f"  # an absolute link would leave the prefix
    else
      cp -P "$f" "$stage$f"
    fi
  done
done
# zlib's run-time library lives in /lib on some layouts; the package above holds its -dev link only.
for f in /usr/lib/x86_64-linux-gnu/libz.so.1*; do cp -P "$f" "$stage/usr/lib/x86_64-linux-gnu/"; done
tar -C "$stage" -cf - usr | xz -T0 -6 >"$out"
echo "pack-deps: $(du -h "$out" | cut -f1) in $out"
