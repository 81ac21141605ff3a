// The Wan block's elementwise chains as CUDA kernels (block_kernels_cuda.hpp says what each
// computes). Rows are reduced by one block of kThreads threads each; sums over rows (weight and
// modulation gradients) go through per-block partials added in block order, so results do not
// depend on scheduling.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/block_kernels_cuda.hpp"

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

// --- RMSNorm ---------------------------------------------------------------------------------

__global__ void rms_norm_forward_kernel(Dtype xt, const void* x, Dtype wt, const void* w, Dtype yt, void* y,
                                        float* rstd, std::int64_t dim, float eps) {
  __shared__ float shared[32];
  const std::int64_t base = blockIdx.x * dim;
  float squares = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = load(x, xt, base + i);
    squares += v * v;
  }
  const float s = 1.0f / sqrtf(block_sum(squares, shared) / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = s;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    store(y, yt, base + i, round_to(xt, load(x, xt, base + i) * s) * load(w, wt, i));
}

__global__ void rms_norm_backward_kernel(Dtype gt, const void* g, Dtype xt, const void* x, Dtype wt, const void* w,
                                         const float* rstd, void* dx, std::int64_t dim) {
  __shared__ float shared[32];
  const std::int64_t base = blockIdx.x * dim;
  const float s = rstd[blockIdx.x];
  float dot = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    dot += (load(g, gt, base + i) * load(w, wt, i)) * (load(x, xt, base + i) * s);
  const float mean_dot = block_sum(dot, shared) / static_cast<float>(dim);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float n = load(x, xt, base + i) * s;
    store(dx, xt, base + i, s * (load(g, gt, base + i) * load(w, wt, i) - n * mean_dot));
  }
}

/// partials[block, c] = sum over the block's rows r of g[r, c] * round_x(x[r, c] * rstd[r]).
__global__ void rms_norm_weight_partials_kernel(Dtype gt, const void* g, Dtype xt, const void* x, const float* rstd,
                                                float* partials, std::int64_t rows, std::int64_t dim) {
  const std::int64_t c = blockIdx.y * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(kThreads);
  const std::int64_t last = min(rows, first + kThreads);
  float acc = 0.0f;
  for (std::int64_t r = first; r < last; ++r)
    acc += load(g, gt, r * dim + c) * round_to(xt, load(x, xt, r * dim + c) * rstd[r]);
  partials[blockIdx.x * dim + c] = acc;
}

/// out[group, c] = sum over b < count of partials[group, b, c], in order.
__global__ void sum_partials_kernel(const float* partials, float* out, std::int64_t count, std::int64_t dim) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  const float* p = partials + blockIdx.y * count * dim;
  float acc = 0.0f;
  for (std::int64_t b = 0; b < count; ++b) acc += p[b * dim + c];
  out[blockIdx.y * dim + c] = acc;
}

// --- modulated LayerNorm ----------------------------------------------------------------------

__device__ __forceinline__ std::int64_t modulation_row(std::int64_t row, std::int64_t tokens, bool per_token) {
  return per_token ? row : row / tokens;
}

__global__ void modulated_layer_norm_forward_kernel(Dtype xt, const void* x, const float* scale, const float* shift,
                                                    void* y, float* mean, float* rstd, std::int64_t tokens,
                                                    std::int64_t dim, bool per_token, float eps) {
  __shared__ float shared[32];
  const std::int64_t row = blockIdx.x, base = row * dim;
  const std::int64_t mod = modulation_row(row, tokens, per_token) * dim;
  float sum = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += load(x, xt, base + i);
  const float m = block_sum(sum, shared) / static_cast<float>(dim);
  float squares = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float d = load(x, xt, base + i) - m;
    squares += d * d;
  }
  const float s = 1.0f / sqrtf(block_sum(squares, shared) / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    store(y, xt, base + i, ((load(x, xt, base + i) - m) * s) * (1.0f + scale[mod + i]) + shift[mod + i]);
}

__global__ void modulated_layer_norm_backward_kernel(Dtype gt, const void* g, Dtype xt, const void* x,
                                                     const float* scale, const float* mean, const float* rstd, void* dx,
                                                     float* scale_grad, float* shift_grad, std::int64_t tokens,
                                                     std::int64_t dim, bool per_token) {
  __shared__ float shared[32];
  const std::int64_t row = blockIdx.x, base = row * dim;
  const std::int64_t mod = modulation_row(row, tokens, per_token) * dim;
  const float m = mean[row], s = rstd[row];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float gs = load(g, gt, base + i) * (1.0f + scale[mod + i]);
    sum_g += gs;
    sum_gx += gs * ((load(x, xt, base + i) - m) * s);
  }
  const float mean_g = block_sum(sum_g, shared) / static_cast<float>(dim);
  const float mean_gx = block_sum(sum_gx, shared) / static_cast<float>(dim);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float gi = load(g, gt, base + i);
    const float x_hat = (load(x, xt, base + i) - m) * s;
    store(dx, xt, base + i, s * ((gi * (1.0f + scale[mod + i]) - mean_g) - x_hat * mean_gx));
    if (per_token) {
      scale_grad[base + i] = gi * x_hat;
      shift_grad[base + i] = gi;
    }
  }
}

/// Per-sample modulation: partials[0 or 1][sample][block][c] = sum over the block's tokens of
/// g * x_hat (scale) and of g (shift).
__global__ void modulation_partials_kernel(Dtype gt, const void* g, Dtype xt, const void* x, const float* mean,
                                           const float* rstd, float* partials, std::int64_t samples,
                                           std::int64_t tokens, std::int64_t dim) {
  const std::int64_t c = blockIdx.y * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  const std::int64_t blocks = (tokens + kThreads - 1) / kThreads;
  const std::int64_t sample = blockIdx.x / blocks, block = blockIdx.x % blocks;
  const std::int64_t first = sample * tokens + block * kThreads;
  const std::int64_t last = min(sample * tokens + tokens, first + kThreads);
  float scale_acc = 0.0f, shift_acc = 0.0f;
  for (std::int64_t r = first; r < last; ++r) {
    const float gi = load(g, gt, r * dim + c);
    scale_acc += gi * ((load(x, xt, r * dim + c) - mean[r]) * rstd[r]);
    shift_acc += gi;
  }
  const std::int64_t out = (sample * blocks + block) * dim + c;
  partials[out] = scale_acc;
  partials[samples * blocks * dim + out] = shift_acc;
}

// --- gated residual ---------------------------------------------------------------------------

__global__ void gated_residual_forward_kernel(Dtype xt, const void* x, Dtype yt, const void* y, const float* gate,
                                              Dtype ot, void* out, std::int64_t n, std::int64_t tokens,
                                              std::int64_t dim, bool per_token) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::int64_t row = i / dim, c = i % dim;
  const float gv = gate[modulation_row(row, tokens, per_token) * dim + c];
  store(out, ot, i, load(x, xt, i) + load(y, yt, i) * gv);
}

__global__ void gated_residual_backward_kernel(Dtype gt, const void* g, Dtype yt, const void* y, const float* gate,
                                               Dtype xt, void* dx, void* dy, float* gate_grad, std::int64_t n,
                                               std::int64_t tokens, std::int64_t dim, bool per_token) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::int64_t row = i / dim, c = i % dim;
  const float gi = load(g, gt, i);
  store(dx, xt, i, gi);
  store(dy, yt, i, gi * gate[modulation_row(row, tokens, per_token) * dim + c]);
  if (per_token) gate_grad[i] = gi * load(y, yt, i);
}

__global__ void gate_partials_kernel(Dtype gt, const void* g, Dtype yt, const void* y, float* partials,
                                     std::int64_t tokens, std::int64_t dim) {
  const std::int64_t c = blockIdx.y * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  const std::int64_t blocks = (tokens + kThreads - 1) / kThreads;
  const std::int64_t sample = blockIdx.x / blocks, block = blockIdx.x % blocks;
  const std::int64_t first = sample * tokens + block * kThreads;
  const std::int64_t last = min(sample * tokens + tokens, first + kThreads);
  float acc = 0.0f;
  for (std::int64_t r = first; r < last; ++r) acc += load(g, gt, r * dim + c) * load(y, yt, r * dim + c);
  partials[(sample * blocks + block) * dim + c] = acc;
}

// --- RoPE -------------------------------------------------------------------------------------

__global__ void rope_kernel(Dtype xt, const void* x, const float* rotations, Dtype ot, void* out, std::int64_t n,
                            std::int64_t tokens, std::int64_t heads, std::int64_t pairs, bool conjugate) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;  // a pair
  if (i >= n) return;
  const std::int64_t j = i % pairs, token = (i / (pairs * heads)) % tokens;
  const float c = rotations[2 * (token * pairs + j)];
  const float s = conjugate ? -rotations[2 * (token * pairs + j) + 1] : rotations[2 * (token * pairs + j) + 1];
  const float a = load(x, xt, 2 * i), b = load(x, xt, 2 * i + 1);
  store(out, ot, 2 * i, a * c - b * s);
  store(out, ot, 2 * i + 1, a * s + b * c);
}

}  // namespace

int rms_norm_forward(Dtype xt, const void* x, Dtype wt, const void* weight, Dtype yt, void* y, float* rstd,
                     std::int64_t rows, std::int64_t dim, float eps, void* stream) {
  if (rows == 0) return 0;
  rms_norm_forward_kernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(xt, x, wt, weight, yt, y, rstd,
                                                                                    dim, eps);
  return launched();
}

int rms_norm_backward(Dtype gt, const void* g, Dtype xt, const void* x, Dtype wt, const void* weight,
                      const float* rstd, void* dx, float* weight_grad, float* partials, std::int64_t rows,
                      std::int64_t dim, void* stream) {
  if (rows == 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  rms_norm_backward_kernel<<<rows, kThreads, 0, s>>>(gt, g, xt, x, wt, weight, rstd, dx, dim);
  if (weight_grad != nullptr) {
    const dim3 grid(static_cast<unsigned>(blocks_of(rows)), static_cast<unsigned>(blocks_of(dim)));
    rms_norm_weight_partials_kernel<<<grid, kThreads, 0, s>>>(gt, g, xt, x, rstd, partials, rows, dim);
    sum_partials_kernel<<<dim3(static_cast<unsigned>(blocks_of(dim)), 1), kThreads, 0, s>>>(partials, weight_grad,
                                                                                         blocks_of(rows), dim);
  }
  return launched();
}

int modulated_layer_norm_forward(Dtype xt, const void* x, const float* scale, const float* shift, void* y,
                                 float* mean, float* rstd, std::int64_t samples, std::int64_t tokens,
                                 std::int64_t dim, bool per_token, float eps, void* stream) {
  if (samples * tokens == 0) return 0;
  modulated_layer_norm_forward_kernel<<<samples * tokens, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      xt, x, scale, shift, y, mean, rstd, tokens, dim, per_token, eps);
  return launched();
}

int modulated_layer_norm_backward(Dtype gt, const void* g, Dtype xt, const void* x, const float* scale,
                                  const float* mean, const float* rstd, void* dx, float* scale_grad, float* shift_grad,
                                  float* partials, std::int64_t samples, std::int64_t tokens, std::int64_t dim,
                                  bool per_token, void* stream) {
  if (samples * tokens == 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  modulated_layer_norm_backward_kernel<<<samples * tokens, kThreads, 0, s>>>(gt, g, xt, x, scale, mean, rstd, dx,
                                                                             scale_grad, shift_grad, tokens, dim,
                                                                             per_token);
  if (!per_token) {
    const std::int64_t blocks = blocks_of(tokens);
    const dim3 grid(static_cast<unsigned>(samples * blocks), static_cast<unsigned>(blocks_of(dim)));
    modulation_partials_kernel<<<grid, kThreads, 0, s>>>(gt, g, xt, x, mean, rstd, partials, samples, tokens, dim);
    const dim3 sums(static_cast<unsigned>(blocks_of(dim)), static_cast<unsigned>(samples));
    sum_partials_kernel<<<sums, kThreads, 0, s>>>(partials, scale_grad, blocks, dim);
    sum_partials_kernel<<<sums, kThreads, 0, s>>>(partials + samples * blocks * dim, shift_grad, blocks, dim);
  }
  return launched();
}

int gated_residual_forward(Dtype xt, const void* x, Dtype yt, const void* y, const float* gate, Dtype ot, void* out,
                           std::int64_t samples, std::int64_t tokens, std::int64_t dim, bool per_token, void* stream) {
  const std::int64_t n = samples * tokens * dim;
  if (n == 0) return 0;
  gated_residual_forward_kernel<<<blocks_of(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      xt, x, yt, y, gate, ot, out, n, tokens, dim, per_token);
  return launched();
}

int gated_residual_backward(Dtype gt, const void* g, Dtype yt, const void* y, const float* gate, Dtype xt, void* dx,
                            void* dy, float* gate_grad, float* partials, std::int64_t samples, std::int64_t tokens,
                            std::int64_t dim, bool per_token, void* stream) {
  const std::int64_t n = samples * tokens * dim;
  if (n == 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  gated_residual_backward_kernel<<<blocks_of(n), kThreads, 0, s>>>(gt, g, yt, y, gate, xt, dx, dy, gate_grad, n,
                                                                  tokens, dim, per_token);
  if (!per_token) {
    const std::int64_t blocks = blocks_of(tokens);
    const dim3 grid(static_cast<unsigned>(samples * blocks), static_cast<unsigned>(blocks_of(dim)));
    gate_partials_kernel<<<grid, kThreads, 0, s>>>(gt, g, yt, y, partials, tokens, dim);
    const dim3 sums(static_cast<unsigned>(blocks_of(dim)), static_cast<unsigned>(samples));
    sum_partials_kernel<<<sums, kThreads, 0, s>>>(partials, gate_grad, blocks, dim);
  }
  return launched();
}

int rope(Dtype xt, const void* x, const float* rotations, Dtype ot, void* out, std::int64_t batch, std::int64_t tokens,
         std::int64_t heads, std::int64_t pairs, bool conjugate, void* stream) {
  const std::int64_t n = batch * tokens * heads * pairs;
  if (n == 0) return 0;
  rope_kernel<<<blocks_of(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(xt, x, rotations, ot, out, n, tokens,
                                                                                heads, pairs, conjugate);
  return launched();
}

}  // namespace wan::kernels::cuda
