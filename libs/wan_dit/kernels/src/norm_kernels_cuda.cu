// RMSNorm and the modulated LayerNorm as CUDA kernels (block_kernels_cuda.hpp says what each
// computes). A row is reduced by one block of kThreads threads; sums over rows (the weight's and
// the modulation's gradients) go through per-block partials added in block order, so results do not
// depend on scheduling.
#include "block_kernels_cuda_common.cuh"

namespace wan::kernels::cuda {

namespace {

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
  const TokenBlock t = token_block(tokens);
  const std::int64_t c = t.column;
  if (c >= dim) return;
  float scale_acc = 0.0f, shift_acc = 0.0f;
  for (std::int64_t r = t.first; r < t.last; ++r) {
    const float gi = load(g, gt, r * dim + c);
    scale_acc += gi * ((load(x, xt, r * dim + c) - mean[r]) * rstd[r]);
    shift_acc += gi;
  }
  const std::int64_t out = (t.sample * t.blocks + t.block) * dim + c;
  partials[out] = scale_acc;
  partials[samples * t.blocks * dim + out] = shift_acc;
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

}  // namespace wan::kernels::cuda
