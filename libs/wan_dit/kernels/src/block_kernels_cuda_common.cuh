// What the block's CUDA kernels share (norm_kernels_cuda.cu, residual_rope_kernels_cuda.cu): loads
// and stores by dtype, the block-wide sum, and the in-order sum of per-block partials. Each
// translation unit gets its own copies (an anonymous namespace).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "block_kernels_cuda.hpp"

namespace wan::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // threads a block; also the rows a partial sum covers

__device__ __forceinline__ float load(const void* p, Dtype t, std::int64_t i) {
  return t == Dtype::Float32 ? static_cast<const float*>(p)[i]
                             : __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__device__ __forceinline__ void store(void* p, Dtype t, std::int64_t i, float v) {
  if (t == Dtype::Float32) static_cast<float*>(p)[i] = v;
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
}

/// `v` as a value of dtype `t` holds it (the rounding a cast to `t` applies).
__device__ __forceinline__ float round_to(Dtype t, float v) {
  return t == Dtype::Float32 ? v : __bfloat162float(__float2bfloat16(v));
}

/// The sum of every thread's `v`, returned to every thread of the block. `shared` holds 32 floats.
__device__ float block_sum(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (blockDim.x >> 5) ? shared[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  v = shared[0];
  __syncthreads();  // shared is free for the next sum
  return v;
}

int launched() { return static_cast<int>(cudaGetLastError()); }

std::int64_t blocks_of(std::int64_t n) { return (n + kThreads - 1) / kThreads; }

/// out[group, c] = sum over b < count of partials[group, b, c], in order.
__global__ void sum_partials_kernel(const float* partials, float* out, std::int64_t count, std::int64_t dim) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  const float* p = partials + blockIdx.y * count * dim;
  float acc = 0.0f;
  for (std::int64_t b = 0; b < count; ++b) acc += p[b * dim + c];
  out[blockIdx.y * dim + c] = acc;
}

__device__ __forceinline__ std::int64_t modulation_row(std::int64_t row, std::int64_t tokens, bool per_token) {
  return per_token ? row : row / tokens;
}

/// What one thread of a per-sample partial-sum kernel covers: column `column` of the rows
/// [first, last) of token block `block` of sample `sample` (grid: x = samples x blocks token
/// blocks, y = column blocks). Its partial goes to (sample * blocks + block) * dim + column.
struct TokenBlock {
  std::int64_t column, sample, block, blocks, first, last;
};

__device__ __forceinline__ TokenBlock token_block(std::int64_t tokens) {
  TokenBlock t;
  t.column = blockIdx.y * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  t.blocks = (tokens + kThreads - 1) / kThreads;
  t.sample = blockIdx.x / t.blocks;
  t.block = blockIdx.x % t.blocks;
  t.first = t.sample * tokens + t.block * kThreads;
  t.last = min(t.sample * tokens + tokens, t.first + kThreads);
  return t;
}

}  // namespace

}  // namespace wan::kernels::cuda
