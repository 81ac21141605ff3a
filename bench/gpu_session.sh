#!/usr/bin/env bash
# wanfw's GPU checks in one go, on a machine with a CUDA GPU, its own PyTorch, CMake and Ninja and
# no package registry (docs/building.md): build against that torch, the CUDA kernel and optimizer
# tests, every GPU training path of the tiny model, then the step benchmarks beside diffusers.
# Stages run in that order (the first minutes give the most); each has its own time limit, so a
# stage that hangs costs only its own. Logs and figures go to OUT.
#
#   bench/gpu_session.sh DEPS.tar.xz OUT [STAGE...]
#     DEPS.tar.xz  scripts/pack-deps.sh's tarball (the C++ packages)
#     STAGE        build kernels paths bench-1.3b bench-5b attention low-memory-check bench-low-memory
#                  bench-chunked (one A14B block's backward at 32,760 tokens, whole and in chunks)
#                  bench-host-optimizer (the optimizer step with its state on the GPU and on the host)
#                  bench-host-state (a 1.3B step trained whole, the state on the GPU and on the host)
#                  build-decode vae (the CLI and the model plugins alone; the VAE decode beside diffusers)
#                  (default: build kernels paths bench-1.3b bench-5b attention, in this order)
# Python packages the machine lacks (diffusers for the benchmarks) may sit as wheels in .whl/.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps_tar="${1:?usage: bench/gpu_session.sh DEPS.tar.xz OUT [STAGE...]}"
out="${2:?usage: bench/gpu_session.sh DEPS.tar.xz OUT [STAGE...]}"
shift 2
stages=("$@")
((${#stages[@]})) || stages=(build kernels paths bench-1.3b bench-5b attention)
mkdir -p "$out"
log="$out/session.log"
summary="$out/summary.txt"
cd "$root"
deps=/tmp/wanfw-deps
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/wanfw-site \
    .whl/*.whl >>"$log" 2>&1 && export PYTHONPATH=/tmp/wanfw-site
fi

stage() {  # stage NAME SECONDS COMMAND...: runs it, logs it, one line in the summary
  local name="$1" limit="$2"
  shift 2
  local started=$SECONDS
  echo "=== $name: $*" | tee -a "$log"
  timeout --kill-after=10 "$limit" bash -c "$*" 2>&1 | tee -a "$log" | tail -n 40
  local rc=${PIPESTATUS[0]}
  printf '%-12s rc %-3s %4ss\n' "$name" "$rc" "$((SECONDS - started))" | tee -a "$summary"
  return "$rc"
}

build() {  # build [TARGET...]: the CLI, the unit tests and every plugin unless targets are named
  [ -d "$deps/usr" ] || { mkdir -p "$deps" && tar xJf "$deps_tar" -C "$deps"; }
  local torch_prefix
  torch_prefix="$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  # Warnings are counted, not fatal: a gcc 13 warning must not cost the rest of the session. The
  # machine has no FFmpeg: no mp4 writer (the benchmarks write frames, previews GIFs).
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DWANFW_WERROR=OFF -DTORCH_CUDA_ARCH_LIST=9.0 \
    -DWANFW_MP4_WRITER=OFF -DCMAKE_PREFIX_PATH="$deps/usr;$torch_prefix" -DWANFW_PYTHON="$(command -v python3)" \
    >/dev/null || return 1
  local targets=("$@")
  ((${#targets[@]})) ||
    targets=(wanfw wanfw_unit_tests wanfw_bench_chunked_recompute wanfw_bench_host_optimizer $(grep -rhoE 'wanfw_add_builtin_plugin\(\w+' plugins | sed 's/.*(//' | grep -v '_$'))
  time cmake --build build -j16 -- -k 0 "${targets[@]}" >>"$out/build.log" 2>&1
  local rc=$?
  echo "warnings: $(grep -c 'warning:' "$out/build.log")"
  grep -A3 'warning:\|error:' "$out/build.log" | head -60
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
  return $rc
}

kernels() {
  build/bin/wanfw_unit_tests -tc='*fused CUDA*,*on a GPU*,*fused AdamW*' -s 2>&1 | grep -v '^$' | tail -n 40
  return "${PIPESTATUS[0]}"
}

export -f build kernels
export deps deps_tar out
for s in "${stages[@]}"; do
  case "$s" in
    build) stage build 300 build ;;
    build-decode) stage build-decode 240 build wanfw wanfw_model_wan22_flow_matching ;;
    vae)  # 81 frames at 480x832 (21 latent frames), each VAE, bf16 then fp32
      for dtype in bfloat16 float32; do
        for vae in wan2.1 wan2.2; do
          stage "vae-$vae-$dtype" 150 python3 bench/vae_decode.py --vae "$vae" --frames 21 --video-size 480x832 \
            --device cuda --dtype "$dtype" --repeat 1
        done
      done ;;
    kernels) stage kernels 90 kernels ;;
    paths) stage paths 200 python3 bench/gpu_paths.py --steps 40 ;;
    bench-1.3b) stage bench-1.3b 330 python3 bench/gpu_step.py --shape 1.3b --steps 4 --warmup 2 --profile 1 \
                  --trace-out "$out/profile-1.3b.json.gz" ;;
    attention)
      for kernel in cudnn flash efficient; do
        stage "attn-$kernel" 70 python3 bench/gpu_step.py --shape 1.3b --steps 2 --warmup 1 --sides wanfw \
          --attention "$kernel"
      done ;;
    bench-1.3b-checkpointed) stage bench-1.3b-ckpt 170 python3 bench/gpu_step.py --shape 1.3b --checkpointing \
                  --steps 3 --warmup 1 ;;
    bench-1.3b-wanfw) stage bench-1.3b-wanfw 60 python3 bench/gpu_step.py --shape 1.3b --steps 3 --warmup 1 \
                  --sides wanfw ;;
    bench-5b) stage bench-5b 180 python3 bench/gpu_step.py --shape 5b-lora --steps 2 --warmup 1 ;;
    low-memory-check) stage low-memory-check 120 python3 bench/low_memory_step.py --size small --device cuda \
                        --steps 6 --check ;;
    bench-low-memory) stage bench-low-memory 360 python3 bench/low_memory_step.py --size 5b --device cuda \
                        --steps 5 ;;
    bench-chunked) stage bench-chunked 240 build/bin/wanfw_bench_chunked_recompute --device cuda --dtype bfloat16 \
                     --fp8 --tokens 32760 --chunks 1,2,4,8 ;;
    bench-host-optimizer) stage bench-host-optimizer 180 build/bin/wanfw_bench_host_optimizer --device cuda \
        --compute bfloat16 --preset wan2.2-ti2v-5b --blocks 6 --steps 5 ;;
    bench-host-state) stage bench-host-state 300 python3 bench/host_state_step.py --size 1.3b --device cuda \
        --steps 5 --rounds 1 ;;
    *) echo "unknown stage $s" | tee -a "$summary" ;;
  esac
done
cat "$summary"
